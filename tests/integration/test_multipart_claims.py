"""Complete is one atomic claim of the upload: overlapping Completes, UploadParts and Aborts never
lose the object, and a repeated Complete answers the committed result (issue 11, "mpu")."""

from __future__ import annotations

import hashlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.support.gateway import GatewayProcess

MiB = 1024 * 1024


def mp_etag(parts: list[bytes]) -> str:
    return '"' + hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest() + f'-{len(parts)}"'


@pytest.fixture(scope="module")
def wb(seaweed: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(seaweed, tmp_path_factory.mktemp("mpu-wb")) as gw:
        yield gw


@pytest.fixture(scope="module")
def wt(seaweed: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(seaweed, tmp_path_factory.mktemp("mpu-wt"),
                        env={"FERRY_DEFAULT_MODE": "write-through"}) as gw:
        yield gw


def new_bucket(gw: GatewayProcess) -> str:
    name = f"mpu-{uuid.uuid4().hex[:12]}"
    gw.client().create_bucket(Bucket=name)
    return name


def start(gw: GatewayProcess, bucket: str, key: str, bodies: list[bytes]) -> tuple[str, list[dict[str, Any]]]:
    s3 = gw.client()
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    listed = [{"PartNumber": n, "ETag": s3.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=n,
                                                       Body=b)["ETag"]} for n, b in enumerate(bodies, 1)]
    return upload_id, listed


def at_once(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run the calls in threads released by one barrier; each result is a value or a ClientError."""
    barrier = threading.Barrier(len(calls))
    out: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        try:
            out[i] = calls[i]()
        except ClientError as exc:
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return out


def code(result: Any) -> str | None:
    return result.response["Error"]["Code"] if isinstance(result, ClientError) else None


def remote_body(seaweed: Any, bucket: str, key: str) -> bytes | None:
    try:
        return seaweed.client().get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as exc:
        assert exc.response["Error"]["Code"] in ("NoSuchKey", "404")
        return None


def no_failed_rows(gw: GatewayProcess, bucket: str) -> None:
    from app.adapters.catalog.engine import make_engine
    from app.adapters.catalog.journal.journal import Journal

    journal = Journal(make_engine(f"sqlite:///{gw.data_dir / 'ferry.db'}"), "x")
    states = [r.state.value for r in journal.versions(bucket)]
    assert "failed" not in states, states


def test_four_identical_completes_commit_one_readable_object(wb: GatewayProcess, seaweed: Any) -> None:
    bucket = new_bucket(wb)
    bodies = [os.urandom(5 * MiB), os.urandom(4321)]
    upload_id, listed = start(wb, bucket, "four.bin", bodies)
    clients = [wb.client() for _ in range(4)]
    results = at_once([lambda c=c: c.complete_multipart_upload(
        Bucket=bucket, Key="four.bin", UploadId=upload_id, MultipartUpload={"Parts": listed}) for c in clients])
    for r in results:  # every duplicate answers the committed result
        assert not isinstance(r, ClientError), r
        assert (r["ETag"], r["Bucket"], r["Key"]) == (mp_etag(bodies), bucket, "four.bin")
        assert r["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert wb.flush(timeout=60)["durable"]
    assert remote_body(seaweed, bucket, "four.bin") == b"".join(bodies)
    assert wb.client().get_object(Bucket=bucket, Key="four.bin")["Body"].read() == b"".join(bodies)
    no_failed_rows(wb, bucket)


def test_repeated_complete_answers_the_same_result(wb: GatewayProcess, seaweed: Any) -> None:
    bucket = new_bucket(wb)
    bodies = [os.urandom(5 * MiB), os.urandom(10)]
    upload_id, listed = start(wb, bucket, "again.bin", bodies)
    s3 = wb.client()
    first = s3.complete_multipart_upload(Bucket=bucket, Key="again.bin", UploadId=upload_id,
                                         MultipartUpload={"Parts": listed})
    second = s3.complete_multipart_upload(Bucket=bucket, Key="again.bin", UploadId=upload_id,
                                          MultipartUpload={"Parts": listed})
    for key in ("ETag", "Bucket", "Key", "Location"):
        assert second[key] == first[key]
    # The upload is over for everything else: parts and aborts get NoSuchUpload.
    with pytest.raises(ClientError) as info:
        s3.upload_part(Bucket=bucket, Key="again.bin", UploadId=upload_id, PartNumber=1, Body=b"x")
    assert code(info.value) == "NoSuchUpload"
    with pytest.raises(ClientError) as info:
        s3.abort_multipart_upload(Bucket=bucket, Key="again.bin", UploadId=upload_id)
    assert code(info.value) == "NoSuchUpload"
    assert wb.flush(timeout=60)["durable"]
    assert remote_body(seaweed, bucket, "again.bin") == b"".join(bodies)


def test_complete_racing_upload_part_of_a_listed_part(wb: GatewayProcess, seaweed: Any) -> None:
    bucket = new_bucket(wb)
    for i in range(4):
        key = f"race-part-{i}.bin"
        bodies = [os.urandom(5 * MiB), os.urandom(777)]
        upload_id, listed = start(wb, bucket, key, bodies)
        c1, c2 = wb.client(), wb.client()
        done, part = at_once([
            lambda c1=c1, key=key, upload_id=upload_id, listed=listed: c1.complete_multipart_upload(
                Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": listed}),
            lambda c2=c2, key=key, upload_id=upload_id: c2.upload_part(
                Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=2, Body=os.urandom(999)),
        ])
        assert wb.flush(timeout=60)["durable"]
        if isinstance(done, ClientError):  # the new part won: the listed ETag no longer matches
            assert code(done) == "InvalidPart", done
            assert not isinstance(part, ClientError)
            wb.client().abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
            assert remote_body(seaweed, bucket, key) is None
        else:  # the Complete won: exactly the parts it listed, and the part upload was refused
            assert code(part) in ("NoSuchUpload", "OperationAborted"), part
            assert remote_body(seaweed, bucket, key) == b"".join(bodies)
    no_failed_rows(wb, bucket)


def test_complete_racing_abort(wb: GatewayProcess, seaweed: Any) -> None:
    bucket = new_bucket(wb)
    for i in range(4):
        key = f"race-abort-{i}.bin"
        bodies = [os.urandom(5 * MiB), os.urandom(555)]
        upload_id, listed = start(wb, bucket, key, bodies)
        c1, c2 = wb.client(), wb.client()
        done, aborted = at_once([
            lambda c1=c1, key=key, upload_id=upload_id, listed=listed: c1.complete_multipart_upload(
                Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": listed}),
            lambda c2=c2, key=key, upload_id=upload_id: c2.abort_multipart_upload(
                Bucket=bucket, Key=key, UploadId=upload_id),
        ])
        assert wb.flush(timeout=60)["durable"]
        assert isinstance(done, ClientError) != isinstance(aborted, ClientError), (done, aborted)
        if isinstance(done, ClientError):
            assert code(done) == "NoSuchUpload"
            assert remote_body(seaweed, bucket, key) is None
            with pytest.raises(ClientError):
                wb.client().head_object(Bucket=bucket, Key=key)
        else:
            assert code(aborted) in ("NoSuchUpload", "OperationAborted"), aborted
            assert remote_body(seaweed, bucket, key) == b"".join(bodies)
    no_failed_rows(wb, bucket)


def test_write_through_completes_share_one_claim(wt: GatewayProcess, seaweed: Any) -> None:
    bucket = new_bucket(wt)
    bodies = [os.urandom(5 * MiB), os.urandom(2222)]
    upload_id, listed = start(wt, bucket, "wt.bin", bodies)
    clients = [wt.client() for _ in range(4)]
    results = at_once([lambda c=c: c.complete_multipart_upload(
        Bucket=bucket, Key="wt.bin", UploadId=upload_id, MultipartUpload={"Parts": listed}) for c in clients])
    for r in results:
        assert not isinstance(r, ClientError), r
        assert r["ETag"] == mp_etag(bodies)
    assert remote_body(seaweed, bucket, "wt.bin") == b"".join(bodies)
    blobs = [p for p in Path(wt.data_dir, "blobs").rglob("*") if p.is_file()]
    assert blobs == []  # the parts' blobs are gone once the object is on the remote


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def blob_files(gw: GatewayProcess) -> list[Path]:
    return [p for p in Path(gw.data_dir, "blobs").rglob("*") if p.is_file()]


def check_expiry(gw: GatewayProcess, seaweed: Any, database_url: str, node_id: str) -> None:
    """An upload left open past FERRY_MULTIPART_EXPIRY: the sweeper deletes its rows, its parts'
    blobs and the remote upload the eager copies started; the buffer no longer counts it."""
    from app.adapters.catalog.engine import make_engine
    from app.adapters.catalog.journal.journal import Journal

    bucket = new_bucket(gw)
    upload_id, _ = start(gw, bucket, "abandoned.bin", [os.urandom(5 * MiB), os.urandom(100)])
    remote = seaweed.client()

    def remote_uploads() -> list[Any]:
        return [u for u in remote.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
                if u["Key"] == "abandoned.bin"]

    engine = make_engine(database_url)
    journal = Journal(engine, node_id)
    assert journal.dirty_bytes() == 5 * MiB + 100
    assert len(blob_files(gw)) == 2
    wait_for(lambda: len(remote_uploads()) == 1, 10)  # the eager part copies started one
    wait_for(lambda: not gw.client().list_multipart_uploads(Bucket=bucket).get("Uploads"))
    # The sweep removes the rows, then the blobs, then the remote upload: the listing above can
    # answer between those steps (seen on a loaded machine), so the last two are waited for too.
    wait_for(lambda: blob_files(gw) == [], 10)
    wait_for(lambda: remote_uploads() == [], 10)
    assert journal.dirty_bytes() == 0
    with pytest.raises(ClientError) as info:
        gw.client().upload_part(Bucket=bucket, Key="abandoned.bin", UploadId=upload_id, PartNumber=3, Body=b"x")
    assert code(info.value) == "NoSuchUpload"
    engine.dispose()


def test_abandoned_uploads_expire(seaweed: Any, tmp_path: Path) -> None:
    """Embedded: the in-process executor's sweeper runs the expiry."""
    with GatewayProcess(seaweed, tmp_path / "gw", env={"FERRY_MULTIPART_EXPIRY": "4",
                                                       "FERRY_NODE_ID": "expiry-node"}) as gw:
        check_expiry(gw, seaweed, f"sqlite:///{gw.data_dir / 'ferry.db'}", "expiry-node")


@pytest.mark.fleet
def test_abandoned_uploads_expire_in_fleet_mode(seaweed: Any, tmp_path: Path, fresh_postgres_url: str,
                                                redis_url: str) -> None:
    """Fleet: the node's Celery beat sweep (``ferry.sweep``) runs the expiry."""
    from tests.support.celery_worker import CeleryWorker

    node = f"exp-{uuid.uuid4().hex[:10]}"
    env = {"FERRY_MULTIPART_EXPIRY": "4", "FERRY_NODE_ID": node, "FERRY_DATABASE_URL": fresh_postgres_url,
           "FERRY_BROKER_URL": redis_url}
    try:
        with GatewayProcess(seaweed, tmp_path / "gw", env=env) as gw, CeleryWorker(gw):
            check_expiry(gw, seaweed, fresh_postgres_url, node)
    finally:
        import redis

        with redis.Redis.from_url(redis_url) as r:
            for redis_key in r.scan_iter(match=f"*{node}*"):  # the node's queue and bindings
                r.delete(redis_key)


@pytest.mark.fleet
def test_complete_on_another_node_is_refused(seaweed: Any, fresh_postgres_url: str, tmp_path: Path) -> None:
    from app.adapters.catalog.engine import make_engine
    from app.adapters.catalog.journal.journal import Journal

    node_a, node_b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    with GatewayProcess(seaweed, tmp_path / "a", env={"FERRY_DATABASE_URL": fresh_postgres_url,
                                                      "FERRY_NODE_ID": node_a}) as gw_a, \
         GatewayProcess(seaweed, tmp_path / "b", env={"FERRY_DATABASE_URL": fresh_postgres_url,
                                                      "FERRY_NODE_ID": node_b}) as gw_b:
        bucket = new_bucket(gw_a)
        bodies = [os.urandom(5 * MiB), os.urandom(300)]
        upload_id, listed = start(gw_a, bucket, "a.bin", bodies)
        engine = make_engine(fresh_postgres_url)
        assert Journal(engine, node_a).dirty_bytes() == 5 * MiB + 300
        assert Journal(engine, node_b).dirty_bytes() == 0  # node b's disk holds none of them

        with pytest.raises(ClientError) as info:
            gw_b.client().complete_multipart_upload(Bucket=bucket, Key="a.bin", UploadId=upload_id,
                                                    MultipartUpload={"Parts": listed})
        assert code(info.value) == "InvalidRequest"
        assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
        assert "held by node" in info.value.response["Error"]["Message"]
        assert Journal(engine, node_a).versions(bucket) == []  # no row was committed anywhere

        done = gw_a.client().complete_multipart_upload(Bucket=bucket, Key="a.bin", UploadId=upload_id,
                                                       MultipartUpload={"Parts": listed})
        assert done["ETag"] == mp_etag(bodies)
        assert gw_a.client().get_object(Bucket=bucket, Key="a.bin")["Body"].read() == b"".join(bodies)
        engine.dispose()


def test_claim_of_a_dead_complete_blocks_parts_until_its_lease_expires(wb: GatewayProcess, seaweed: Any) -> None:
    """A Complete killed between its claim and its commit leaves the upload ``completing``: parts
    and aborts get 409 OperationAborted meanwhile, and once the lease has run out a retried
    Complete takes the upload over and commits it."""
    from sqlalchemy import text

    from app.adapters.catalog.engine import make_engine

    bucket = new_bucket(wb)
    bodies = [os.urandom(5 * MiB), os.urandom(64)]
    upload_id, listed = start(wb, bucket, "dead.bin", bodies)
    engine = make_engine(f"sqlite:///{wb.data_dir / 'ferry.db'}")

    def claim(until: float) -> None:  # what a Complete's claim leaves behind when its process dies
        with engine.begin() as conn:
            conn.execute(text("UPDATE multipart_uploads SET state='completing', claim='dead', claim_until=:u "
                              "WHERE upload_id=:id"), {"u": until, "id": upload_id})

    claim(time.time() + 600)
    s3 = wb.client()
    for call, kwargs in ((s3.upload_part, {"PartNumber": 3, "Body": b"late"}), (s3.abort_multipart_upload, {})):
        with pytest.raises(ClientError) as info:
            call(Bucket=bucket, Key="dead.bin", UploadId=upload_id, **kwargs)
        assert code(info.value) == "OperationAborted"
        assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 409
    claim(time.time() - 1)  # the lease ran out
    done = s3.complete_multipart_upload(Bucket=bucket, Key="dead.bin", UploadId=upload_id,
                                        MultipartUpload={"Parts": listed})
    assert done["ETag"] == mp_etag(bodies)
    assert wb.flush(timeout=60)["durable"]
    assert remote_body(seaweed, bucket, "dead.bin") == b"".join(bodies)
    engine.dispose()


def test_restart_after_kill9_reopens_the_claims_of_this_node(seaweed: Any, tmp_path: Path) -> None:
    """kill -9 while a Complete holds its claim (state as the dead process left it): the next
    ``ferry serve`` of the node reopens the upload at once, without waiting for the lease."""
    from sqlalchemy import text

    from app.adapters.catalog.engine import make_engine

    gw = GatewayProcess(seaweed, tmp_path / "gw", env={"FERRY_NODE_ID": "kill-node"}).start()
    try:
        bucket = new_bucket(gw)
        bodies = [os.urandom(5 * MiB)]
        upload_id, listed = start(gw, bucket, "killed.bin", bodies)
        gw.kill()
        engine = make_engine(f"sqlite:///{gw.data_dir / 'ferry.db'}")
        with engine.begin() as conn:
            conn.execute(text("UPDATE multipart_uploads SET state='completing', claim='dead', claim_node='kill-node', "
                              "claim_until=:u WHERE upload_id=:id"), {"u": time.time() + 3600, "id": upload_id})
        engine.dispose()
        gw.start()
        s3 = gw.client()
        extra = s3.upload_part(Bucket=bucket, Key="killed.bin", UploadId=upload_id, PartNumber=2, Body=b"tail")
        done = s3.complete_multipart_upload(Bucket=bucket, Key="killed.bin", UploadId=upload_id, MultipartUpload={
            "Parts": listed + [{"PartNumber": 2, "ETag": extra["ETag"]}]})
        assert done["ETag"] == mp_etag(bodies + [b"tail"])
        assert gw.flush(timeout=60)["durable"]
        assert remote_body(seaweed, bucket, "killed.bin") == b"".join(bodies) + b"tail"
    finally:
        gw.stop()
