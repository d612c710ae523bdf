"""The local read socket (app/server/local_reads.py) against a real gateway and SeaweedFS: a
cached range comes back as cache-block descriptors whose bytes are the object's; a miss, a
stale version, a bad signature and a missing key get what HTTP gets; the socket is reachable
only by the gateway's user; two workers share one socket; a gateway without it leaves the mount
on HTTP."""

from __future__ import annotations

import os
import stat
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.mount.local_reads import LocalReads, LocalUnavailable
from app.mount.objects import GatewayObjects, ObjectError
from app.server.local_reads import socket_path
from app.server.local_wire import MAX_FDS, frame, read_frame
from tests.support.gateway import ACCESS_KEY, SECRET_KEY, GatewayProcess, remote_client
from tests.support.seaweed import SeaweedServer

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def gw(seaweed: SeaweedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(seaweed, tmp_path_factory.mktemp("local-reads")) as g:
        yield g


@pytest.fixture
def bucket(gw: GatewayProcess) -> str:
    name = f"lr-{uuid.uuid4().hex[:12]}"
    gw.client().create_bucket(Bucket=name)
    return name


def objects(gw: GatewayProcess, secret: str = SECRET_KEY) -> GatewayObjects:
    return GatewayObjects(gw.endpoint, ACCESS_KEY, secret, local_socket=socket_path(gw.data_dir))


def raw_get(gw: GatewayProcess, bucket: str, key: str, headers: dict[str, str]) -> tuple[dict, list[int], bytes]:
    """One exchange on the socket, by hand: the answer, its descriptors and its bytes."""
    import socket
    from urllib.parse import urlsplit

    url = urlsplit(gw.client().generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}))
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(socket_path(gw.data_dir)))
        sock.sendall(frame({"path": url.path, "query": url.query, "headers": {"host": url.netloc, **headers}}))
        answer, fds, rest = read_frame(sock, MAX_FDS)
        body = bytearray(rest)
        while len(body) < answer["body"]:
            body.extend(sock.recv(1 << 20))
    return answer, fds, bytes(body)


def test_a_cached_range_comes_back_as_descriptors_of_its_bytes(gw: GatewayProcess, bucket: str) -> None:
    data = os.urandom(20 * MiB)  # three 8 MiB blocks
    s3 = gw.client()
    s3.put_object(Bucket=bucket, Key="obj", Body=data)
    gw.flush(bucket)
    assert s3.get_object(Bucket=bucket, Key="obj")["Body"].read() == data  # the cache holds it now
    etag = s3.head_object(Bucket=bucket, Key="obj")["ETag"]
    start, end = 7 * MiB, 17 * MiB - 1  # spans the three blocks
    answer, fds, body = raw_get(gw, bucket, "obj", {"range": f"bytes={start}-{end}", "if-match": etag})
    try:
        assert answer["status"] == 206 and body == b""
        assert len(fds) == len(answer["segments"]) == 3
        got = b"".join(os.pread(fd, count, offset) for fd, (offset, count) in zip(fds, answer["segments"],
                                                                                    strict=True))
        assert got == data[start:end + 1]
        for fd in fds:  # read-only descriptors: the client cannot write the cache
            assert os.fstat(fd).st_size >= 0
            with pytest.raises(OSError):
                os.pwrite(fd, b"x", 0)
    finally:
        for fd in fds:
            os.close(fd)
    # Through the mount's reader: the same bytes, and the stale version is refused.
    reader = objects(gw)
    assert reader.read(bucket, "obj", start, end - start + 1, etag.strip('"')) == data[start:end + 1]
    with pytest.raises(ObjectError) as stale:
        reader.read(bucket, "obj", 0, MiB, "0" * 32)
    assert stale.value.code == "Stale"
    assert reader._local_off_until == 0.0  # every read went over the socket, none fell back to HTTP


def test_a_miss_an_error_and_a_bad_signature_answer_as_http_does(gw: GatewayProcess, bucket: str,
                                                                 seaweed: SeaweedServer) -> None:
    cold = os.urandom(3 * MiB)
    remote_client(seaweed).put_object(Bucket=bucket, Key="cold", Body=cold)  # never read through the gateway
    etag = remote_client(seaweed).head_object(Bucket=bucket, Key="cold")["ETag"].strip('"')
    reader = objects(gw)
    assert reader.read(bucket, "cold", MiB, MiB, etag) == cold[MiB:2 * MiB]
    with pytest.raises(ObjectError) as missing:
        reader.read(bucket, "absent", 0, 10, etag)
    assert missing.value.code == "NoSuchKey"
    answer, fds, body = raw_get(gw, bucket, "cold", {"range": "bytes=0-9"})
    assert answer["status"] == 206 and (fds or body)
    for fd in fds:
        os.close(fd)
    with pytest.raises(ObjectError) as forged:  # signed with another secret: refused, no descriptor
        objects(gw, secret="not-the-secret").read(bucket, "cold", 0, 10, etag)
    assert forged.value.code == "SignatureDoesNotMatch"
    assert reader._local_off_until == 0.0


