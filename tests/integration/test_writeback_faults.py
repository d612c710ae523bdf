"""Write-back under faults, with real processes: kill -9 of the gateway and of the destage worker,
a remote that hangs or is down, lost destage messages, a key overwritten from several clients, a
full write buffer. Every test runs its own ``ferry serve`` (own data dir), so a kill disturbs no
other test; the tests marked by ``MODES`` run both with the embedded executor (the default) and
in fleet mode (PostgreSQL catalog, Redis broker, a real Celery worker process).

The invariants checked: an acknowledged write is never lost (readable at once through the
gateway, on the remote after the flush barrier, with the ETag the client got); an unacknowledged
write never becomes visible; a destage interrupted at any point completes after a restart; the
remote ends with the newest acknowledged version of a key and never goes back to an older one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import socket
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from app.domain.versions import VersionDraft
from tests.support.celery_worker import CeleryWorker
from tests.support.gateway import ACCESS_KEY, ADMIN_TOKEN, SECRET_KEY, GatewayProcess
from tests.support.journal_rows import append_put
from tests.support.seaweed import SeaweedServer

MiB = 1024 * 1024

# Short leases and quick retries: a dead worker's lease runs out in seconds, not half a minute.
FAST_ENV = {
    "FERRY_DESTAGE_LEASE_SECONDS": "3",
    "FERRY_SWEEP_INTERVAL": "0.5",
    "FERRY_DESTAGE_BACKOFF_CAP": "2",
}
MODES = [pytest.param("embedded", id="embedded"), pytest.param("fleet", id="fleet", marks=pytest.mark.fleet)]
# The fleet variants of the two longest tests run on demand (-m slow): 140 s of CI for what the
# embedded variants and tests/integration/test_fleet_writes.py (kill -9 of a node) already cover.
MODES_QUICK_EMBEDDED = [MODES[0], pytest.param("fleet", id="fleet", marks=[pytest.mark.fleet, pytest.mark.slow])]
FLEET = [pytest.param("fleet", id="fleet", marks=pytest.mark.fleet)]


# ------------------------------------------------------------------------------------ helpers


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def md5_etag(data: bytes) -> str:
    return f'"{hashlib.md5(data).hexdigest()}"'


def multipart_etag(parts: list[bytes]) -> str:
    digest = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest()
    return f'"{digest}-{len(parts)}"'


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def versions(gw: GatewayProcess, bucket: str, prefix: str = "") -> list[dict[str, Any]]:
    """``GET /admin/objects``: every journal row under the prefix, newest first."""
    query = urllib.parse.urlencode({"bucket": bucket, "prefix": prefix, "limit": 10000})
    req = urllib.request.Request(f"{gw.endpoint}/admin/objects?{query}",
                                 headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        rows: list[dict[str, Any]] = json.loads(r.read())["versions"]
    return rows


def flush(gw: GatewayProcess, bucket: str, prefix: str = "", timeout: float = 120.0) -> dict[str, Any]:
    result = gw.flush(bucket, prefix, timeout=timeout)
    assert result["durable"], f"flush did not complete: {result}\n{gw.log_tail()}"
    return result


def read_object(client: Any, bucket: str, key: str) -> tuple[str, str]:
    """(sha256 of the body, ETag) of an object."""
    resp = client.get_object(Bucket=bucket, Key=key)
    h = hashlib.sha256()
    for chunk in iter(lambda: resp["Body"].read(MiB), b""):
        h.update(chunk)
    return h.hexdigest(), resp["ETag"]


def exists(client: Any, bucket: str, key: str) -> bool:
    try:
        client.head_object(Bucket=bucket, Key=key)
    except ClientError as err:
        if err.response["ResponseMetadata"]["HTTPStatusCode"] == 404:
            return False
        raise
    return True


def list_keys(client: Any, bucket: str, prefix: str) -> set[str]:
    keys: set[str] = set()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys |= {o["Key"] for o in page.get("Contents", [])}
    return keys


def confirm_bucket(client: Any, bucket: str) -> None:
    """The gateway checks a bucket with the remote before its first write and then trusts it for
    a while (writes go on during an outage): let it see the bucket before the remote goes away."""
    client.head_bucket(Bucket=bucket)


def empty_remote_bucket(remote: Any, bucket: str) -> None:
    with contextlib.suppress(ClientError):
        for up in remote.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
            remote.abort_multipart_upload(Bucket=bucket, Key=up["Key"], UploadId=up["UploadId"])
    keys = sorted(list_keys(remote, bucket, ""))
    for i in range(0, len(keys), 1000):
        remote.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]]})


# ------------------------------------------------------------------------------------ fixtures


@dataclass
class Mode:
    name: str
    env: dict[str, str]
    redis_url: str | None = None

    @property
    def fleet(self) -> bool:
        return self.name == "fleet"


@pytest.fixture
def mode(request: pytest.FixtureRequest) -> Iterator[Mode]:
    """``embedded`` (SQLite in the data dir, in-process executor) or ``fleet`` (a fresh
    PostgreSQL database, the Redis broker, a unique node id, destage by a Celery worker)."""
    name = getattr(request, "param", "embedded")
    if name == "embedded":
        yield Mode(name, {})
        return
    database = request.getfixturevalue("fresh_postgres_url")
    broker = request.getfixturevalue("redis_url")
    node = f"wbt-{uuid.uuid4().hex[:10]}"
    yield Mode(name, {"FERRY_DATABASE_URL": database, "FERRY_BROKER_URL": broker, "FERRY_NODE_ID": node},
               redis_url=broker)
    import redis

    with contextlib.suppress(redis.RedisError), redis.Redis.from_url(broker) as r:
        for redis_key in r.scan_iter(match=f"*{node}*"):  # the node's queues and bindings
            r.delete(redis_key)


@dataclass
class Node:
    """One gateway node: ``ferry serve`` and, in fleet mode, its Celery worker."""

    gw: GatewayProcess
    worker: CeleryWorker | None
    mode: Mode

    def start(self, worker: bool = True) -> Node:
        if self.gw.proc is None or self.gw.proc.poll() is not None:
            self.gw.start()
        if worker and self.worker is not None and not self.worker.is_running():
            self.worker.start()
        return self

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()
        self.gw.stop()

    def logs(self) -> str:
        out = self.gw.log_tail()
        if self.worker is not None:
            out += "\n--- celery ---\n" + self.worker.log_tail()
        return out


@pytest.fixture
def make_node(mode: Mode, seaweed: SeaweedServer, tmp_path: Path) -> Iterator[Callable[..., Node]]:
    nodes: list[Node] = []

    def make(*, remote: Any = None, env: dict[str, str] | None = None, start: bool = True,
             start_worker: bool = True) -> Node:
        gw = GatewayProcess(remote or seaweed, tmp_path / f"node{len(nodes)}",
                            env={**FAST_ENV, **mode.env, **(env or {})})
        node = Node(gw, CeleryWorker(gw) if mode.fleet else None, mode)
        nodes.append(node)
        if start:
            node.start(worker=start_worker)
        return node

    yield make
    for node in nodes:
        node.stop()


@pytest.fixture(scope="module")
def module_bucket(seaweed: SeaweedServer) -> Iterator[str]:
    """One bucket for the module (SeaweedFS has few volumes), emptied after every test."""
    name = seaweed.create_bucket(f"wbf-{uuid.uuid4().hex[:12]}")
    yield name
    remote = seaweed.client()
    empty_remote_bucket(remote, name)
    with contextlib.suppress(ClientError):
        remote.delete_bucket(Bucket=name)


@pytest.fixture
def bucket(module_bucket: str, seaweed: SeaweedServer) -> Iterator[str]:
    yield module_bucket
    if seaweed.paused:
        seaweed.resume()
    empty_remote_bucket(seaweed.client(), module_bucket)


# ------------------------------------------------------------------------------------ 1. kill -9 during multipart


@dataclass
class Upload:
    key: str
    sha256: str = ""
    expected_etag: str = ""
    state: str = "started"  # started -> completing -> acked
    etag: str | None = None
    error: str | None = None


def _multipart(client: Any, bucket: str, up: Upload, shared: list[bytes], rnd: random.Random,
               acked: list[Upload], lock: threading.Lock) -> None:
    # A 5 MiB part and a small tail, unique per key (a keyed header over shared random bytes);
    # fewer bytes than two full parts keeps the module's runtime in budget with 3 rounds of 50.
    head = hashlib.sha256(up.key.encode()).digest()
    parts = [head + shared[0][32:], rnd.randbytes(rnd.randint(1, 256 * 1024))]
    up.sha256 = sha(b"".join(parts))
    up.expected_etag = multipart_etag(parts)
    try:
        upload_id = client.create_multipart_upload(Bucket=bucket, Key=up.key)["UploadId"]
        done = []
        for number, body in enumerate(parts, start=1):
            resp = client.upload_part(Bucket=bucket, Key=up.key, UploadId=upload_id, PartNumber=number, Body=body)
            done.append({"PartNumber": number, "ETag": resp["ETag"]})
        up.state = "completing"
        resp = client.complete_multipart_upload(Bucket=bucket, Key=up.key, UploadId=upload_id,
                                                MultipartUpload={"Parts": done})
        up.etag = resp["ETag"]
        up.state = "acked"
        with lock:
            acked.append(up)
    except Exception as exc:  # the gateway died under us: that is the point
        up.error = f"{type(exc).__name__}: {exc}"


@pytest.mark.slow  # ~60 s; the quick profile's kill -9 under mixed load (tests/reliability/test_kill9.py) covers multipart
@pytest.mark.parametrize("mode", MODES_QUICK_EMBEDDED, indirect=True)
def test_kill9_gateway_during_concurrent_multipart_uploads(make_node: Callable[..., Node], mode: Mode,
                                                          bucket: str, seaweed: SeaweedServer) -> None:
    rnd = random.Random()
    node = make_node()
    prefix = f"mp-kill-{uuid.uuid4().hex[:8]}/"
    shared = [rnd.randbytes(5 * MiB)]
    uploads: list[Upload] = []
    kill_plans = [("acks", rnd.randint(1, 20)), ("acks", rnd.randint(20, 45)), ("time", rnd.uniform(0.2, 1.5))]
    for round_no, (how, when) in enumerate(kill_plans):
        node.start()
        client = node.gw.client(max_pool_connections=64, connect_timeout=5, read_timeout=60)
        batch = [Upload(f"{prefix}r{round_no}/u{i:02d}") for i in range(50)]
        uploads += batch
        acked: list[Upload] = []
        lock = threading.Lock()
        threads = [threading.Thread(target=_multipart, args=(client, bucket, up, shared, random.Random(), acked, lock))
                   for up in batch]
        for t in threads:
            t.start()
        started = time.monotonic()
        while time.monotonic() - started < 60:
            if (how == "acks" and len(acked) >= when) or (how == "time" and time.monotonic() - started >= when):
                break
            if not any(t.is_alive() for t in threads):
                break
            time.sleep(0.005)
        node.gw.kill()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        client.close()
        states = {s: sum(up.state == s for up in batch) for s in ("started", "completing", "acked")}
        print(f"round {round_no}: killed on {how}={when:.2f} after {time.monotonic() - started:.2f}s: {states}")

    node.start()
    gw = node.gw.client(max_pool_connections=16)
    acked_keys = {up.key for up in uploads if up.state == "acked"}
    ambiguous = {up.key for up in uploads if up.state == "completing"}
    never = {up.key for up in uploads if up.state == "started"}
    assert acked_keys and never, "the kills did not interrupt the uploads"

    def check_through(client: Any, up: Upload) -> bool:
        """Visible with the right bytes and ETag, or not visible (only allowed if unacknowledged)."""
        if up.state != "acked" and not exists(client, bucket, up.key):
            return False
        digest, etag = read_object(client, bucket, up.key)
        assert digest == up.sha256, f"{up.key} ({up.state}): wrong bytes"
        assert etag == up.expected_etag, f"{up.key} ({up.state}): ETag {etag} != {up.expected_etag}"
        if up.state == "acked":
            assert etag == up.etag
        assert up.state != "started", f"{up.key}: never completed, yet visible"
        return True

    with ThreadPoolExecutor(8) as pool:
        visible_gw = {up.key for up, seen in zip(uploads, pool.map(lambda u: check_through(gw, u), uploads), strict=True)
                      if seen}
    assert acked_keys <= visible_gw <= acked_keys | ambiguous
    assert acked_keys <= list_keys(gw, bucket, prefix) <= acked_keys | ambiguous

    flush(node.gw, bucket, prefix)
    remote = seaweed.client(max_pool_connections=16)
    with ThreadPoolExecutor(8) as pool:
        visible_remote = {up.key for up, seen in zip(uploads, pool.map(lambda u: check_through(remote, u), uploads), strict=True)
                          if seen}
    assert visible_remote == visible_gw
    assert list_keys(remote, bucket, prefix) == visible_gw
    rows = versions(node.gw, bucket, prefix)
    assert {r["key"] for r in rows} == visible_gw
    assert all(r["state"] == "durable" for r in rows), [r for r in rows if r["state"] != "durable"]
    # Uploads cut short by a kill are still open (their parts are kept); once they are aborted
    # and everything is durable, no blob is left in the data dir.
    open_uploads = gw.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", [])
    assert {u["Key"] for u in open_uploads} <= never | (ambiguous - visible_gw)
    for u in open_uploads:
        gw.abort_multipart_upload(Bucket=bucket, Key=u["Key"], UploadId=u["UploadId"])
    leftovers = [p for p in (node.gw.data_dir / "blobs").rglob("*") if p.is_file()]
    print(f"{len(open_uploads)} open uploads aborted; {len(leftovers)} blobs left")
    assert not leftovers, f"{len(leftovers)} blobs leaked by the kills"


# ------------------------------------------------------------------------------------ 2. kill -9 mid-destage


def _kill_mid_destage(node: Node, mode: Mode, seaweed: SeaweedServer, bucket: str, key: str,
                      started: Callable[[], bool] = lambda: True) -> str:
    """With the remote paused and the key's row destaging: resume the remote, let bytes flow
    (once ``started`` says so), kill -9 the process that destages; the row's state at the kill."""
    wait_for(lambda: versions(node.gw, bucket, key)[0]["state"] == "destaging", 30, "the row to be destaging")
    seaweed.resume()
    wait_for(started, 30, "the destage's first request")
    time.sleep(0.3)  # bytes are flowing to the remote now
    state = str(versions(node.gw, bucket, key)[0]["state"])
    if mode.fleet:
        assert node.worker is not None
        node.worker.kill()
    else:
        node.gw.kill()
    return state


