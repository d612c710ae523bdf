"""Conditional writes (issue 14): If-None-Match / If-Match on PutObject, CopyObject and
CompleteMultipartUpload through a real ``ferry serve`` in front of SeaweedFS, judged against
the key's newest version as Ferry knows it (a buffered write, a pending delete, else the remote),
with the check and the write one step per key, also across two gateways on one catalog."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.support.gateway import GatewayProcess
from tests.support.seaweed import SeaweedServer

MiB = 1024 * 1024
LOSERS = {"PreconditionFailed", "ConditionalRequestConflict"}


@pytest.fixture(scope="module")
def remote() -> Iterator[SeaweedServer]:
    with SeaweedServer() as server:  # paused by some tests: not the session's server
        yield server


@pytest.fixture(scope="module", params=["write-back", "write-through"])
def gw(request: pytest.FixtureRequest, remote: SeaweedServer,
       tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    # A failed destage waits before its retry: rows written while the remote is paused stay buffered.
    env = {"FERRY_DEFAULT_MODE": request.param, "FERRY_DESTAGE_BACKOFF_BASE": "20",
           "FERRY_DESTAGE_BACKOFF_CAP": "20", "FERRY_REMOTE_READ_TIMEOUT": "2",
           "FERRY_REMOTE_CONNECT_TIMEOUT": "2", "FERRY_REMOTE_CIRCUIT_COOLDOWN": "1"}
    with GatewayProcess(remote, tmp_path_factory.mktemp(f"cw-{request.param}"), env=env) as g:
        g.mode = request.param  # type: ignore[attr-defined]
        yield g


@pytest.fixture
def bucket(gw: GatewayProcess) -> str:
    name = f"cw-{uuid.uuid4().hex[:12]}"
    gw.client().create_bucket(Bucket=name)
    return name


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


def status(result: Any) -> int:
    if isinstance(result, ClientError):
        return int(result.response["ResponseMetadata"]["HTTPStatusCode"])
    return int(result["ResponseMetadata"]["HTTPStatusCode"])


def fails(call: Callable[[], Any]) -> tuple[int, str | None]:
    try:
        call()
    except ClientError as exc:
        return status(exc), code(exc)
    raise AssertionError("the request succeeded")


def race_new_key(clients: list[Any], bucket: str, rounds: int) -> None:
    """Two If-None-Match: * PUTs of one new key at once, many times: exactly one wins."""
    for n in range(rounds):
        key = f"race/{n}"
        bodies = [f"writer {i} round {n}".encode() for i in range(len(clients))]
        results = at_once([lambda c=c, b=b, k=key: c.put_object(Bucket=bucket, Key=k, Body=b,
                                                                 IfNoneMatch="*")
                           for c, b in zip(clients, bodies, strict=True)])
        winners = [i for i, r in enumerate(results) if not isinstance(r, ClientError)]
        assert len(winners) == 1, (n, [code(r) or "200" for r in results])
        losers = [r for r in results if isinstance(r, ClientError)]
        assert all(code(r) in LOSERS and status(r) in (409, 412) for r in losers), [code(r) for r in losers]
        # Read through the winner's gateway: its data directory holds the buffered body.
        assert clients[winners[0]].get_object(Bucket=bucket, Key=key)["Body"].read() == bodies[winners[0]]


def test_racing_if_none_match_puts_exactly_one_wins(gw: GatewayProcess, bucket: str) -> None:
    race_new_key([gw.client(), gw.client()], bucket, 30)


def test_if_none_match_and_if_match_on_the_newest_version(gw: GatewayProcess, bucket: str,
                                                          remote: SeaweedServer) -> None:
    s3 = gw.client()
    first = s3.put_object(Bucket=bucket, Key="k", Body=b"one", IfNoneMatch="*")["ETag"]
    assert fails(lambda: s3.put_object(Bucket=bucket, Key="k", Body=b"two", IfNoneMatch="*")) == (
        412, "PreconditionFailed")
    assert fails(lambda: s3.put_object(Bucket=bucket, Key="k", Body=b"two", IfMatch='"0123"')) == (
        412, "PreconditionFailed")
    second = s3.put_object(Bucket=bucket, Key="k", Body=b"two", IfMatch=first)["ETag"]
    assert fails(lambda: s3.put_object(Bucket=bucket, Key="k", Body=b"three", IfMatch=first))[1] == (
        "PreconditionFailed")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"two"
    # If-Match on no object at all: S3's NoSuchKey.
    assert fails(lambda: s3.put_object(Bucket=bucket, Key="absent", Body=b"x", IfMatch=second)) == (
        404, "NoSuchKey")
    # Destaged: the remote itself answers for the key.
    gw.flush(bucket)
    assert remote.client().head_object(Bucket=bucket, Key="k")["ETag"] == second
    assert fails(lambda: s3.put_object(Bucket=bucket, Key="k", Body=b"x", IfMatch=first))[1] == "PreconditionFailed"
    assert fails(lambda: s3.put_object(Bucket=bucket, Key="k", Body=b"x", IfNoneMatch="*"))[1] == (
        "PreconditionFailed")
    third = s3.put_object(Bucket=bucket, Key="k", Body=b"three", IfMatch=second)["ETag"]
    gw.flush(bucket)
    assert remote.client().get_object(Bucket=bucket, Key="k")["Body"].read() == b"three"
    assert remote.client().head_object(Bucket=bucket, Key="k")["ETag"] == third


def test_the_remote_is_consulted_when_the_journal_knows_nothing(gw: GatewayProcess, bucket: str,
                                                                remote: SeaweedServer) -> None:
    etag = remote.client().put_object(Bucket=bucket, Key="theirs", Body=b"written around Ferry")["ETag"]
    s3 = gw.client()
    assert fails(lambda: s3.put_object(Bucket=bucket, Key="theirs", Body=b"x", IfNoneMatch="*")) == (
        412, "PreconditionFailed")
    assert fails(lambda: s3.put_object(Bucket=bucket, Key="theirs", Body=b"x", IfMatch='"ffff"'))[0] == 412
    s3.put_object(Bucket=bucket, Key="theirs", Body=b"ours", IfMatch=etag)
    assert s3.get_object(Bucket=bucket, Key="theirs")["Body"].read() == b"ours"


def test_buffered_writes_and_deletes_count_without_the_remote(gw: GatewayProcess, bucket: str,
                                                              remote: SeaweedServer) -> None:
    if gw.mode != "write-back":  # type: ignore[attr-defined]
        pytest.skip("only write-back buffers writes while the remote is down")
    s3 = gw.client()
    s3.put_object(Bucket=bucket, Key="warm", Body=b"bucket confirmed")
    remote.pause()
    try:
        v1 = s3.put_object(Bucket=bucket, Key="b", Body=b"v1", IfNoneMatch="*")["ETag"]  # no row: asks the remote
    except ClientError as exc:  # the remote is down and nothing local knows the key: retryable 503
        assert status(exc) == 503, exc.response
        v1 = None
    try:
        if v1 is None:
            v1 = s3.put_object(Bucket=bucket, Key="b", Body=b"v1")["ETag"]
        # Everything below is judged from the journal alone: the remote is paused.
        assert fails(lambda: s3.put_object(Bucket=bucket, Key="b", Body=b"v2", IfNoneMatch="*"))[1] == (
            "PreconditionFailed")
        assert fails(lambda: s3.put_object(Bucket=bucket, Key="b", Body=b"v2", IfMatch='"beef"'))[1] == (
            "PreconditionFailed")
        v2 = s3.put_object(Bucket=bucket, Key="b", Body=b"v2", IfMatch=v1)["ETag"]
        s3.delete_object(Bucket=bucket, Key="b")  # a pending delete: no object
        assert fails(lambda: s3.put_object(Bucket=bucket, Key="b", Body=b"v3", IfMatch=v2)) == (404, "NoSuchKey")
        s3.put_object(Bucket=bucket, Key="b", Body=b"v3", IfNoneMatch="*")
    finally:
        remote.resume()
    deadline = time.monotonic() + 30
    while True:
        try:
            gw.flush(bucket, timeout=60)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    assert remote.client().get_object(Bucket=bucket, Key="b")["Body"].read() == b"v3"


def test_copy_object_destination_conditions(gw: GatewayProcess, bucket: str) -> None:
    s3 = gw.client()
    s3.put_object(Bucket=bucket, Key="src", Body=b"source")
    dest = s3.put_object(Bucket=bucket, Key="dst", Body=b"dest")["ETag"]
    source = {"Bucket": bucket, "Key": "src"}
    assert fails(lambda: s3.copy_object(Bucket=bucket, Key="dst", CopySource=source, IfNoneMatch="*")) == (
        412, "PreconditionFailed")
    assert fails(lambda: s3.copy_object(Bucket=bucket, Key="dst", CopySource=source, IfMatch='"00"'))[0] == 412
    s3.copy_object(Bucket=bucket, Key="dst", CopySource=source, IfMatch=dest)
    s3.copy_object(Bucket=bucket, Key="new", CopySource=source, IfNoneMatch="*")
    assert s3.get_object(Bucket=bucket, Key="dst")["Body"].read() == b"source"
    assert s3.get_object(Bucket=bucket, Key="new")["Body"].read() == b"source"


def test_complete_with_if_none_match_when_the_key_appeared_meanwhile(gw: GatewayProcess, bucket: str) -> None:
    s3 = gw.client()
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    parts = [{"PartNumber": n, "ETag": s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload, PartNumber=n,
                                                      Body=bytes([n]) * (5 * MiB if n == 1 else 10))["ETag"]}
             for n in (1, 2)]
    other = s3.put_object(Bucket=bucket, Key="mp", Body=b"someone else first")["ETag"]

    def complete(**kw: Any) -> Any:
        return s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload,
                                            MultipartUpload={"Parts": parts}, **kw)

    assert fails(lambda: complete(IfNoneMatch="*")) == (412, "PreconditionFailed")
    assert fails(lambda: complete(IfMatch='"abcd"')) == (412, "PreconditionFailed")
    assert s3.get_object(Bucket=bucket, Key="mp")["Body"].read() == b"someone else first"
    # The upload is still open: a Complete whose condition holds commits it.
    etag = complete(IfMatch=other)["ETag"]
    assert etag.endswith('-2"')
    assert complete(IfMatch=other)["ETag"] == etag  # a repeated Complete answers the same result
    assert s3.head_object(Bucket=bucket, Key="mp")["ContentLength"] == 5 * MiB + 10


class DropFirstAnswer:
    """A TCP relay in front of the gateway that forwards the first request and then closes the
    client's connection instead of relaying the answer: the request succeeded, its answer was
    lost, and the SDK retries it (same ``amz-sdk-invocation-id``)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.dropped = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        drop = self.dropped == 0
        self.dropped += 1 if drop else 0

        def pump() -> None:
            try:
                while data := client.recv(65536):
                    upstream.sendall(data)
            except OSError:
                pass

        threading.Thread(target=pump, daemon=True).start()
        try:
            while data := upstream.recv(65536):
                if drop:
                    break  # the gateway answered: the client never sees it
                client.sendall(data)
        except OSError:
            pass
        finally:
            client.close()
            upstream.close()

    def close(self) -> None:
        self.listener.close()


