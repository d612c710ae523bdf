"""Acknowledged writes that must arrive (issue 25, "data that disappears or never arrives"),
against a real SeaweedFS.

- A superseded row whose parts were copied ahead aborts that remote upload best effort: during
  an outage the abort fails quietly (the remote-uploads chore removes the orphan later), and the
  row is superseded at once instead of raising out of the destage and waiting for its lease.
- The destage's fence (a single PutObject conditional on what the remote held under the lease)
  never turns a writable key into a stuck one: SeaweedFS refuses any conditional write of a key
  that names a directory (``p/a/`` while ``p/a/b`` exists, ``q/a`` while ``q/a/`` is a directory)
  with 412, although the plain PUT is stored. Ferry's write-back ends where SeaweedFS directly does.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_write_order import _journal_put, _remote_store
from tests.reliability.test_disk_full import small_disk  # noqa: F401 - the fixture
from tests.support.counting_proxy import CountingProxy
from tests.support.gateway import GatewayProcess, free_port, remote_client
from tests.support.seaweed import SeaweedServer


@pytest.fixture
def journal_and_store(tmp_path: Path) -> tuple[Any, Any]:
    from app.adapters.catalog.engine import make_engine
    from app.adapters.catalog.journal.journal import Journal
    from app.adapters.catalog.migrate import upgrade
    from app.adapters.local.blobstore import BlobStore

    url = f"sqlite:///{tmp_path / 'ferry.db'}"
    upgrade(url)
    return Journal(make_engine(url), "node-a"), BlobStore(tmp_path / "data", fsync=False)


@pytest.fixture(params=["unreachable", "answers-503"])
def remote_down(request: pytest.FixtureRequest, seaweed: SeaweedServer) -> Iterator[Any]:
    """A RemoteStore whose remote is down: nothing listens, or every request gets a 503."""
    from app.adapters.remote import RemoteConfig, RemoteStore

    if request.param == "unreachable":
        yield RemoteStore(RemoteConfig(f"http://127.0.0.1:{free_port()}", "us-east-1", "k", "s",
                                       connect_timeout=1, max_attempts=1))
        return
    with CountingProxy(seaweed) as proxy:
        proxy.fail_with = 503
        yield RemoteStore(RemoteConfig(proxy.endpoint, "us-east-1", seaweed.access_key, seaweed.secret_key,
                                       max_attempts=1))


def test_a_superseded_rows_upload_abort_during_an_outage_does_not_fail_the_destage(
        journal_and_store: tuple[Any, Any], remote_down: Any) -> None:
    from app.adapters.catalog.tables import ObjectVersion
    from app.domain.states import VersionState
    from app.services.destage.destager import Destager

    journal, store = journal_and_store
    older = _journal_put(journal, store, "bucket", "ckpt", b"older")
    # The older row's parts were being copied ahead to a remote upload (eager parts).
    with journal.sessions.begin() as s:
        s.get(ObjectVersion, older.seq).remote_upload_id = "upload-copied-ahead"
    _journal_put(journal, store, "bucket", "ckpt", b"newer")
    destager = Destager(journal, store, remote_down, lease_seconds=30)
    assert destager.destage(older.seq) == "superseded"
    assert journal.get(older.seq).state is VersionState.SUPERSEDED


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def _remote_objects(client: Any, bucket: str, prefix: str) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            out[item["Key"][len(prefix):]] = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
    return out


# Sequences of writes (key, body; None: delete) whose later write names a directory on SeaweedFS.
DIRECTORY_SEQUENCES = {
    "folder-marker-over-a-directory": [("a/b", b"x"), ("a/", b"")],
    "file-next-to-a-folder-marker": [("a/", b""), ("a", b"y")],
    "file-next-to-a-directory": [("a/b/", b""), ("a/b/c", b"x"), ("a/b", b"y")],
    "folder-marker-deleted-under-a-directory": [("a/b", b"x"), ("a/", b""), ("a/", None)],
}


@pytest.mark.parametrize("sequence", list(DIRECTORY_SEQUENCES), ids=list(DIRECTORY_SEQUENCES))
def test_write_back_ends_where_seaweedfs_directly_does(gateway: GatewayProcess, seaweed: SeaweedServer,
                                                       bucket: str, sequence: str) -> None:
    """Each write destaged on its own (flush after each), as a client writing SeaweedFS directly."""
    direct, through = f"direct-{uuid.uuid4().hex[:8]}/", f"ferry-{uuid.uuid4().hex[:8]}/"
    remote, client = remote_client(seaweed), gateway.client()
    for key, body in DIRECTORY_SEQUENCES[sequence]:
        if body is None:
            remote.delete_object(Bucket=bucket, Key=direct + key)
            client.delete_object(Bucket=bucket, Key=through + key)
        else:
            remote.put_object(Bucket=bucket, Key=direct + key, Body=body)
            client.put_object(Bucket=bucket, Key=through + key, Body=body)
        result = gateway.flush(bucket, through, timeout=20)
        assert result["durable"] and not result["failed"], (key, result)
    expected = _remote_objects(remote, bucket, direct)
    assert _remote_objects(remote, bucket, through) == expected


def test_the_fence_still_refuses_a_write_that_landed_meanwhile(journal_and_store: tuple[Any, Any],
                                                                seaweed: SeaweedServer, bucket: str) -> None:
    """The fallback for a directory's 412 applies only when the key still holds no object: a
    write that landed between the HEAD and the PUT keeps the refusal (the row retries). A body
    above ABSENCE_FIRST_BYTES: the HEAD comes first."""
    from app.domain.errors import S3Error
    from app.services.destage.destager import spec_of, upload
    from app.services.destage.upload import ABSENCE_FIRST_BYTES

    journal, store = journal_and_store
    key = f"raced-{uuid.uuid4().hex[:8]}"
    row = _journal_put(journal, store, bucket, key, b"o" * (ABSENCE_FIRST_BYTES + 1))
    real = _remote_store(seaweed)

    class LandsFirst:
        """The remote, where another write of the key lands right after the fence's HEAD."""

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def current_etag(self, b: str, k: str) -> str | None:
            found = real.current_etag(b, k)
            remote_client(seaweed).put_object(Bucket=b, Key=k, Body=b"theirs")
            return found

    with pytest.raises(S3Error) as info:
        upload(LandsFirst(), store, spec_of(row), conditional=True)
    assert info.value.code == "PreconditionFailed"
    assert remote_client(seaweed).get_object(Bucket=bucket, Key=key)["Body"].read() == b"theirs"