@pytest.mark.parametrize("mode", MODES, indirect=True)
def test_kill9_worker_mid_destage(make_node: Callable[..., Node], mode: Mode, bucket: str,
                                  seaweed: SeaweedServer) -> None:
    """Embedded: the worker is the gateway process; fleet: kill -9 the Celery worker."""
    node = make_node()
    key = f"big-{uuid.uuid4().hex[:8]}"
    body = random.randbytes(200 * MiB)
    client = node.gw.client(read_timeout=120)
    confirm_bucket(client, bucket)
    seaweed.pause()  # the destage starts but cannot finish: the row sits in DESTAGING
    try:
        etag = client.put_object(Bucket=bucket, Key=key, Body=body)["ETag"]
        assert etag == md5_etag(body)
        state = _kill_mid_destage(node, mode, seaweed, bucket, key)
    finally:
        seaweed.resume()
    print(f"killed while the row was {state}")
    assert state == "destaging", "the destage finished before the kill; make the object larger"
    node.start()
    # Read-your-writes right after the crash, from the local buffer.
    digest, got_etag = read_object(node.gw.client(), bucket, key)
    assert (digest, got_etag) == (sha(body), etag)
    started = time.monotonic()
    flush(node.gw, bucket, key)
    print(f"flush after restart took {time.monotonic() - started:.1f}s")
    [row] = versions(node.gw, bucket, key)
    assert row["state"] == "durable" and row["remote_etag"] == etag.strip('"')
    assert read_object(seaweed.client(), bucket, key) == (sha(body), etag)


