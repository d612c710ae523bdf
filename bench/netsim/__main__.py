"""CLI: ``python -m bench.netsim up|down|status|env|measure`` (root for all but env)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from bench.netsim.link import PROFILES, Shape, State, down, load_state, status, up
from bench.netsim.system import NetsimError


def _exports(state: State) -> str:
    lines = [f"export {k}={shlex.quote(v)}" for k, v in state.env().items()]
    return "\n".join([*lines, f"# netsim: {state.shape.describe()}, queue {state.shape.queue_ms:g} ms"])


def _shape(args: argparse.Namespace) -> Shape:
    base = PROFILES[args.profile]
    return Shape(args.rtt_ms if args.rtt_ms is not None else base.rtt_ms,
                 args.rate_mbit if args.rate_mbit is not None else base.rate_mbit,
                 args.queue_ms if args.queue_ms is not None else base.queue_ms)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.netsim", description=__doc__)
    parser.add_argument("command", choices=["up", "down", "status", "env", "measure"])
    parser.add_argument("--profile", choices=sorted(PROFILES), default="regional",
                        help="up: a named link (regional 80 ms/400 Mbit/s, long-fat 80 ms/2000 Mbit/s)")
    parser.add_argument("--rtt-ms", type=float, help="up: added round-trip time (0: no delay)")
    parser.add_argument("--rate-mbit", type=float, help="up: rate per direction (0: unlimited)")
    parser.add_argument("--seconds", type=float, default=8.0, help="measure: how long to download")
    parser.add_argument("--streams", type=int, default=8, help="measure: parallel TCP streams")
    parser.add_argument("--queue-ms", type=float, help="up: bottleneck buffer at that rate (default 50)")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            print(_exports(up(_shape(args))))
        elif args.command == "down":
            down()
            print("netsim: down")
        elif args.command == "measure":
            from bench.netsim.measure import connect_ms, download

            print(json.dumps({"connect_ms": round(connect_ms(), 1), **download(args.seconds, args.streams)}))
        elif args.command == "env":
            state = load_state()
            if state is None:
                print("netsim: the link is down (run: python -m bench.netsim up)", file=sys.stderr)
                return 3
            print(_exports(state))
        else:
            report = status()
            print(json.dumps(report, indent=1))
            return 0 if report.get("up") and report.get("server_alive") and "connect_ms" in report else 3
    except NetsimError as exc:
        print(f"netsim: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
