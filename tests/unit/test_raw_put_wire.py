"""UploadPart as a raw signed request (app/adapters/remote/put.py), against a scripted HTTP
listener on 127.0.0.1: what goes on the wire (UNSIGNED-PAYLOAD, Content-MD5 and checksums signed,
the body byte for byte), retries, error mapping, the circuit, the lease fence mid-body, and where
botocore's call is kept instead. tests/integration/test_remote_raw_put.py checks the same
requests against SeaweedFS (signature accepted, bytes stored, a corrupt body refused)."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from app.adapters.remote import RemoteConfig, RemoteStore
from app.domain import fencing
from app.domain.errors import S3Error
from app.domain.fencing import Lease, LeaseLost
from tests.support.listener import Listener


@dataclass
class Seen:
    request_line: str
    headers: dict[str, str]
    body: bytes
    complete: bool


@dataclass
class ScriptedRemote:
    """Answers each request with the next (status, body, close) of ``script`` (the last repeats);
    ``hang_up`` closes every connection as soon as its headers arrived."""

    script: list[tuple[int, bytes, bool]] = field(default_factory=lambda: [(200, b"", False)])
    hang_up: bool = False
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.listener = Listener(lambda conn: threading.Thread(target=self._serve, args=(conn,), daemon=True).start())
        self.port = self.listener.port

    @property
    def connections(self) -> int:
        return self.listener.connections

    def _serve(self, conn: socket.socket) -> None:
        reader = conn.makefile("rb")
        with conn, reader:
            while True:
                line = reader.readline()
                if not line:
                    return
                headers: dict[str, str] = {}
                while (h := reader.readline()) not in (b"\r\n", b""):
                    name, _, value = h.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                if self.hang_up:
                    return
                size = int(headers.get("content-length", "0"))
                body = reader.read(size)
                self.seen.append(Seen(line.decode().strip(), headers, body, len(body) == size))
                if len(body) < size:
                    return
                status, payload, close = self.script[min(len(self.seen) - 1, len(self.script) - 1)]
                extra = b"Connection: close\r\n" if close else b""
                etag = hashlib.md5(body).hexdigest().encode()
                conn.sendall(b"HTTP/1.1 %d X\r\nETag: \"%s\"\r\nContent-Length: %d\r\n%s\r\n%s"
                             % (status, etag, len(payload), extra, payload))
                if close:
                    return

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def remote() -> Iterator[ScriptedRemote]:
    server = ScriptedRemote()
    yield server
    server.close()


def store_for(port: int, **kwargs: Any) -> RemoteStore:
    cfg = RemoteConfig(f"http://127.0.0.1:{port}", "us-east-1", "AK", "SK", connect_timeout=1,
                       read_timeout=2, circuit_cooldown=60, **kwargs)
    return RemoteStore(cfg)


def part_file(tmp_path: Path, size: int) -> tuple[Path, bytes, str]:
    data = os.urandom(size)
    path = tmp_path / "part"
    path.write_bytes(data)
    return path, data, base64.b64encode(hashlib.md5(data).digest()).decode()


def error(code: str) -> bytes:
    return f"<Error><Code>{code}</Code><Message>m</Message></Error>".encode()


def test_a_part_goes_raw_unsigned_payload_with_its_digests_signed(tmp_path: Path, remote: ScriptedRemote) -> None:
    store = store_for(remote.port)
    path, data, md5 = part_file(tmp_path, 9 * 1024 * 1024 + 7)  # three sendfile slices
    with open(path, "rb") as fh:
        etag = store.upload_part("b", "dir/ü k+1", "id/=+x", 3, fh, len(data), md5, {"CRC32": "AAAAAA=="})
    assert etag == hashlib.md5(data).hexdigest()
    (seen,) = remote.seen
    assert seen.request_line == "PUT /b/dir/%C3%BC%20k%2B1?partNumber=3&uploadId=id%2F%3D%2Bx HTTP/1.1"
    assert seen.body == data and seen.complete
    assert seen.headers["x-amz-content-sha256"] == "UNSIGNED-PAYLOAD"
    assert seen.headers["content-md5"] == md5 and seen.headers["x-amz-checksum-crc32"] == "AAAAAA=="
    assert seen.headers["host"] == f"127.0.0.1:{remote.port}"
    signed = seen.headers["authorization"].split("SignedHeaders=")[1].split(",")[0].split(";")
    assert {"content-md5", "host", "x-amz-checksum-crc32", "x-amz-content-sha256", "x-amz-date"} <= set(signed)


def test_keep_alive_connections_are_reused(tmp_path: Path, remote: ScriptedRemote) -> None:
    store = store_for(remote.port)
    path, data, md5 = part_file(tmp_path, 1000)
    for number in (1, 2, 3):
        with open(path, "rb") as fh:
            store.upload_part("b", "k", "u", number, fh, len(data), md5, {})
    assert len(remote.seen) == 3 and remote.connections == 1


def test_a_connection_the_remote_closed_is_not_reused(tmp_path: Path, remote: ScriptedRemote) -> None:
    remote.script = [(200, b"", True)]  # every answer closes its connection
    store = store_for(remote.port, max_attempts=1)
    path, data, md5 = part_file(tmp_path, 1000)
    for number in (1, 2):
        with open(path, "rb") as fh:
            store.upload_part("b", "k", "u", number, fh, len(data), md5, {})
    assert remote.connections == 2


def test_a_5xx_is_retried_with_the_whole_body(tmp_path: Path, remote: ScriptedRemote) -> None:
    remote.script = [(503, error("SlowDown"), False), (200, b"", False)]
    store = store_for(remote.port, max_attempts=2)
    path, data, md5 = part_file(tmp_path, 300_000)
    with open(path, "rb") as fh:
        assert store.upload_part("b", "k", "u", 1, fh, len(data), md5, {}) == hashlib.md5(data).hexdigest()
    assert [s.body == data for s in remote.seen] == [True, True]


@pytest.mark.parametrize(("status", "code", "expected", "attempts"), [
    (404, "NoSuchUpload", "NoSuchUpload", 1),
    (400, "BadDigest", "BadDigest", 1),
    (400, "RequestTimeout", "RequestTimeout", 2),  # transient: retried like botocore's standard mode
    (500, "InternalError", "ServiceUnavailable", 2),
])
def test_answers_are_the_errors_botocore_calls_raise(tmp_path: Path, remote: ScriptedRemote, status: int,
                                                    code: str, expected: str, attempts: int) -> None:
    remote.script = [(status, error(code), False)]
    store = store_for(remote.port, max_attempts=2)
    path, data, md5 = part_file(tmp_path, 1000)
    with open(path, "rb") as fh, pytest.raises(S3Error) as caught:
        store.upload_part("b", "k", "u", 1, fh, len(data), md5, {})
    assert caught.value.code == expected and len(remote.seen) == attempts
    assert store.circuit.state == "closed"  # an answer proves the remote alive


def test_no_answer_is_a_503_and_opens_the_circuit(tmp_path: Path, remote: ScriptedRemote) -> None:
    remote.hang_up = True
    store = store_for(remote.port, max_attempts=2)
    path, data, md5 = part_file(tmp_path, 1000)
    with open(path, "rb") as fh, pytest.raises(S3Error) as caught:
        store.upload_part("b", "k", "u", 1, fh, len(data), md5, {})
    assert caught.value.code == "ServiceUnavailable" and remote.connections == 2
    assert store.circuit.state == "open"
    with open(path, "rb") as fh, pytest.raises(S3Error, match="circuit open"):
        store.upload_part("b", "k", "u", 1, fh, len(data), md5, {})
    assert remote.connections == 2


def test_a_lease_over_mid_body_stops_the_body_and_starts_no_retry(tmp_path: Path, remote: ScriptedRemote) -> None:
    store = store_for(remote.port, max_attempts=3)
    path, data, md5 = part_file(tmp_path, 16 * 1024 * 1024)
    ticks = iter([0.0, 0.0] + [100.0] * 100)  # the lease's start, its first check; then over
    lease = Lease(lambda: True, 10.0, clock=lambda: next(ticks))
    with open(path, "rb") as fh, lease.guard(), pytest.raises(LeaseLost):
        store.upload_part("b", "k", "u", 1, lease.bound(fh), len(data), md5, {})
    threading.Event().wait(0.3)  # the listener notices the dropped connection
    assert len(remote.seen) == 1 and not remote.seen[0].complete and len(remote.seen[0].body) < len(data)
    assert store.circuit.state == "closed"


def test_a_request_does_not_start_after_the_lease(tmp_path: Path, remote: ScriptedRemote) -> None:
    store = store_for(remote.port)
    path, data, md5 = part_file(tmp_path, 1000)
    lease = Lease(lambda: True, 0.0)
    with open(path, "rb") as fh, lease.guard(), pytest.raises(LeaseLost):
        store.upload_part("b", "k", "u", 1, fh, len(data), md5, {})
    assert remote.connections == 0


def test_a_body_that_is_no_file_is_sent_by_reads(remote: ScriptedRemote) -> None:
    store = store_for(remote.port)
    data = os.urandom(2 * 1024 * 1024 + 3)
    md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
    lease = Lease(lambda: True, 60.0)
    body = io.BytesIO(b"xx" + data)
    body.seek(2)
    store.upload_part("b", "k", "u", 1, lease.bound(body), len(data), md5, {})
    assert remote.seen[0].body == data


def test_a_staged_file_shorter_than_its_size_is_never_completed(tmp_path: Path, remote: ScriptedRemote) -> None:
    store = store_for(remote.port)
    path, data, md5 = part_file(tmp_path, 1000)
    with open(path, "rb") as fh, pytest.raises(S3Error) as caught:
        store.upload_part("b", "k", "u", 1, fh, len(data) + 10, md5, {})
    assert caught.value.code == "InternalError" and store.circuit.state == "closed"
    threading.Event().wait(0.2)
    assert all(not s.complete for s in remote.seen)


def test_where_the_raw_request_does_not_apply_botocore_sends_it(monkeypatch: pytest.MonkeyPatch) -> None:
    assert store_for(9).putter.part_url("b", "k", "u", 1) == "http://127.0.0.1:9/b/k?partNumber=1&uploadId=u"
    assert store_for(9, raw_writes=False).putter.part_url("b", "k", "u", 1) is None
    https = RemoteStore(RemoteConfig("https://127.0.0.1:9", "us-east-1", "AK", "SK"))
    assert https.putter.part_url("b", "k", "u", 1) is None
    auto = store_for(9, addressing_style="auto")  # no mapping without guessing
    assert auto.putter.part_url("b", "k", "u", 1) is None
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    proxied = RemoteStore(RemoteConfig("http://10.9.8.7:9", "us-east-1", "AK", "SK"))
    assert proxied.putter.part_url("b", "k", "u", 1) is None


def test_unwrap_sees_through_nested_lease_bounds() -> None:
    outer, inner = Lease(lambda: True, 60.0), Lease(lambda: True, 60.0)
    raw = io.BytesIO(b"abc")
    found, check = fencing.unwrap(outer.bound(inner.bound(raw)))
    assert found is raw
    check()
    inner._until = 0.0  # the inner lease is over
    with pytest.raises(LeaseLost):
        check()


def test_put_object_goes_raw_with_its_headers_signed(tmp_path: Path, remote: ScriptedRemote) -> None:
    store = store_for(remote.port)
    path, data, md5 = part_file(tmp_path, 70_000)
    headers = {"content-type": "text/plain", "expires": "Thu, 01 Dec 2094 16:00:00 GMT", "x-not-content": "no"}
    with open(path, "rb") as fh:
        etag = store.put_object("b", "k", fh, len(data), md5, headers, {"note": "caf\xe9"}, {"SHA256": "c2hh"},
                                if_match="0123")
    assert etag == hashlib.md5(data).hexdigest()
    (seen,) = remote.seen
    assert seen.request_line == "PUT /b/k HTTP/1.1" and seen.body == data
    assert seen.headers["x-amz-meta-note"] == "caf\xe9"  # the single byte 0xe9, as the client sent it
    assert seen.headers["if-match"] == '"0123"' and seen.headers["expires"] == headers["expires"]
    assert "x-not-content" not in seen.headers and seen.headers["x-amz-checksum-sha256"] == "c2hh"
    signed = seen.headers["authorization"].split("SignedHeaders=")[1].split(",")[0].split(";")
    assert {"content-md5", "content-type", "expires", "if-match", "x-amz-meta-note"} <= set(signed)


def test_values_that_are_not_single_bytes_go_through_botocore(remote: ScriptedRemote) -> None:
    store = store_for(remote.port, max_attempts=1)
    md5 = base64.b64encode(hashlib.md5(b"x").digest()).decode()
    store.put_object("b", "k", io.BytesIO(b"x"), 1, md5, {}, {"note": "\u65e5"}, {})  # above 255: UTF-8
    (seen,) = remote.seen
    assert "Botocore/" in seen.headers.get("user-agent", "")  # botocore's request, not the raw one
    assert seen.headers["x-amz-meta-note"].encode("latin-1") == "\u65e5".encode()
