"""Short, bounded checks of what a node depends on: catalog, broker, remote, disk.

Used by ``/readyz`` and the admin API's remote checks. Every check has a wall-clock bound and runs
its blocking call on a small dedicated thread pool, so a hung dependency can neither hold a probe
nor starve the threads that serve requests.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.to_thread
from sqlalchemy import Engine, text

from app.adapters.remote import RemoteConfig, RemoteStore
from app.domain.errors import S3Error

_LIMITER: anyio.CapacityLimiter | None = None
_STORES: dict[RemoteConfig, RemoteStore] = {}
_STORES_LOCK = threading.Lock()


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    latency_ms: float | None
    detail: str | None = None


def _limiter() -> anyio.CapacityLimiter:
    global _LIMITER
    if _LIMITER is None:
        _LIMITER = anyio.CapacityLimiter(8)
    return _LIMITER


async def bounded(fn: Callable[[], Any], timeout: float) -> CheckResult:
    """Run ``fn`` in a thread; ok when it returns within ``timeout``, else why not."""
    started = time.perf_counter()
    try:
        with anyio.fail_after(timeout):
            detail = await anyio.to_thread.run_sync(fn, abandon_on_cancel=True, limiter=_limiter())
    except TimeoutError:
        return CheckResult(False, None, f"no answer within {timeout:g} s")
    except S3Error as exc:
        return CheckResult(False, _ms(started), f"{exc.code}: {exc.message}")
    except Exception as exc:
        return CheckResult(False, _ms(started), f"{type(exc).__name__}: {exc}")
    return CheckResult(True, _ms(started), detail if isinstance(detail, str) else None)


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


def probe_store(cfg: RemoteConfig, timeout: float) -> RemoteStore:
    """A client for checks only: short timeouts, few connections, reused across probes."""
    probe_cfg = dataclasses.replace(cfg, connect_timeout=min(cfg.connect_timeout, timeout),
                                    read_timeout=min(cfg.read_timeout, timeout), max_connections=2)
    with _STORES_LOCK:
        store = _STORES.get(probe_cfg)
        if store is None:
            if len(_STORES) > 64:
                _STORES.clear()
            store = _STORES[probe_cfg] = RemoteStore(probe_cfg)
        return store


async def check_remote(cfg: RemoteConfig, bucket: str | None = None, timeout: float = 5.0) -> CheckResult:
    """ListBuckets (or HeadBucket when a bucket is named: keys scoped to one bucket may not list)."""

    def call() -> str:
        store = probe_store(cfg, timeout)
        if bucket:
            store.head_bucket(bucket)
            return f"HeadBucket {bucket}"
        return f"ListBuckets: {len(store.list_buckets())} bucket(s)"

    return await bounded(call, timeout)


class RegisteredRemote(Protocol):
    """What a check needs of a registered remote (``adapters/catalog/control/remotes.RemoteInfo``)."""

    @property
    def endpoint(self) -> str | None: ...
    @property
    def region(self) -> str: ...
    @property
    def access_key(self) -> str | None: ...
    @property
    def secret_key(self) -> str | None: ...
    @property
    def addressing_style(self) -> str: ...
    @property
    def verify_tls(self) -> bool: ...


@dataclass(frozen=True)
class RemoteChecks:
    """The admin API's remote checks: the default remote (from settings, given by the composition
    root) and any registered one, each bounded to ``timeout`` seconds."""

    default: RemoteConfig
    timeout: float = 5.0

    async def check_default(self, bucket: str | None = None) -> CheckResult:
        return await check_remote(self.default, bucket, self.timeout)

    def config_of(self, info: RegisteredRemote) -> RemoteConfig:
        return RemoteConfig(endpoint=info.endpoint, region=info.region, access_key=info.access_key,
                            secret_key=info.secret_key, addressing_style=info.addressing_style,
                            verify_tls=info.verify_tls, connect_timeout=self.timeout, read_timeout=self.timeout)

    async def check_registered(self, info: RegisteredRemote, bucket: str | None = None) -> CheckResult:
        return await check_remote(self.config_of(info), bucket, self.timeout)


async def check_catalog(engine: Engine, timeout: float = 5.0) -> CheckResult:
    def call() -> None:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    return await bounded(call, timeout)


async def check_broker(url: str, timeout: float = 3.0) -> CheckResult:
    def call() -> None:
        import redis

        client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        try:
            client.ping()
        finally:
            client.close()

    return await bounded(call, timeout)


def disk_check(path: Path, min_free_bytes: int, min_free_ratio: float) -> CheckResult:
    """Fails when free space is under ``min_free_bytes`` or under ``min_free_ratio`` of the disk."""
    started = time.perf_counter()
    try:
        usage = shutil.disk_usage(path)
    except OSError as exc:
        return CheckResult(False, _ms(started), f"cannot stat {path}: {exc}")
    ratio = usage.free / usage.total if usage.total else 0.0
    detail = f"{usage.free} of {usage.total} bytes free ({ratio:.1%})"
    ok = usage.free >= min_free_bytes and ratio >= min_free_ratio
    if not ok:
        detail += f"; needs at least {min_free_bytes} bytes and {min_free_ratio:.1%}"
    return CheckResult(ok, _ms(started), detail)


async def check_disk(path: Path, min_free_bytes: int, min_free_ratio: float) -> CheckResult:
    return await anyio.to_thread.run_sync(functools.partial(disk_check, path, min_free_bytes, min_free_ratio),
                                          limiter=_limiter())