def test_a_retried_conditional_put_whose_answer_was_lost_succeeds(gw: GatewayProcess, bucket: str) -> None:
    relay = DropFirstAnswer(gw.port)
    try:
        import boto3
        from botocore.config import Config

        s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{relay.port}", region_name="us-east-1",
                          aws_access_key_id=gw.client()._request_signer._credentials.access_key,
                          aws_secret_access_key=gw.client()._request_signer._credentials.secret_key,
                          config=Config(s3={"addressing_style": "path"},
                                        retries={"max_attempts": 3, "mode": "standard"}))
        answer = s3.put_object(Bucket=bucket, Key="once", Body=b"commit 1", IfNoneMatch="*")
        assert relay.dropped == 1 and answer["ResponseMetadata"]["RetryAttempts"] == 1
        assert answer["ETag"] == gw.client().head_object(Bucket=bucket, Key="once")["ETag"]
    finally:
        relay.close()
    # Another request (another invocation), even with the same body, is refused as on S3.
    assert fails(lambda: gw.client().put_object(Bucket=bucket, Key="once", Body=b"commit 1",
                                                IfNoneMatch="*")) == (412, "PreconditionFailed")


def test_two_gateways_on_one_catalog_race_as_one(remote: SeaweedServer, tmp_path: Any,
                                                 fresh_postgres_url: str) -> None:
    envs = [{"FERRY_DATABASE_URL": fresh_postgres_url, "FERRY_NODE_ID": f"cw-node-{i}"} for i in range(2)]
    with GatewayProcess(remote, tmp_path / "a", env=envs[0]) as a, \
            GatewayProcess(remote, tmp_path / "b", env=envs[1]) as b:
        bucket = f"cw-fleet-{uuid.uuid4().hex[:8]}"
        a.client().create_bucket(Bucket=bucket)
        race_new_key([a.client(), b.client()], bucket, 30)
