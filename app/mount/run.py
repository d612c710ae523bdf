"""Running a mount: settings from the environment, the FUSE session, the shutdown.

The mount stays in the foreground until SIGINT/SIGTERM or ``fusermount3 -u``. Its staging
files (files being written) live in a directory of its own, never the gateway's data dir.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from app.mount import session
from app.mount.fs import FerryFS
from app.mount.objects import GatewayObjects
from app.server.local_reads import socket_path

log = logging.getLogger("ferry.mount")


@dataclass(frozen=True)
class MountSettings:
    url: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"
    bucket: str | None = None
    read_only: bool = False
    cache_seconds: float = 1.0
    staging_root: Path | None = None
    allow_other: bool = False
    local_socket: Path | None = None  # the gateway's local read socket, when on its node
    direct_reads: bool = True  # reads of files opened for reading as direct I/O (FERRY_MOUNT_DIRECT_READS)

    @classmethod
    def from_env(cls, **given: Any) -> MountSettings:
        """FERRY_URL (else the node's FERRY_HOST/FERRY_PORT), the S3 key as AWS_ACCESS_KEY_ID /
        AWS_SECRET_ACCESS_KEY or FERRY_ACCESS_KEY / FERRY_SECRET_KEY (the node's own key when
        run on the serving node)."""
        env = os.environ
        host = env.get("FERRY_HOST", "127.0.0.1")
        url = env.get("FERRY_URL") or f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:" \
                                       f"{env.get('FERRY_PORT', '9000')}"
        access = env.get("AWS_ACCESS_KEY_ID") or env.get("FERRY_ACCESS_KEY")
        secret = env.get("AWS_SECRET_ACCESS_KEY") or env.get("FERRY_SECRET_KEY")
        if not access or not secret:
            raise ValueError("no S3 key: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                             "(or FERRY_ACCESS_KEY and FERRY_SECRET_KEY)")
        staging = env.get("FERRY_MOUNT_STAGING")
        return cls(url=url, access_key=access, secret_key=secret,
                   region=env.get("AWS_REGION") or env.get("FERRY_REGION") or "us-east-1",
                   staging_root=Path(staging) if staging else None, local_socket=local_socket(env),
                   direct_reads=env.get("FERRY_MOUNT_DIRECT_READS", "on").lower() not in ("off", "0", "no", "false"),
                   **given)


def local_socket(env: Any) -> Path | None:
    """FERRY_LOCAL_SOCKET, else the socket in the node's data directory (FERRY_DATA_DIR, or the
    gateway's default) when it is there: the mount runs on the serving node."""
    if given := env.get("FERRY_LOCAL_SOCKET"):
        return Path(given) if given != "off" else None
    path = socket_path(Path(env.get("FERRY_DATA_DIR", "./var/ferry")))
    return path if path.exists() else None


def options(settings: MountSettings) -> list[str]:
    """fusermount3's options: the kernel checks permissions from the modes the mount reports."""
    opts = ["ro" if settings.read_only else "rw", "nosuid", "nodev", "fsname=ferry", "subtype=ferry",
            "default_permissions"]
    if settings.allow_other:
        opts.append("allow_other")
    return opts


def mount(mountpoint: Path, settings: MountSettings) -> None:
    """Serve the mount until it is unmounted or signalled; unmount on the way out."""
    objects = GatewayObjects(settings.url, settings.access_key, settings.secret_key, region=settings.region,
                             local_socket=settings.local_socket)
    objects.buckets()  # fail now, with the gateway's answer, rather than at the first ls
    if settings.local_socket is not None:
        log.info("ferry mount: reading through the gateway's local read socket %s", settings.local_socket)
    staging = Path(tempfile.mkdtemp(prefix="ferry-mount-", dir=settings.staging_root))
    fs = FerryFS(objects, staging, bucket=settings.bucket, read_only=settings.read_only,
                 cache_seconds=settings.cache_seconds)
    try:
        fd = session.mount(mountpoint, options(settings))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _widen_readahead(mountpoint)
    try:
        trio.run(_serve, fs, session.Session(fs, fd, direct_reads=settings.direct_reads), mountpoint)
    finally:
        session.unmount(mountpoint)
        session.close(fd)
        shutil.rmtree(staging, ignore_errors=True)


READ_AHEAD_KB = 1024


def _widen_readahead(mountpoint: Path) -> None:
    """The kernel reads ahead 128 KiB per FUSE request by default; 1 MiB requests cost the mount
    a quarter less CPU per GiB read (measured). Only root may set it: otherwise it stays."""
    try:  # never stat the mount itself here: its requests are not served until the main loop runs
        device = next(line.split()[2] for line in Path("/proc/self/mountinfo").read_text().splitlines()
                      if line.split()[4] == os.path.abspath(mountpoint))
        knob = Path(f"/sys/class/bdi/{device}/read_ahead_kb")
        if int(knob.read_text()) < READ_AHEAD_KB:
            knob.write_text(str(READ_AHEAD_KB))
    except (OSError, ValueError, StopIteration) as exc:
        log.info("ferry mount: read-ahead left at the kernel's default (%s)", exc)


async def _serve(fs: FerryFS, served: session.Session, mountpoint: Path) -> None:
    async with trio.open_nursery() as nursery:
        fs.spawn = nursery.start_soon
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async def stop_on_signal() -> None:
                async for signum in signals:
                    log.info("ferry mount: signal %s, unmounting", signum)
                    # Detached first, so no new request comes; then the loop ends and the finally
                    # closes /dev/fuse, which aborts what a process still in the mount waits for.
                    await trio.to_thread.run_sync(session.unmount, mountpoint)
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(stop_on_signal)
            await served.serve()
            nursery.cancel_scope.cancel()