@pytest.mark.parametrize("mode", MODES_QUICK_EMBEDDED, indirect=True)
def test_kill9_mid_multipart_destage_resumes_its_remote_upload(make_node: Callable[..., Node], mode: Mode,
                                                               bucket: str, seaweed: SeaweedServer) -> None:
    """A multipart destage killed mid-upload leaves no remote upload open: the one it created is
    named on its row before any part goes, and the retry after the restart resumes it (fails on
    b0ee640: the retry opened a second upload and the first stayed open for the 8-day sweep)."""
    node = make_node(env={"FERRY_EAGER_PART_COPY": "0"})  # the destage opens the remote upload
    key = f"mp-{uuid.uuid4().hex[:8]}"
    part = 16 * MiB
    body = random.randbytes(12 * part)
    client = node.gw.client(read_timeout=120)
    confirm_bucket(client, bucket)
    upload_id = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    parts = [{"PartNumber": n + 1, "ETag": client.upload_part(Bucket=bucket, Key=key, UploadId=upload_id,
                                                               PartNumber=n + 1,
                                                               Body=body[n * part:(n + 1) * part])["ETag"]}
             for n in range(12)]
    remote = seaweed.client()
    seaweed.pause()  # the destage starts but cannot finish: the row sits in DESTAGING
    try:
        etag = client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id,
                                                MultipartUpload={"Parts": parts})["ETag"]
        state = _kill_mid_destage(node, mode, seaweed, bucket, key, lambda: bool(
            remote.list_multipart_uploads(Bucket=bucket, Prefix=key).get("Uploads")))
    finally:
        seaweed.resume()
    assert state == "destaging", "the destage finished before the kill; make the object larger"
    [opened] = remote.list_multipart_uploads(Bucket=bucket, Prefix=key)["Uploads"]
    node.start()
    flush(node.gw, bucket, key)
    [row] = versions(node.gw, bucket, key)
    assert row["state"] == "durable" and row["remote_etag"] == etag.strip('"')
    assert read_object(remote, bucket, key) == (sha(body), etag)
    assert remote.list_multipart_uploads(Bucket=bucket, Prefix=key).get("Uploads", []) == [], \
        f"the killed destage's upload {opened['UploadId']} was left open"


