"""The receive path's batch write (one writev, pieces never joined) and the handed-over payload hash."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import pytest

from app.adapters.local.blobstore import BlobStore
from app.domain.errors import S3Error
from app.s3.request import PayloadHash, S3Request


def test_write_many_writes_every_piece_in_order(tmp_path: Path) -> None:
    """More pieces than one writev takes, empty ones and views among them: the file is their join."""
    blobs = BlobStore(tmp_path, fsync=False)
    staging = blobs.open_staging()
    source = bytes(range(256)) * 16
    pieces: list[bytes | memoryview] = []
    for i in range(1500):
        piece = source[i % 97 : i % 97 + (i % 13) * 7]
        pieces.append(memoryview(piece) if i % 2 else piece)
    staging.write_many(pieces, sync_every=4096)
    staging.write(b"tail")
    staging.close()
    expected = b"".join(pieces) + b"tail"
    assert staging.size == len(expected)
    assert staging.path.read_bytes() == expected


def test_payload_hash_verifies_what_it_was_fed() -> None:
    body = b"x" * 100_000
    good = PayloadHash(hashlib.sha256(body).hexdigest())
    good.update(body[:5])
    good.update(memoryview(body)[5:])
    good.verify()
    bad = PayloadHash(hashlib.sha256(body).hexdigest())
    bad.update(body[:-1])
    with pytest.raises(S3Error) as info:
        bad.verify()
    assert info.value.code == "XAmzContentSHA256Mismatch"


def _request(body: bytes, sha: str) -> S3Request:
    messages = [{"type": "http.request", "body": body[:3], "more_body": True},
                {"type": "http.request", "body": body[3:], "more_body": False}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    headers = {"content-length": str(len(body)), "x-amz-content-sha256": sha}
    return S3Request("PUT", "b", "k", {}, headers, b"/b/k", receive)


async def _drain(request: S3Request) -> bytes:
    return b"".join([bytes(piece) async for piece in request.body()])


def test_payload_hash_handed_over_or_checked_by_the_body() -> None:
    """Handed over, the body no longer checks it (the consumer does); otherwise it still does."""
    wrong = hashlib.sha256(b"other").hexdigest()
    request = _request(b"hello world", wrong)
    check = request.body().take_payload_hash()
    assert check is not None
    assert asyncio.run(_drain(request)) == b"hello world"
    check.update(b"hello world")
    with pytest.raises(S3Error) as info:
        check.verify()
    assert info.value.code == "XAmzContentSHA256Mismatch"
    with pytest.raises(S3Error) as info:
        asyncio.run(_drain(_request(b"hello world", wrong)))
    assert info.value.code == "XAmzContentSHA256Mismatch"
    assert _request(b"x", "UNSIGNED-PAYLOAD").body().take_payload_hash() is None
