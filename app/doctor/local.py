"""Checks that need nothing but this machine: settings, data directory, TLS files, admin token."""

from __future__ import annotations

import fcntl
import os
import shutil
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

from app.adapters.local.datadir import LOCK_NAME
from app.config import Settings
from app.disk_room import held_bytes
from app.doctor import Finding

# Filesystems where an fsync'd write does not survive a power loss or a reboot.
_VOLATILE_FS = {"tmpfs", "ramfs", "overlay"}


def check_settings(settings: Settings) -> Iterator[Finding]:
    """Settings loaded; what is missing for a node to serve S3 through a remote."""
    yield Finding("ok", "settings", f"loaded (node {settings.node_id}, data dir {settings.data_dir})")
    if not settings.remote_endpoint:
        yield Finding("warn", "settings", "FERRY_REMOTE_ENDPOINT is not set: the remote is AWS S3 "
                      "with the AWS default credential chain")
    if settings.remote_endpoint and not (settings.remote_access_key and settings.remote_secret_key):
        yield Finding("warn", "settings", "FERRY_REMOTE_ACCESS_KEY/FERRY_REMOTE_SECRET_KEY not set: "
                      "the AWS default credential chain is used for the remote")


def check_admin_token(settings: Settings) -> Iterator[Finding]:
    token = settings.admin_token
    if not token:
        yield Finding("fail", "admin token", "FERRY_ADMIN_TOKEN is not set: `ferry status`, `ferry flush` "
                      "and the admin API answer 401")
    elif len(token) < 16:
        yield Finding("warn", "admin token", f"FERRY_ADMIN_TOKEN is short ({len(token)} characters; use >= 16)")
    else:
        yield Finding("ok", "admin token", "set")


def check_tls(settings: Settings) -> Iterator[Finding]:
    """The certificate and key load together (what uvicorn will do at start)."""
    if settings.tls_cert is None or settings.tls_key is None:
        yield Finding("ok", "tls", "not configured (plain HTTP)")
        return
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(settings.tls_cert, settings.tls_key)
    except (OSError, ssl.SSLError) as exc:
        yield Finding("fail", "tls", f"cannot load {settings.tls_cert} / {settings.tls_key}: {exc}")
        return
    yield Finding("ok", "tls", f"{settings.tls_cert} and its key load")


def check_data_dir(settings: Settings, serving: bool) -> Iterator[Finding]:
    """Exists and is writable; who holds its lock; free space; filesystem type; fsync."""
    path = settings.data_dir
    if not path.exists():
        yield Finding("warn", "data dir", f"{path} does not exist yet (`ferry serve` creates it)")
        path = _existing_parent(path)
    elif not os.access(path, os.W_OK | os.X_OK):
        yield Finding("fail", "data dir", f"{path} is not writable by uid {os.getuid()}")
        return
    else:
        st = path.stat()
        yield Finding("ok", "data dir", f"{path} (owner uid {st.st_uid}, writable)")
        yield _lock_finding(path / LOCK_NAME, serving)
    yield from _space(path, settings)
    yield from _filesystem(path, settings)


def _existing_parent(path: Path) -> Path:
    path = path.resolve()
    while not path.exists():
        path = path.parent
    return path


def _lock_finding(lock: Path, serving: bool) -> Finding:
    """Who holds the owner lock. Held is expected while a gateway runs (``--serving``)."""
    if not lock.exists():
        return Finding("ok", "data dir lock", "free (no gateway has used this directory yet)")
    fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown holder"
            if serving:
                return Finding("ok", "data dir lock", f"held by {holder}")
            return Finding("fail", "data dir lock", f"held by {holder}: `ferry serve` here would refuse to start "
                                                    "(stop it, or pass --serving)")
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    if serving:
        return Finding("fail", "data dir lock", "free, but --serving says a gateway runs here: it is not running")
    return Finding("ok", "data dir lock", "free")


def _space(path: Path, settings: Settings) -> Iterator[Finding]:
    usage = shutil.disk_usage(path)
    need = max(settings.disk_reserve_bytes, int(usage.total * settings.disk_reserve_ratio))
    text = f"{_size(usage.free)} free of {_size(usage.total)}; reserve {_size(need)}"
    held = held_bytes(settings.data_dir)  # what the node holds already counts as its room
    if usage.free <= need:
        yield Finding("fail", "free space", text + ": writes get SlowDown")
    elif settings.cache_bytes > usage.free + held - need:
        yield Finding("warn", "free space", text + f"; FERRY_CACHE_BYTES={_size(settings.cache_bytes)} "
                      "exceeds what the disk can hold (the reserve bounds it)")
    else:
        yield Finding("ok", "free space", text)


def _filesystem(path: Path, settings: Settings) -> Iterator[Finding]:
    fstype = filesystem_type(path)
    micros = fsync_micros(path)
    text = f"{fstype}, fsync of 4 KiB took {micros:.0f} us"
    if not settings.fsync:
        yield Finding("warn", "filesystem", text + "; FERRY_FSYNC=false: acknowledged writes may be lost on a crash")
    elif fstype in _VOLATILE_FS:
        yield Finding("warn", "filesystem", text + f"; {fstype} does not keep data across a reboot")
    elif micros < 20:
        yield Finding("warn", "filesystem", text + "; that fast, the disk likely does not honour fsync "
                      "(write cache without power-loss protection, or a virtual disk ignoring flushes)")
    else:
        yield Finding("ok", "filesystem", text)


def filesystem_type(path: Path) -> str:
    """The type of the mount holding ``path`` (longest mount point prefix in /proc/mounts)."""
    best, fstype = "", "unknown"
    target = str(path.resolve())
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return fstype
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mount = parts[1].replace("\\040", " ")
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, fstype = mount, parts[2]
    return fstype


def fsync_micros(path: Path) -> float:
    """Median time of a few 4 KiB write+fsync rounds in ``path`` (a scratch file, removed)."""
    scratch = path / f".ferry-doctor-{os.getpid()}"
    times = []
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for _ in range(5):
            os.pwrite(fd, os.urandom(4096), 0)
            started = time.perf_counter()
            os.fsync(fd)
            times.append((time.perf_counter() - started) * 1e6)
    finally:
        os.close(fd)
        scratch.unlink(missing_ok=True)
    return sorted(times)[len(times) // 2]


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{n} B"
        value /= 1024
    return f"{n} B"
