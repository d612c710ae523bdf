"""Write ordering across modes, destage fencing and the cache after a write, against a real
SeaweedFS (issue 11, "order").

- A write to a key that still has buffered rows is ordered after them, whatever the key's mode
  (write-through, bypass): the backlog never lands over it, reads never serve the older row.
- A destage whose worker lost its lease and resumes later never lands an older version over a
  newer one: plain PUTs are conditional (If-Match / If-None-Match on the ETag found under the
  lease) when the remote honours that.
- No cache entry becomes ready for a key that has a newer dirty row, and durability invalidates,
  so a read never goes from the new version back to the old one.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import random
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError, ResponseStreamingError

from app.domain.versions import VersionDraft
from tests.support.counting_proxy import CountingProxy
from tests.support.gateway import ADMIN_TOKEN, GatewayProcess
from tests.support.journal_rows import append_delete, append_put
from tests.support.seaweed import SeaweedServer

# A failed destage waits a long time before its next attempt: the backlog stays until the flush.
BACKLOG_ENV = {
    "FERRY_DESTAGE_BACKOFF_BASE": "60",
    "FERRY_DESTAGE_BACKOFF_CAP": "120",
    "FERRY_DESTAGE_LEASE_SECONDS": "5",
    "FERRY_SWEEP_INTERVAL": "0.5",
    "FERRY_POLICY_REFRESH_SECONDS": "0.2",
    "FERRY_CACHE_REVALIDATE_INTERVAL": "0",
}


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def admin(gw: GatewayProcess, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{gw.endpoint}{path}", data=data, method=method,
                                 headers={"Authorization": f"Bearer {ADMIN_TOKEN}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read() or b"null")


def set_mode(gw: GatewayProcess, bucket: str, prefix: str, **settings: Any) -> None:
    admin(gw, "POST", "/admin/policies", {"bucket": bucket, "prefix": prefix, **settings})
    time.sleep(0.8)  # FERRY_POLICY_REFRESH_SECONDS=0.2: every worker has seen it


def versions(gw: GatewayProcess, bucket: str, prefix: str) -> list[dict[str, Any]]:
    query = urllib.parse.urlencode({"bucket": bucket, "prefix": prefix, "limit": 1000})
    rows: list[dict[str, Any]] = admin(gw, "GET", f"/admin/objects?{query}")["versions"]
    return rows


def flush(gw: GatewayProcess, bucket: str) -> None:
    result = gw.flush(bucket, "", timeout=120)
    assert result["durable"], f"flush did not complete: {result}\n{gw.log_tail()}"


def read(client: Any, bucket: str, key: str) -> bytes | None:
    """The object's bytes, or None when it does not exist."""
    try:
        return bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    except ClientError as err:
        if err.response["ResponseMetadata"]["HTTPStatusCode"] == 404:
            return None
        raise


def remote_state(remote: Any, bucket: str, key: str) -> tuple[bytes | None, str | None]:
    try:
        resp = remote.get_object(Bucket=bucket, Key=key)
    except ClientError as err:
        if err.response["ResponseMetadata"]["HTTPStatusCode"] == 404:
            return None, None
        raise
    return bytes(resp["Body"].read()), str(resp["ETag"]).strip('"')


def backlog(gw: GatewayProcess, proxy: CountingProxy, client: Any, bucket: str, key: str, body: bytes) -> None:
    """A write-back PUT whose destage failed (remote down): it waits for its next attempt."""
    client.head_bucket(Bucket=bucket)  # the gateway trusts the bucket during the outage
    proxy.fail_with = 503
    try:
        client.put_object(Bucket=bucket, Key=key, Body=body)
        wait_for(lambda: any(v["key"] == key and v["last_error"] for v in versions(gw, bucket, key)), 20,
                 "the backlog's first failed destage")
    finally:
        proxy.fail_with = None


@pytest.fixture
def obucket(seaweed: SeaweedServer) -> Iterator[str]:
    name = seaweed.create_bucket(f"ord-{uuid.uuid4().hex[:12]}")
    yield name
    remote = seaweed.client()
    with contextlib.suppress(ClientError):
        keys = [o["Key"] for o in remote.list_objects_v2(Bucket=name).get("Contents", [])]
        if keys:
            remote.delete_objects(Bucket=name, Delete={"Objects": [{"Key": k} for k in keys]})
        remote.delete_bucket(Bucket=name)