# ------------------------------------------------------------------------------------ 3. overwrites


@dataclass
class Write:
    client_no: int
    n: int
    sha256: str = ""
    etag: str = ""
    start: float = 0.0
    end: float = 0.0


@pytest.mark.parametrize("mode", MODES_QUICK_EMBEDDED, indirect=True)
def test_rapid_overwrites_remote_ends_with_newest(make_node: Callable[..., Node], mode: Mode, bucket: str,
                                                  seaweed: SeaweedServer) -> None:
    """100 PUTs of one key from 4 concurrent clients, each body distinct (its ETag names it).

    The journal's sequence numbers order the writes; it must agree with real time (a write that
    started after another was acknowledged has a higher seq), so its newest row is a valid "last
    acknowledged" version. The remote must end with exactly that version, and a monitor reading
    the remote throughout must never see it go back to an older one.
    """
    node = make_node()
    key = f"hot-{uuid.uuid4().hex[:8]}"
    writes: list[Write] = []
    lock = threading.Lock()
    seen_remote: list[str] = []
    stop = threading.Event()

    def writer(client_no: int) -> None:
        client = node.gw.client()
        rnd = random.Random()
        for n in range(25):
            size = rnd.choice([1, 64, 1024, 4096]) * 1024  # large ones keep a destage busy while newer writes land
            body = f"client {client_no} write {n}\n".encode() + rnd.randbytes(size)
            w = Write(client_no, n, sha(body))
            w.start = time.monotonic()
            w.etag = client.put_object(Bucket=bucket, Key=key, Body=body)["ETag"]
            w.end = time.monotonic()
            assert w.etag == md5_etag(body)
            with lock:
                writes.append(w)
            # Mostly back to back; now and then a pause, so some versions do reach the remote mid-run.
            time.sleep(rnd.uniform(0.2, 0.4) if rnd.random() < 0.1 else rnd.uniform(0, 0.03))

    def monitor() -> None:
        remote = seaweed.client()
        while not stop.is_set():
            with contextlib.suppress(ClientError):
                etag = remote.head_object(Bucket=bucket, Key=key)["ETag"]
                if not seen_remote or seen_remote[-1] != etag:
                    seen_remote.append(etag)
            time.sleep(0.01)

    watcher = threading.Thread(target=monitor)
    watcher.start()
    try:
        with ThreadPoolExecutor(4) as pool:
            for f in [pool.submit(writer, i) for i in range(4)]:
                f.result()
        flush(node.gw, bucket, key)
        time.sleep(0.1)
    finally:
        stop.set()
        watcher.join()

    rows = [r for r in versions(node.gw, bucket, key) if r["key"] == key]
    assert len(rows) == len(writes) == 100
    by_etag = {f'"{r["etag"]}"': r for r in rows}
    assert set(by_etag) == {w.etag for w in writes}, "every acknowledged write has exactly one journal row"
    seq = {w.etag: by_etag[w.etag]["seq"] for w in writes}
    # Real-time order: acknowledged before another started => older sequence number.
    for a in writes:
        for b in writes:
            if a.end < b.start:
                assert seq[a.etag] < seq[b.etag], (a, b)
    final = max(writes, key=lambda w: seq[w.etag])
    final_seq = seq[final.etag]
    for r in rows:
        if r["seq"] == final_seq:
            assert r["state"] == "durable", r
        else:
            assert r["state"] in ("superseded", "durable"), r
            assert r["seq"] < final_seq
    assert read_object(seaweed.client(), bucket, key) == (final.sha256, final.etag)
    assert read_object(node.gw.client(), bucket, key) == (final.sha256, final.etag)
    # The remote never went back to an older version.
    observed = [seq[e] for e in seen_remote]
    assert observed == sorted(observed), f"the remote went backwards: {observed}"
    assert observed[-1] == final_seq
    print(f"{sum(r['state'] == 'durable' for r in rows)} of 100 versions reached the remote; "
          f"the remote showed {len(observed)} distinct versions")