def test_a_small_new_key_is_destaged_by_one_put_and_an_overwrite_by_its_etag(
        journal_and_store: tuple[Any, Any], seaweed: SeaweedServer, bucket: str) -> None:
    """A small single PUT asks for absence in the PUT itself (no HEAD first): a new key costs
    the remote one request. A key that holds an object is refused (412), read (HEAD) and
    written on its ETag; a directory-named key (412, yet no object) gets the plain PUT."""
    from app.adapters.remote import RemoteConfig, RemoteStore
    from app.services.destage.destager import Destager

    journal, store = journal_and_store
    base = f"absent-{uuid.uuid4().hex[:8]}"
    with CountingProxy(seaweed) as proxy:
        remote = RemoteStore(RemoteConfig(proxy.endpoint, "us-east-1", seaweed.access_key, seaweed.secret_key))
        destager = Destager(journal, store, remote, lease_seconds=30)
        assert remote.conditional_writes(bucket)
        proxy.reset()

        def sent(key: str) -> list[tuple[str, int]]:
            proxy.idle()
            return [(r.method, r.status) for r in proxy.requests(key=key)]

        new = _journal_put(journal, store, bucket, f"{base}/new", b"first bytes")
        assert destager.destage(new.seq) == "durable"
        assert sent(f"{base}/new") == [("PUT", 200)]

        remote_client(seaweed).put_object(Bucket=bucket, Key=f"{base}/old", Body=b"written elsewhere")
        proxy.reset()
        over = _journal_put(journal, store, bucket, f"{base}/old", b"ours, newer")
        assert destager.destage(over.seq) == "durable"
        assert sent(f"{base}/old") == [("PUT", 412), ("HEAD", 200), ("PUT", 200)]
        assert remote_client(seaweed).get_object(Bucket=bucket, Key=f"{base}/old")["Body"].read() == b"ours, newer"

        remote_client(seaweed).put_object(Bucket=bucket, Key=f"{base}/dir/inner", Body=b"x")
        folder = _journal_put(journal, store, bucket, f"{base}/dir/", b"")
        assert destager.destage(folder.seq) == "durable"
    assert remote_client(seaweed).head_object(Bucket=bucket, Key=f"{base}/dir/")["ContentLength"] == 0