@pytest.fixture
def oproxy(seaweed: SeaweedServer) -> Iterator[CountingProxy]:
    with CountingProxy(seaweed) as p:
        yield p


# ------------------------------------------------------------------ 1. write-through after a backlog


@pytest.mark.parametrize("op", ["put", "copy", "delete"])
@pytest.mark.parametrize("mode", ["write-through", "bypass"])
def test_a_write_through_write_is_ordered_after_the_keys_backlog(oproxy: CountingProxy, obucket: str,
                                                                 seaweed: SeaweedServer, tmp_path: Path,
                                                                 op: str, mode: str) -> None:
    remote = seaweed.client()
    prefix = f"wt-{uuid.uuid4().hex[:8]}/"
    key = f"{prefix}k"
    old, new = b"old-" + os.urandom(2000), b"new-" + os.urandom(3000)
    with GatewayProcess(oproxy, tmp_path / "gw", env=BACKLOG_ENV) as gw:
        client = gw.client()
        backlog(gw, oproxy, client, obucket, key, old)
        set_mode(gw, obucket, prefix, mode=mode)
        if op == "put":
            client.put_object(Bucket=obucket, Key=key, Body=new)
        elif op == "copy":
            remote.put_object(Bucket=obucket, Key="src/object", Body=new)
            client.copy_object(Bucket=obucket, Key=key, CopySource={"Bucket": obucket, "Key": "src/object"})
        else:
            client.delete_object(Bucket=obucket, Key=key)
        expected = None if op == "delete" else new
        assert read(client, obucket, key) == expected, "a read after the write served the older buffered row"
        flush(gw, obucket)
        assert read(client, obucket, key) == expected, "the gateway went back to the older write"
        body, etag = remote_state(remote, obucket, key)
        assert body == expected, "the backlog's destage overwrote (or undid) the newer write on the remote"
        if expected is not None:
            assert etag == md5(expected)
        client.close()


def test_a_write_through_put_in_flight_when_the_mode_turns_write_back(oproxy: CountingProxy, obucket: str,
                                                                      seaweed: SeaweedServer,
                                                                      tmp_path: Path) -> None:
    """The prefix is write-through when PUT A starts; it turns write-back, and PUT B is buffered
    (its destage failing) while A's body is still arriving. A is written after B was acknowledged,
    so A must end up newest: it may not land on the remote under B's pending row."""
    remote = seaweed.client()
    prefix = f"flip-{uuid.uuid4().hex[:8]}/"
    key = f"{prefix}k"
    body_a, body_b = b"A-" + os.urandom(200_000), b"B-" + os.urandom(1000)
    with GatewayProcess(oproxy, tmp_path / "gw", env=BACKLOG_ENV) as gw:
        client = gw.client()
        client.head_bucket(Bucket=obucket)
        set_mode(gw, obucket, prefix, mode="write-through")
        signer = gw.client(signature_version="s3v4")
        url = urllib.parse.urlsplit(signer.generate_presigned_url(
            "put_object", Params={"Bucket": obucket, "Key": key}, ExpiresIn=600))
        conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=60)
        conn.putrequest("PUT", f"{url.path}?{url.query}", skip_accept_encoding=True)
        conn.putheader("Content-Length", str(len(body_a)))
        conn.endheaders()
        conn.send(body_a[:1000])  # A has started, in write-through mode
        time.sleep(0.5)
        set_mode(gw, obucket, prefix, mode="write-back")
        backlog(gw, oproxy, client, obucket, key, body_b)
        conn.send(body_a[1000:])
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()
        conn.close()
        assert read(client, obucket, key) == body_a, "the gateway serves B, acknowledged before A was written"
        flush(gw, obucket)
        assert read(client, obucket, key) == body_a
        assert remote_state(remote, obucket, key) == (body_a, md5(body_a)), "B's destage landed over A"
        client.close()