# ------------------------------------------------------------------------------------ 4. remote down


@pytest.mark.slow  # ~45 s; test_writeback.py's restart during an outage covers the outage in the quick profile
def test_remote_down_30s_writes_acknowledged_and_destaged_after(make_node: Callable[..., Node]) -> None:
    with SeaweedServer() as sw:
        bucket = sw.create_bucket("wbf-outage")
        node = make_node(remote=sw)
        client = node.gw.client()
        bodies = {f"outage/obj-{i:02d}": random.randbytes(random.randint(1, 3 * MiB)) for i in range(20)}
        confirm_bucket(client, bucket)
        sw.stop()
        down_at = time.monotonic()
        try:
            for key, body in bodies.items():
                assert client.put_object(Bucket=bucket, Key=key, Body=body)["ETag"] == md5_etag(body)
            # Read-your-writes while the remote is down.
            for key, body in bodies.items():
                assert read_object(client, bucket, key) == (sha(body), md5_etag(body))
                assert client.head_object(Bucket=bucket, Key=key)["ContentLength"] == len(body)

            def all_tried() -> list[dict[str, Any]] | None:
                rows = versions(node.gw, bucket, "outage/")
                ok = len(rows) == 20 and all(r["attempts"] >= 1 and r["last_error"] for r in rows)
                return rows if ok else None

            rows = wait_for(all_tried, 25, "every row to show a failed attempt", interval=0.5)
            assert all(r["state"] in ("buffered", "destaging", "failed") for r in rows)
            print("while down:", sorted({(r["state"], r["attempts"]) for r in rows}), rows[0]["last_error"][:200])
            time.sleep(max(0.0, 30 - (time.monotonic() - down_at)))
            rows = versions(node.gw, bucket, "outage/")
            print("after 30 s down:", sorted({(r["state"], r["attempts"]) for r in rows}))
        finally:
            sw.start()
        flush(node.gw, bucket, "outage/")
        remote = sw.client()
        for key, body in bodies.items():
            assert read_object(remote, bucket, key) == (sha(body), md5_etag(body))
        assert all(r["state"] == "durable" for r in versions(node.gw, bucket, "outage/"))
        node.stop()