def test_a_flush_keeps_the_attempts_of_a_row_that_cannot_succeed(journal_and_store: tuple[Any, Any],
                                                                  seaweed: SeaweedServer) -> None:
    """The flush retries a failed row once more; it ends FAILED again, attempts counted, error
    kept (before, the flush reset its attempts: ``flush --wait`` waited on it for ever)."""
    from app.domain.states import VersionState
    from app.services.destage.destager import Destager

    journal, store = journal_and_store
    row = _journal_put(journal, store, f"gone-{uuid.uuid4().hex[:8]}", "k", b"never arrives")  # no such bucket
    destager = Destager(journal, store, _remote_store(seaweed), max_attempts=2, backoff_base=0.0, backoff_cap=0.0)
    assert [destager.destage(row.seq) for _ in range(2)] == ["retry", "failed"]
    for flush in (1, 2):
        assert journal.retry_now(include_failed=True) == 1  # what the flush does first
        assert destager.destage(row.seq) == "failed", flush
        after = journal.get(row.seq)
        assert after.state is VersionState.FAILED and after.attempts == 2 + flush
        assert "NoSuchBucket" in (after.last_error or "")


def _with_expires(client: Any, value: str) -> Any:
    """The client sends this raw ``Expires`` on every write (boto3 takes only datetimes)."""
    def add(request: Any, **_: Any) -> None:
        request.headers["Expires"] = value
    for op in ("PutObject", "CreateMultipartUpload", "CopyObject"):
        client.meta.events.register_first(f"before-sign.s3.{op}", add)
    return client


@pytest.mark.parametrize("value", ["notadate", "0", "2015-10-21T07:28:00Z", "Wed, 1 Oct 2015 07:28:00 GMT"])
def test_an_expires_seaweedfs_refuses_is_refused_at_the_door(gateway: GatewayProcess, seaweed: SeaweedServer,
                                                            bucket: str, value: str) -> None:
    """SeaweedFS answers 400 MalformedDate to these: so does Ferry, before acknowledging."""
    from botocore.exceptions import ClientError

    client, remote = _with_expires(gateway.client(), value), _with_expires(remote_client(seaweed), value)
    key = f"exp-{uuid.uuid4().hex[:8]}"
    answers = []
    for c in (remote, client):
        for call in (lambda c=c: c.put_object(Bucket=bucket, Key=key, Body=b"x"),
                     lambda c=c: c.create_multipart_upload(Bucket=bucket, Key=key)):
            with pytest.raises(ClientError) as info:
                call()
            answers.append((info.value.response["ResponseMetadata"]["HTTPStatusCode"],
                            info.value.response["Error"]["Code"]))
    assert answers == [(400, "MalformedDate")] * 4
    assert gateway.flush(bucket, key, timeout=20)["durable"]


def test_an_http_date_expires_is_stored(gateway: GatewayProcess, seaweed: SeaweedServer, bucket: str) -> None:
    value = "wed, 21 oct 2015 07:28:00 GMT"  # any case, as SeaweedFS takes it
    client = _with_expires(gateway.client(), value)
    client.put_object(Bucket=bucket, Key="exp-ok", Body=b"x")
    assert gateway.flush(bucket, "exp-ok", timeout=20)["durable"]
    head = remote_client(seaweed).head_object(Bucket=bucket, Key="exp-ok")
    assert head["ResponseMetadata"]["HTTPHeaders"]["expires"] == value