def test_a_miss_comes_back_as_one_map_of_its_fill(gw: GatewayProcess, bucket: str, seaweed: SeaweedServer) -> None:
    """A miss answers with the pieces of its block's fill as they landed, each a descriptor of the
    same file: the mount maps the run once (no copy), and its bytes are the object's."""
    cold = os.urandom(20 * MiB)
    remote_client(seaweed).put_object(Bucket=bucket, Key="fill", Body=cold)
    etag = remote_client(seaweed).head_object(Bucket=bucket, Key="fill")["ETag"]
    url = gw.client().generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "fill"})
    reads = LocalReads(socket_path(gw.data_dir))
    start, end = 8 * MiB, 16 * MiB - 1  # one whole block, never read before
    status, _, mapped, body = reads.get_mapped(url, {"Range": f"bytes={start}-{end}", "If-Match": etag})
    assert status == 206 and mapped is not None and len(body) == 0
    assert mapped == cold[start:end + 1]
    status, _, mapped, body = reads.get_mapped(url, {"Range": f"bytes={start}-{end}", "If-Match": etag})
    assert status == 206 and mapped == cold[start:end + 1]  # now a hit: the block file itself
    reads.close()


def test_the_socket_is_only_the_gateway_users(gw: GatewayProcess) -> None:
    path = socket_path(gw.data_dir)
    assert stat.S_ISSOCK(path.stat().st_mode)
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_concurrent_readers_share_the_pool(gw: GatewayProcess, bucket: str) -> None:
    data = os.urandom(9 * MiB)
    s3 = gw.client()
    s3.put_object(Bucket=bucket, Key="shared", Body=data)
    etag = s3.head_object(Bucket=bucket, Key="shared")["ETag"].strip('"')
    reader = objects(gw)
    errors: list[BaseException] = []

    def read(i: int) -> None:
        try:
            for _ in range(5):
                start = (i * 997_001) % (len(data) - MiB)
                assert reader.read(bucket, "shared", start, MiB, etag) == data[start:start + MiB]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert reader._local_off_until == 0.0


def test_two_workers_serve_one_socket(seaweed: SeaweedServer, tmp_path: Path) -> None:
    with GatewayProcess(seaweed, tmp_path / "two", workers=2) as g:
        name = f"lr-{uuid.uuid4().hex[:12]}"
        s3 = g.client()
        s3.create_bucket(Bucket=name)
        s3.put_object(Bucket=name, Key="k", Body=b"0123456789")
        etag = s3.head_object(Bucket=name, Key="k")["ETag"].strip('"')
        assert objects(g).read(name, "k", 2, 5, etag) == b"23456"


def test_without_the_socket_the_reader_says_so(tmp_path: Path) -> None:
    with pytest.raises(LocalUnavailable):
        LocalReads(tmp_path / "none.sock").get_mapped("http://127.0.0.1:1/b/k", {})


def test_garbage_on_the_socket_closes_that_connection_only(gw: GatewayProcess, bucket: str) -> None:
    import socket

    for junk in (b"\x00\x00\x00\x05nope!", b"\x00\x00\x00\x02[]", b'\x00\x00\x00\x0d{"headers":1}', b"\xff" * 8):
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(10)
            sock.connect(str(socket_path(gw.data_dir)))
            sock.sendall(junk)
            sock.shutdown(socket.SHUT_WR)
            assert sock.recv(100) == b""  # closed, no answer
    gw.client().put_object(Bucket=bucket, Key="after", Body=b"still served")
    etag = gw.client().head_object(Bucket=bucket, Key="after")["ETag"].strip('"')
    reader = objects(gw)
    assert reader.read(bucket, "after", 0, 12, etag) == b"still served"
    assert reader._local_off_until == 0.0


def test_a_data_directory_with_a_long_path_still_serves_the_socket(seaweed: SeaweedServer, tmp_path: Path) -> None:
    """A socket address holds 107 bytes; a deeper data directory is bound and reached through a
    descriptor of its directory."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    with GatewayProcess(seaweed, deep) as g:
        assert len(str(socket_path(g.data_dir))) > 108
        name = f"lr-{uuid.uuid4().hex[:12]}"
        g.client().create_bucket(Bucket=name)
        g.client().put_object(Bucket=name, Key="k", Body=b"deep bytes")
        etag = g.client().head_object(Bucket=name, Key="k")["ETag"].strip('"')
        reader = objects(g)
        assert reader.read(name, "k", 0, 10, etag) == b"deep bytes"
        assert reader._local_off_until == 0.0