# ------------------------------------------------------------------------------------ 5. lost messages


@pytest.mark.parametrize("mode", MODES, indirect=True)
def test_lost_destage_messages_are_found_by_the_sweeper(make_node: Callable[..., Node], mode: Mode, bucket: str,
                                                         seaweed: SeaweedServer) -> None:
    """Embedded: kill -9 right after the acks, with the remote hanging so no destage finished.
    Fleet: the messages sat in Redis with no worker running, and are purged with the dead gateway.
    Either way only the journal knows about the writes; the sweeper alone must destage them."""
    node = make_node(start_worker=False)
    prefix = f"lost-{uuid.uuid4().hex[:8]}/"
    bodies = {f"{prefix}{i:02d}": random.randbytes(random.randint(1, 512 * 1024)) for i in range(12)}
    client = node.gw.client()
    if mode.fleet:
        for key, body in bodies.items():
            client.put_object(Bucket=bucket, Key=key, Body=body)
        node.gw.kill()
        import redis

        r = redis.Redis.from_url(mode.redis_url or "")
        queue = f"ferry.{mode.env['FERRY_NODE_ID']}"
        assert r.llen(queue) >= len(bodies), "the destage messages should be waiting in the queue"
        for name in r.scan_iter(match=f"{queue}*"):
            r.delete(name)
    else:
        confirm_bucket(client, bucket)
        seaweed.pause()
        try:
            for key, body in bodies.items():
                client.put_object(Bucket=bucket, Key=key, Body=body)
            rows = versions(node.gw, bucket, prefix)
            assert {r["state"] for r in rows} <= {"buffered", "destaging"}
            node.gw.kill()
        finally:
            seaweed.resume()
    node.start()
    # No flush: the sweeper (embedded) or beat (fleet) must find the rows on its own.
    wait_for(lambda: all(r["state"] == "durable" for r in versions(node.gw, bucket, prefix)), 30,
             "the sweeper to destage every row", interval=0.25)
    flush(node.gw, bucket, prefix)
    remote = seaweed.client()
    for key, body in bodies.items():
        assert read_object(remote, bucket, key) == (sha(body), md5_etag(body))


# ------------------------------------------------------------------------------------ 6. backpressure


def _raw_put_expect_continue(gw: GatewayProcess, bucket: str, key: str, size: int) -> tuple[str, dict[str, str], bytes]:
    """A signed PUT that sends only its headers (Expect: 100-continue) and reads the answer."""
    url = f"{gw.endpoint}/{bucket}/{key}"
    req = AWSRequest("PUT", url, headers={"Content-Length": str(size), "Expect": "100-continue",
                                          "x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
    SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(req)
    host = urllib.parse.urlsplit(url).netloc
    lines = [f"PUT /{bucket}/{key} HTTP/1.1", f"Host: {host}"]
    lines += [f"{k}: {v}" for k, v in req.headers.items() if k.lower() != "host"]
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        status, *header_lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in header_lines)}
        length = int(headers.get("content-length", "0"))
        while len(rest) < length:
            chunk = s.recv(65536)
            if not chunk:
                break
            rest += chunk
    return status, headers, rest