@pytest.mark.parametrize(("headers", "status", "code"), [
    ({}, 400, "InvalidRequest"),
    ({"Content-MD5": "1B2M2Y8AsgTpgAmY7PhCfg=="}, 400, "BadDigest"),  # the MD5 of an empty body
    ({"x-amz-checksum-crc32": "AAAAAA=="}, 400, "BadDigest"),
    ("md5", 200, None),
], ids=["none", "wrong-md5", "wrong-crc32", "right-md5"])
def test_delete_objects_needs_a_content_md5_or_checksum(gateway: GatewayProcess, bucket: str, headers: Any,
                                                        status: int, code: str | None) -> None:
    """S3: 'Missing required header for this request: Content-MD5' (x-amz-checksum-* also does)."""
    import base64
    import re

    from tests.integration.test_s3_auth_payloads import signed_request

    body = b'<Delete><Object><Key>gone</Key></Object></Delete>'
    if headers == "md5":
        headers = {"Content-MD5": base64.b64encode(hashlib.md5(body).digest()).decode()}
    got, _, answer = signed_request(gateway, "POST", f"/{bucket}?delete", body, headers)
    assert got == status, answer
    if code:
        assert re.search(rb"<Code>(\w+)</Code>", answer).group(1).decode() == code
        if not headers:
            assert b"Missing required header for this request: Content-MD5" in answer


def test_bodiless_writes_on_a_full_disk_answer_slowdown(seaweed: SeaweedServer, small_disk: Path) -> None:  # noqa: F811
    """DELETE, CreateMultipartUpload and a 0-byte PUT write only the SQLite journal: once its disk
    is full they answer 503 SlowDown with Retry-After, as bodies do (was: 500 'database or disk
    is full')."""
    import subprocess

    from botocore.exceptions import ClientError

    env = {"FERRY_DISK_RESERVE_BYTES": "0", "FERRY_DISK_RESERVE_RATIO": "0"}
    with GatewayProcess(seaweed, small_disk / "gw", env=env) as gw:
        client = gw.client(retries={"max_attempts": 1})
        name = f"full-{uuid.uuid4().hex[:8]}"
        client.create_bucket(Bucket=name)
        subprocess.run(["dd", "if=/dev/zero", f"of={small_disk / 'filler'}", "bs=1M"], capture_output=True)
        calls = (lambda i: client.delete_object(Bucket=name, Key=f"d{i}"),
                 lambda i: client.create_multipart_upload(Bucket=name, Key=f"m{i}"),
                 lambda i: client.put_object(Bucket=name, Key=f"z{i}", Body=b""))
        answers: set[tuple[int, str]] = set()
        for i in range(300):
            for call in calls:
                try:
                    call(i)
                except ClientError as exc:
                    meta = exc.response["ResponseMetadata"]
                    answers.add((meta["HTTPStatusCode"], exc.response["Error"]["Code"]))
                    if meta["HTTPStatusCode"] == 503:
                        assert meta["HTTPHeaders"].get("retry-after"), exc.response
            if answers:
                break
        assert answers == {(503, "SlowDown")}, (answers, gw.log_tail())


@pytest.mark.parametrize("file_state", ["buffered", "on-the-remote"])
def test_a_folder_marker_over_a_file_is_refused_as_seaweedfs_does(gateway: GatewayProcess, seaweed: SeaweedServer,
                                                                  bucket: str, file_state: str) -> None:
    """SeaweedFS answers ``a/`` over a file ``a`` with 409 ExistingObjectIsFile; Ferry said 200 and
    the row failed at every destage. Now the same 409, whether ``a`` is still buffered or not."""
    from botocore.exceptions import ClientError

    direct, through = f"direct-{uuid.uuid4().hex[:8]}/a", f"ferry-{uuid.uuid4().hex[:8]}/a"
    remote, client = remote_client(seaweed), gateway.client()
    answers = []
    for c, key in ((remote, direct), (client, through)):
        c.put_object(Bucket=bucket, Key=key, Body=b"file")
        if file_state == "on-the-remote" and c is client:
            assert gateway.flush(bucket, key, timeout=20)["durable"]
        with pytest.raises(ClientError) as info:
            c.put_object(Bucket=bucket, Key=key + "/", Body=b"")
        answers.append((info.value.response["ResponseMetadata"]["HTTPStatusCode"], info.value.response["Error"]["Code"]))
    assert answers == [(409, "ExistingObjectIsFile")] * 2
    assert gateway.flush(bucket, through, timeout=20)["durable"]