@pytest.mark.fleet
def test_fleet_a_write_through_put_is_ordered_after_the_keys_backlog(oproxy: CountingProxy, obucket: str,
                                                                    seaweed: SeaweedServer, tmp_path: Path,
                                                                    fresh_postgres_url: str, redis_url: str) -> None:
    """The same with PostgreSQL and a Celery worker destaging the backlog (and its retries)."""
    import redis

    from tests.support.celery_worker import CeleryWorker

    remote = seaweed.client()
    prefix = f"wt-{uuid.uuid4().hex[:8]}/"
    key = f"{prefix}k"
    old, new = b"old-" + os.urandom(2000), b"new-" + os.urandom(3000)
    node = f"ord-{uuid.uuid4().hex[:10]}"
    env = {**BACKLOG_ENV, "FERRY_DATABASE_URL": fresh_postgres_url, "FERRY_BROKER_URL": redis_url,
           "FERRY_NODE_ID": node}
    try:
        with GatewayProcess(oproxy, tmp_path / "gw", env=env) as gw:
            worker = CeleryWorker(gw).start()
            try:
                client = gw.client()
                backlog(gw, oproxy, client, obucket, key, old)
                set_mode(gw, obucket, prefix, mode="write-through")
                client.put_object(Bucket=obucket, Key=key, Body=new)
                assert read(client, obucket, key) == new, "a read after the write served the older buffered row"
                flush(gw, obucket)
                assert read(client, obucket, key) == new
                assert remote_state(remote, obucket, key) == (new, md5(new)), "the backlog landed over the newer write"
                client.close()
            finally:
                worker.stop()
    finally:
        with contextlib.suppress(redis.RedisError), redis.Redis.from_url(redis_url) as r:
            for redis_key in r.scan_iter(match=f"*{node}*"):
                r.delete(redis_key)


# ------------------------------------------------------------------ 2. a plain PUT destage is fenced


