"""A warm hit's py-spy profile (``python -m bench.hitpath --py-spy DIR``: raw collapsed stacks)
split into the hit path's stages: each stack counts for the first stage whose frame it holds.

    python -m bench.spy_stages DIR/hit4k.txt 433     # 433: the CPU µs per hit, for a µs column
"""

from __future__ import annotations

import collections
import sys

RULES = [  # (stage, frame substring), checked per stack: the first stage whose frame occurs
    ("SigV4 verify (cached signing key)", "S3App._authenticate"),
    ("catalog lookups (journal newest + cache entry)", "ReadsService._lookup"),
    ("block file read (open, fstat, pread, close)", "Serving._small_hit"),
    ("block file read (open, fstat, pread, close)", "Serving._stream"),
    ("block file read (open, fstat, pread, close)", "Serving._segments"),
    ("policy lookup", "GatewayCore.policy"),
    ("tenancy authorize", "S3App._authorize"),
    ("request parse (headers, target, query) + route", "S3App._parse"),
    ("request parse (headers, target, query) + route", "resolve (app/s3/router.py"),
    ("metrics + request id + slow log", "request_started"),
    ("metrics + request id + slow log", "request_finished"),
    ("metrics + request id + slow log", "cache_outcome"),
    ("metrics + request id + slow log", "_outcome (app/services"),
    ("metrics + request id + slow log", "served_bytes"),
    ("metrics + request id + slow log", "new_request_id"),
    ("metrics + request id + slow log", "set_operation"),
    ("metrics + request id + slow log", "mark_authorized"),
    ("response send (uvicorn send, socket write)", "RequestResponseCycle.send"),
    ("response headers (object headers, encoding)", "object_headers"),
    ("response headers (object headers, encoding)", "S3App._send"),
    ("rest of the GET handler and service", "get_object (app/s3/handlers"),
    ("rest of S3App (deadline watch, context)", "S3App."),
    ("uvicorn/httptools: parse, task start, protocol", "httptools_impl"),
    ("uvicorn/httptools: parse, task start, protocol", "app/server/headers.py"),
    ("uvicorn/httptools: parse, task start, protocol", "ProxyHeadersMiddleware"),
    ("uvicorn/httptools: parse, task start, protocol", "FerryApp"),
]


def main() -> None:
    stage: collections.Counter[str] = collections.Counter()
    tot = 0
    with open(sys.argv[1]) as f:
        lines = f.readlines()
    for line in lines:
        stack, count = line.rsplit(" ", 1)
        n = int(count)
        leaf = stack.rsplit(";", 1)[-1]
        if "Condition.wait" in leaf or "_heartbeat" in leaf or "select (selectors" in leaf:
            continue  # waiting, not running (py-spy's idle detection misses these here)
        tot += n
        if "Thread._bootstrap" in stack:
            stage["other threads (chores, heartbeat, pool)"] += n
            continue
        name = next((name for name, sub in RULES if sub in stack), "event loop (uvloop native, asyncio, GC)")
        stage[name] += n
    cpu = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    print("samples", tot)
    for k, v in stage.most_common():
        print(f"| {k} | {100 * v / tot:.1f}% | {cpu * v / tot:.0f} |")


if __name__ == "__main__":
    main()
