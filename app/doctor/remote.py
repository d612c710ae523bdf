"""Checks that talk to a dependency: the catalog (and its migration level), the broker, remotes.

Each is bounded in time (a hung dependency is a finding, not a hang of the doctor).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import email.utils
import io
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from app.adapters.remote import RemoteConfig, RemoteStore
from app.config import Settings, redact_url
from app.doctor import Finding

T = TypeVar("T")
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="ferry-doctor")
PROBE_BYTES = 1024 * 1024


def bounded(fn: Callable[[], T], timeout: float) -> T:
    """``fn()``, or TimeoutError after ``timeout`` s (the thread is abandoned, the doctor exits soon)."""
    try:
        return _POOL.submit(fn).result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        raise TimeoutError(f"no answer within {timeout:g} s") from None


def _why(exc: BaseException) -> str:
    code = getattr(exc, "code", None)
    message = getattr(exc, "message", None)
    if code and message:
        return f"{code}: {message}"
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def check_catalog(settings: Settings, timeout: float) -> Iterator[Finding]:
    """Reachable, at the migration level this code needs (head), and holding an S3 key."""
    from alembic.script import ScriptDirectory

    from app.adapters.catalog.migrate import alembic_config, current_heads

    url = settings.effective_database_url
    if settings.database_url is None and not (settings.data_dir / "ferry.db").exists():
        yield Finding("warn", "catalog", f"{redact_url(url)} does not exist yet (`ferry serve` creates it)")
        return
    try:
        current = bounded(lambda: current_heads(url), timeout)
    except Exception as exc:
        yield Finding("fail", "catalog", f"{redact_url(url)}: {_why(exc)}")
        return
    yield Finding("ok", "catalog", f"{redact_url(url)} reachable")
    head = set(ScriptDirectory.from_config(alembic_config(url)).get_heads())
    if current == head:
        yield Finding("ok", "catalog schema", f"up to date (migration {', '.join(sorted(head))})")
    else:
        at = ", ".join(sorted(current)) or "no migration (empty catalog)"
        yield Finding("fail", "catalog schema", f"out of date: at {at}, this code needs {', '.join(sorted(head))}: "
                      "run `ferry db upgrade` (or start `ferry serve`, which migrates)")
        return
    yield from check_s3_keys(settings, timeout)


def check_s3_keys(settings: Settings, timeout: float) -> Iterator[Finding]:
    """Whether a client can sign requests: FERRY_ACCESS_KEY, or a key the catalog already holds
    (the quickstart's, or one made with ``ferry keys create``): the shell running the doctor
    need not carry the gateway's own variables."""
    if settings.access_key:
        yield Finding("ok", "s3 keys", f"bootstrap key {settings.access_key} (FERRY_ACCESS_KEY)")
        return
    from app.adapters.catalog.control.tenants import TenantRepo
    from app.adapters.catalog.engine import make_engine

    engine = make_engine(settings.effective_database_url, pool_size=1)
    try:
        keys = bounded(TenantRepo(engine).list_keys, timeout)
    except Exception as exc:
        yield Finding("warn", "s3 keys", f"cannot list the catalog's keys: {_why(exc)}")
        return
    finally:
        engine.dispose()
    enabled = [k for k in keys if not k.disabled]
    if enabled:
        yield Finding("ok", "s3 keys", f"{len(enabled)} enabled key(s) in the catalog")
    else:
        yield Finding("warn", "s3 keys", "no S3 key: no client can sign a request (set FERRY_ACCESS_KEY/"
                      "FERRY_SECRET_KEY, or create one with `ferry keys create`)")


def check_broker(settings: Settings, timeout: float) -> Iterator[Finding]:
    if not settings.broker_url:
        yield Finding("ok", "broker", "none (destage runs inside the gateway)")
        return
    import redis


    def ping() -> None:
        client = redis.Redis.from_url(settings.broker_url or "", socket_timeout=timeout,
                                      socket_connect_timeout=timeout)
        try:
            client.ping()
        finally:
            client.close()

    started = time.perf_counter()
    try:
        bounded(ping, timeout + 1)
    except Exception as exc:
        yield Finding("fail", "broker", f"{redact_url(settings.broker_url)}: {_why(exc)}")
        return
    yield Finding("ok", "broker", f"{redact_url(settings.broker_url)} answers PING in {_ms(started):.1f} ms")


def remote_configs(settings: Settings, timeout: float) -> list[tuple[str, RemoteConfig]]:
    """The default remote, then the remotes registered in the catalog (if it can be read)."""
    from app.bootstrap import remote_config

    def short(config: RemoteConfig) -> RemoteConfig:
        return dataclasses.replace(config, connect_timeout=timeout, read_timeout=timeout, max_connections=2)

    configs = [("default", short(remote_config(settings)))]
    try:
        from app.adapters.catalog.control.remotes import RemoteRepo
        from app.adapters.catalog.engine import make_engine

        engine = make_engine(settings.effective_database_url, pool_size=1)
        try:
            infos = bounded(RemoteRepo(engine).list, timeout)
        finally:
            engine.dispose()
    except Exception:  # the catalog finding already says why
        return configs
    for info in infos:
        configs.append((info.name, short(RemoteConfig(endpoint=info.endpoint, region=info.region,
                                                      access_key=info.access_key, secret_key=info.secret_key,
                                                      addressing_style=info.addressing_style,
                                                      verify_tls=info.verify_tls))))
    return configs


def check_remote(name: str, cfg: RemoteConfig, timeout: float, probe_bucket: str | None,
                 skew_limit: float) -> Iterator[Finding]:
    """Reachability and credentials (ListBuckets), clock skew (its Date header), latency; with a
    probe bucket, the bandwidth of a 1 MiB PUT and GET of a scratch object (deleted)."""
    area = f"remote {name}"
    where = cfg.endpoint or "AWS S3"
    store = RemoteStore(cfg)
    started = time.perf_counter()
    try:
        resp = bounded(store.client.list_buckets, timeout * 2)
    except Exception as exc:
        yield Finding("fail", area, f"{where}: {_why(exc)}")
        return
    latency = _ms(started)
    yield Finding("ok", area, f"{where}: credentials accepted, ListBuckets in {latency:.1f} ms "
                  f"({len(resp.get('Buckets', []))} bucket(s))")
    yield _skew(area, resp, skew_limit)
    if probe_bucket:
        yield _bandwidth(area, store, probe_bucket, timeout)


def _skew(area: str, resp: dict[str, Any], limit: float) -> Finding:
    date = resp.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    if not date:
        return Finding("warn", area, "no Date header: clock skew unknown")
    skew = time.time() - email.utils.parsedate_to_datetime(date).timestamp()
    text = f"clock skew {skew:+.1f} s"
    if abs(skew) >= limit:
        return Finding("fail", area, text + f": signed requests fail beyond {limit:g} s (fix NTP)")
    return Finding("warn" if abs(skew) > 60 else "ok", area, text)


def _bandwidth(area: str, store: RemoteStore, bucket: str, timeout: float) -> Finding:
    key = f".ferry-doctor/{uuid.uuid4().hex}"
    body = bytes(PROBE_BYTES)
    try:
        started = time.perf_counter()
        bounded(lambda: store.client.put_object(Bucket=bucket, Key=key, Body=io.BytesIO(body)), timeout * 4)
        put_s = time.perf_counter() - started
        started = time.perf_counter()
        got = bounded(lambda: store.client.get_object(Bucket=bucket, Key=key)["Body"].read(), timeout * 4)
        get_s = time.perf_counter() - started
    except Exception as exc:
        return Finding("fail", area, f"probe in bucket {bucket}: {_why(exc)}")
    finally:
        # A leftover 1 MiB scratch object is named for what it is: not worth a failure.
        with contextlib.suppress(Exception):
            bounded(lambda: store.client.delete_object(Bucket=bucket, Key=key), timeout)
    if got != body:
        return Finding("fail", area, f"probe in bucket {bucket}: read back {len(got)} bytes that differ")
    mib = PROBE_BYTES / 1024**2
    return Finding("ok", area, f"1 MiB probe in {bucket}: PUT {mib / put_s:.1f} MiB/s, GET {mib / get_s:.1f} MiB/s")


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000