class StalledPuts:
    """The real remote, but PutObject (of the first destager using it) waits for ``go``: its
    worker is frozen mid-upload, after it read the remote's state under its lease."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.entered = threading.Event()
        self.go = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def put_object(self, *args: Any, **kwargs: Any) -> str:
        self.entered.set()
        assert self.go.wait(60)
        return str(self.real.put_object(*args, **kwargs))

    def delete_object(self, *args: Any, **kwargs: Any) -> None:
        self.entered.set()
        assert self.go.wait(60)
        self.real.delete_object(*args, **kwargs)


def _journal_put(journal: Any, store: Any, bucket: str, key: str, data: bytes) -> Any:
    from app.adapters.catalog.journal.journal import BlobRef

    staging = store.open_staging()
    staging.write(data)
    blob = store.commit(staging)
    store.settle(blob)
    return append_put(journal, VersionDraft(bucket, key, len(data), md5(data), [BlobRef(blob, len(data), md5(data))],
                                           {}, {}, {}, None))


def _remote_store(seaweed: SeaweedServer) -> Any:
    from app.adapters.remote import RemoteConfig, RemoteStore

    return RemoteStore(RemoteConfig(endpoint=seaweed.endpoint, region="us-east-1", access_key=seaweed.access_key,
                                    secret_key=seaweed.secret_key))


@pytest.mark.parametrize(("existing", "stalled_op"), [(False, "put"), (True, "put"), (True, "delete")],
                         ids=["put-new-key", "put-overwrite", "delete"])
def test_a_stalled_destage_that_resumes_never_lands_over_a_newer_version(obucket: str, seaweed: SeaweedServer,
                                                                         tmp_path: Path, existing: bool,
                                                                         stalled_op: str) -> None:
    from app.adapters.catalog.engine import make_engine
    from app.adapters.catalog.journal.journal import Journal
    from app.adapters.catalog.migrate import upgrade
    from app.adapters.local.blobstore import BlobStore
    from app.domain.states import VersionState
    from app.services.destage.destager import Destager

    url = f"sqlite:///{tmp_path / 'ferry.db'}"
    upgrade(url)
    journal = Journal(make_engine(url), "node-a")
    store = BlobStore(tmp_path / "data", fsync=False)
    real = _remote_store(seaweed)
    key = f"fence-{uuid.uuid4().hex[:8]}"
    if existing:
        seaweed.client().put_object(Bucket=obucket, Key=key, Body=b"version zero")
    older, newer = b"version one " + os.urandom(100), b"version two " + os.urandom(100)
    if stalled_op == "put":
        first = _journal_put(journal, store, obucket, key, older)
    else:
        first = append_delete(journal, obucket, key, None)
    stalled_remote = StalledPuts(real)
    stalled = Destager(journal, store, stalled_remote, lease_seconds=1.5)
    outcome: dict[str, str] = {}
    worker = threading.Thread(target=lambda: outcome.update(result=stalled.destage(first.seq)))
    worker.start()
    try:
        assert stalled_remote.entered.wait(20)
        # Its lease runs out (the sweeper frees the row); a newer write is destaged by another worker.
        assert journal.release_expired_leases(now=time.time() + 3600) == 1
        second = _journal_put(journal, store, obucket, key, newer)
        healthy = Destager(journal, store, real, lease_seconds=30)
        assert healthy.destage(second.seq) == "durable"
        assert remote_state(seaweed.client(), obucket, key) == (newer, md5(newer))
    finally:
        stalled_remote.go.set()  # the frozen worker wakes up and sends its older version
        worker.join(60)
    assert outcome["result"] in ("lost", "superseded"), outcome
    assert remote_state(seaweed.client(), obucket, key) == (newer, md5(newer)), \
        "the stalled worker's older write landed over (or deleted) the newer durable version"
    newest = journal.get(second.seq)
    assert newest is not None and newest.state is VersionState.DURABLE
    # The older row never reaches the remote now (a newer one is durable).
    Destager(journal, store, real).destage(first.seq)
    assert remote_state(seaweed.client(), obucket, key) == (newer, md5(newer))


# ------------------------------------------------------------------ 3. the cache after a write

CACHE_POLICIES = [{"bucket": "*", "prefix": "imm/", "revalidate": "immutable"}]


def test_staging_during_a_backlog_never_caches_the_version_it_replaces(oproxy: CountingProxy, obucket: str,
                                                                       seaweed: SeaweedServer,
                                                                       tmp_path: Path) -> None:
    remote = seaweed.client()
    prefix = f"imm/{uuid.uuid4().hex[:8]}/"
    key = f"{prefix}k"
    old, new = b"old-" + os.urandom(50_000), b"new-" + os.urandom(60_000)
    remote.put_object(Bucket=obucket, Key=key, Body=old)
    remote.put_object(Bucket=obucket, Key=f"{prefix}other", Body=b"other")
    env = {**BACKLOG_ENV, "FERRY_POLICIES": json.dumps(CACHE_POLICIES)}
    with GatewayProcess(oproxy, tmp_path / "gw", env=env) as gw:
        client = gw.client()
        backlog(gw, oproxy, client, obucket, key, new)
        job = admin(gw, "POST", "/admin/staging", {"bucket": obucket, "prefix": prefix})
        done = wait_for(lambda: (j := admin(gw, "GET", f"/admin/staging/{job['id']}"))["state"]
                        not in ("queued", "running") and j, 60, "the staging job")
        assert done["state"] == "done", done
        assert read(client, obucket, key) == new
        flush(gw, obucket)
        assert remote_state(remote, obucket, key) == (new, md5(new))
        assert read(client, obucket, key) == new, "the staged pre-write version is served after the destage"
        client.close()


def test_a_discovery_racing_a_write_never_makes_the_old_version_ready(obucket: str, seaweed: SeaweedServer,
                                                                      tmp_path: Path) -> None:
    """A read checked the journal before the write (nothing buffered), then its discovery began
    after the write's tombstone, and its GET fetched the old version from the remote. Whether it
    records its entry while the write is dirty or after the write was destaged, it must not."""
    from app.adapters.catalog.cache.index import CacheIndex
    from app.adapters.catalog.engine import make_engine
    from app.adapters.catalog.journal.journal import Journal
    from app.adapters.catalog.migrate import upgrade
    from app.adapters.local.blobstore import BlobStore
    from app.services.destage.destager import Destager

    url = f"sqlite:///{tmp_path / 'ferry.db'}"
    upgrade(url)
    engine = make_engine(url)
    journal, index = Journal(engine, "node-a"), CacheIndex(engine, "node-a")
    store = BlobStore(tmp_path / "data", fsync=False)
    real = _remote_store(seaweed)
    key = f"race-{uuid.uuid4().hex[:8]}"
    old, new = b"old " + os.urandom(100), b"new " + os.urandom(100)
    seaweed.client().put_object(Bucket=obucket, Key=key, Body=old)
    old_meta = real.head_object(obucket, key)
    row = _journal_put(journal, store, obucket, key, new)
    time.sleep(0.01)
    started = time.time()  # after the write's tombstone
    assert index.put_ready(old_meta, obucket, 4 * 1024 * 1024, None, False, started) is None, \
        "a discovery cached the old version while a newer write is buffered"
    started = time.time()
    assert Destager(journal, store, real).destage(row.seq) == "durable"
    assert index.put_ready(old_meta, obucket, 4 * 1024 * 1024, None, False, started) is None, \
        "a discovery that fetched before the destage cached the old version after it"
    new_meta = real.head_object(obucket, key)
    assert new_meta.etag == md5(new)
    entry = index.put_ready(new_meta, obucket, 4 * 1024 * 1024, None, False, time.time())
    assert entry is not None and entry.etag == md5(new), "a discovery after the destage must cache"


def test_reads_never_go_backwards_while_writes_destage_and_staging_runs(oproxy: CountingProxy, obucket: str,
                                                                        seaweed: SeaweedServer,
                                                                        tmp_path: Path) -> None:
    prefix = f"imm/{uuid.uuid4().hex[:8]}/"
    key = f"{prefix}k"
    seaweed.client().put_object(Bucket=obucket, Key=key, Body=b"00000:" + os.urandom(20_000))
    oproxy.delay = 0.05  # a long-haul remote: destages and staging GETs overlap
    env = {**BACKLOG_ENV, "FERRY_POLICIES": json.dumps(CACHE_POLICIES)}
    stop = threading.Event()
    backwards: list[str] = []
    seen: list[int] = []
    dropped: list[int] = []
    with GatewayProcess(oproxy, tmp_path / "gw", env=env) as gw:

        def reader() -> None:
            client = gw.client()
            last = 0
            while not stop.is_set():
                try:
                    body = read(client, obucket, key)
                except (ResponseStreamingError, ClientError):
                    # A cached read whose version changed remotely mid-body drops the connection
                    # (never a short body taken for a whole one), and a miss during the forced
                    # outage fails: read again.
                    dropped.append(1)
                    continue
                assert body is not None
                version = int(body[:5])
                if version < last:
                    backwards.append(f"read {version} after {last}")
                last = max(last, version)
                seen.append(version)
            client.close()

        readers = [threading.Thread(target=reader) for _ in range(3)]
        for t in readers:
            t.start()
        client = gw.client()
        rnd = random.Random()
        try:
            for i in range(1, 25):
                body = b"%05d:" % i + os.urandom(20_000)
                if i % 6:
                    client.put_object(Bucket=obucket, Key=key, Body=body)
                    admin(gw, "POST", "/admin/staging", {"bucket": obucket, "prefix": prefix})
                    time.sleep(rnd.uniform(0.05, 0.4))
                    continue
                # Now and then a backlog (the destage failed once), staged over, then flushed.
                backlog(gw, oproxy, client, obucket, key, body)
                job = admin(gw, "POST", "/admin/staging", {"bucket": obucket, "prefix": prefix})
                wait_for(lambda: admin(gw, "GET", f"/admin/staging/{job['id']}")["state"]  # noqa: B023
                         not in ("queued", "running"), 60, "the staging job")
                flush(gw, obucket)
            flush(gw, obucket)
            time.sleep(1.0)
        finally:
            stop.set()
            for t in readers:
                t.join(30)
            oproxy.delay = 0.0
        assert not backwards, backwards[:5]
        assert len(seen) > 10 * len(dropped), f"{len(dropped)} reads of {len(seen)} were cut off"
        assert int((read(client, obucket, key) or b"")[:5]) == 24
        assert max(seen) == 24
        client.close()


def test_the_conditional_write_probe_finds_seaweedfs_honours_it_and_stores_nothing(obucket: str,
                                                                                   seaweed: SeaweedServer) -> None:
    store = _remote_store(seaweed)
    assert store.conditional_writes(obucket) is True
    leftovers = seaweed.client().list_objects_v2(Bucket=obucket, Prefix=".ferry-probe/").get("KeyCount", 0)
    assert leftovers == 0, "the probe left an object behind"
