"""atheris harness: the aws-chunked decoder (see fuzz/README.md)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _run import instrumented, run

with instrumented():
    from app.domain.errors import S3Error
    from app.s3.chunked import (
        STREAMING_SIGNED,
        STREAMING_SIGNED_TRAILER,
        STREAMING_UNSIGNED_TRAILER,
        AwsChunkedDecoder,
        ChunkSigningContext,
    )

CONTEXT = ChunkSigningContext(b"k" * 32, "20240101T000000Z", "20240101/us-east-1/s3/aws4_request", "0" * 64)
MODES = (STREAMING_UNSIGNED_TRAILER, STREAMING_SIGNED, STREAMING_SIGNED_TRAILER)


def test_one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    mode, split, body = MODES[data[0] % len(MODES)], data[1], data[2:]
    decoder = AwsChunkedDecoder(mode, CONTEXT, max_chunk_size=1 << 16, expected_length=None)
    out = 0
    try:
        for piece in (body[:split], body[split:]):
            out += sum(len(p) for p in decoder.feed(piece))
        decoder.close()
    except S3Error:
        return
    assert out <= len(body), (out, len(body))


if __name__ == "__main__":
    run(test_one_input)