def test_full_buffer_answers_slowdown_before_the_body(make_node: Callable[..., Node], bucket: str,
                                                      seaweed: SeaweedServer) -> None:
    node = make_node(env={"FERRY_WRITE_BUFFER_BYTES": str(8 * MiB)})
    client = node.gw.client()
    prefix = f"bp-{uuid.uuid4().hex[:8]}/"
    bodies = {f"{prefix}{i}": random.randbytes(MiB) for i in range(8)}
    confirm_bucket(client, bucket)
    seaweed.pause()
    try:
        for key, body in bodies.items():
            assert client.put_object(Bucket=bucket, Key=key, Body=body)["ETag"] == md5_etag(body)
        # The buffer is full: the next write is refused, with Retry-After and an S3 error body.
        with pytest.raises(ClientError) as info:
            client.put_object(Bucket=bucket, Key=f"{prefix}over", Body=random.randbytes(MiB))
        resp = info.value.response
        assert resp["ResponseMetadata"]["HTTPStatusCode"] == 503
        assert resp["Error"]["Code"] == "SlowDown"
        assert int(resp["ResponseMetadata"]["HTTPHeaders"]["retry-after"]) >= 1
        # ... before its bytes are accepted: no "100 Continue", the answer comes on the headers alone.
        status, headers, body = _raw_put_expect_continue(node.gw, bucket, f"{prefix}over", MiB)
        assert status.startswith("HTTP/1.1 503"), status
        assert "retry-after" in headers and headers.get("connection") == "close"
        assert b"<Code>SlowDown</Code>" in body and body.startswith(b"<?xml")
        assert not any((node.gw.data_dir / "tmp").iterdir()), "a refused body was staged"
        # Acknowledged writes still read back from the buffer.
        key0 = next(iter(bodies))
        assert read_object(client, bucket, key0) == (sha(bodies[key0]), md5_etag(bodies[key0]))
    finally:
        seaweed.resume()
    flush(node.gw, bucket, prefix)
    remote = seaweed.client()
    for key, body in bodies.items():
        assert read_object(remote, bucket, key) == (sha(body), md5_etag(body))
    assert not exists(remote, bucket, f"{prefix}over")
    # Drained: writes are accepted again.
    client.put_object(Bucket=bucket, Key=f"{prefix}after", Body=random.randbytes(MiB))


# ------------------------------------------------------------------------------------ 7. fleet mode


@pytest.mark.parametrize("mode", FLEET, indirect=True)
def test_fleet_writes_are_destaged_by_the_celery_worker(make_node: Callable[..., Node], mode: Mode, bucket: str,
                                                        seaweed: SeaweedServer) -> None:
    node = make_node()
    prefix = f"fleet-{uuid.uuid4().hex[:8]}/"
    client = node.gw.client()
    bodies = {f"{prefix}small-{i}": random.randbytes(random.randint(0, 256 * 1024)) for i in range(10)}
    for key, body in bodies.items():
        client.put_object(Bucket=bucket, Key=key, Body=body)
    parts = [random.randbytes(5 * MiB), random.randbytes(1234)]
    up = client.create_multipart_upload(Bucket=bucket, Key=f"{prefix}mp")["UploadId"]
    done = [{"PartNumber": n, "ETag": client.upload_part(Bucket=bucket, Key=f"{prefix}mp", UploadId=up,
                                                         PartNumber=n, Body=p)["ETag"]}
            for n, p in enumerate(parts, start=1)]
    etag = client.complete_multipart_upload(Bucket=bucket, Key=f"{prefix}mp", UploadId=up,
                                            MultipartUpload={"Parts": done})["ETag"]
    assert etag == multipart_etag(parts)
    client.delete_object(Bucket=bucket, Key=f"{prefix}small-0")
    flush(node.gw, bucket, prefix)
    remote = seaweed.client()
    for key, body in list(bodies.items())[1:]:
        assert read_object(remote, bucket, key) == (sha(body), md5_etag(body))
    assert read_object(remote, bucket, f"{prefix}mp") == (sha(b"".join(parts)), etag)
    assert not exists(remote, bucket, f"{prefix}small-0")
    assert node.worker is not None
    log = node.worker.log_text()
    assert log.count("Task ferry.destage[") >= len(bodies) + 1, node.logs()
    assert "succeeded" in log


@pytest.mark.parametrize("mode", FLEET, indirect=True)
def test_fleet_node_destages_only_its_own_writes(make_node: Callable[..., Node], mode: Mode, bucket: str,
                                                 seaweed: SeaweedServer) -> None:
    """Two nodes share the catalog; a buffered write's bytes live on the node that took it, so
    only that node's worker can destage it. Node A's sweeper must leave node B's rows alone."""
    node_a = make_node()
    node_b = make_node(env={"FERRY_NODE_ID": mode.env["FERRY_NODE_ID"] + "-b"}, start_worker=False)
    prefix = f"two-nodes-{uuid.uuid4().hex[:8]}/"
    client = node_b.gw.client()
    bodies = {f"{prefix}{i:02d}": random.randbytes(random.randint(1, 256 * 1024)) for i in range(10)}
    for key, body in bodies.items():
        client.put_object(Bucket=bucket, Key=key, Body=body)
    time.sleep(3)  # six sweeps of node A
    rows = versions(node_b.gw, bucket, prefix)
    touched = [r for r in rows if r["attempts"] or r["last_error"] or r["state"] != "buffered"]
    assert not touched, f"node A's worker took node B's writes: {touched[:3]}\n{node_a.logs()}"
    node_b.start()  # now B's worker
    flush(node_b.gw, bucket, prefix)
    remote = seaweed.client()
    for key, body in bodies.items():
        assert read_object(remote, bucket, key) == (sha(body), md5_etag(body))
    assert node_b.worker is not None and "Task ferry.destage[" in node_b.worker.log_text()


# ------------------------------------------------------------------------------------ 8. lease fencing
# A worker can outlive its lease without dying (a long GC pause, a frozen VM, a partition from the
# catalog): the sweeper then frees its row and another worker claims it. Whatever the stalled
# worker does when it wakes up must not count: the claim's generation is its fencing token. No
# process can be paused at exactly that point reliably, so these run the destager in-process
# against a remote that holds the upload until told to go on.


class StallingRemote:
    """A remote whose uploads wait for ``go``: the worker is stalled mid-upload."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()
        self.puts: list[bytes] = []
        self.completed: list[str] = []
        self.aborted: list[str] = []

    def conditional_writes(self, bucket: str) -> bool:
        return False  # unconditional PUTs: the lease alone has to fence them

    def put_object(self, bucket: str, key: str, body: Any, size: int, *_: Any, **__: Any) -> str:
        self.entered.set()
        assert self.go.wait(30)
        data = body.read()
        self.puts.append(data)
        return hashlib.md5(data).hexdigest()

    def create_multipart(self, *_: Any) -> str:
        return "upload-1"

    def upload_part(self, bucket: str, key: str, upload_id: str, number: int, body: Any, *_: Any) -> str:
        self.entered.set()
        assert self.go.wait(30)
        return hashlib.md5(body.read()).hexdigest()

    def complete_multipart(self, bucket: str, key: str, upload_id: str, parts: list[Any]) -> str:
        self.completed.append(upload_id)
        return multipart_etag(self.pieces).strip('"')

    def abort_multipart(self, bucket: str, key: str, upload_id: str) -> None:
        self.aborted.append(upload_id)

    pieces: list[bytes] = []


@pytest.mark.parametrize("multipart", [False, True], ids=["put", "multipart"])
def test_a_destage_that_lost_its_lease_commits_nothing(tmp_path: Path, multipart: bool) -> None:
    from app.adapters.catalog.engine import make_engine
    from app.adapters.catalog.journal.journal import BlobRef, Journal
    from app.adapters.catalog.migrate import upgrade
    from app.adapters.local.blobstore import BlobStore
    from app.domain.states import VersionState
    from app.services.destage.destager import Destager

    url = f"sqlite:///{tmp_path / 'ferry.db'}"
    upgrade(url)
    journal = Journal(make_engine(url), "node-a")
    store = BlobStore(tmp_path / "data", fsync=False)
    pieces = [random.randbytes(5 * MiB), b"tail"] if multipart else [b"version one"]
    refs = []
    for data in pieces:
        staging = store.open_staging()
        staging.write(data)
        blob = store.commit(staging)
        store.settle(blob)
        refs.append(BlobRef(blob, len(data), hashlib.md5(data).hexdigest()))
    etag = multipart_etag(pieces).strip('"') if multipart else refs[0].etag
    row = append_put(journal, VersionDraft("b", "k", sum(map(len, pieces)), etag, refs, {}, {}, {}, None,
                                          multipart=multipart))
    remote = StallingRemote()
    remote.pieces = pieces
    stalled = Destager(journal, store, remote, lease_seconds=1.5)  # type: ignore[arg-type]
    outcome: dict[str, str] = {}
    worker = threading.Thread(target=lambda: outcome.update(result=stalled.destage(row.seq)))
    worker.start()
    try:
        assert remote.entered.wait(10)
        # The stalled worker's lease runs out: the sweeper frees the row, another worker claims it.
        assert journal.release_expired_leases(now=time.time() + 3600) == 1
        other = journal.claim(row.seq, lease_seconds=3600)
        assert other is not None
    finally:
        remote.go.set()
        worker.join(30)
    assert outcome["result"] == "lost"
    current = journal.get(row.seq)
    assert current is not None
    assert (current.state, current.generation) == (VersionState.DESTAGING, other.generation), \
        "the stalled worker changed a row another worker owns"
    assert all(store.path(ref.blob).exists() for ref in refs), "the new owner's blobs were dropped"
    if multipart:
        # Neither Complete nor Abort without the lease: an abort writes the key too (the lease
        # fence); the remote-uploads chore removes the orphaned upload later.
        assert (remote.completed, remote.aborted) == ([], []), "wrote the key without the lease"
