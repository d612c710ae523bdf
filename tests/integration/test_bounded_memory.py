"""Streaming both ways with bounded memory: a large PUT/GET never sits in the gateway's RAM."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from tests.support.gateway import GatewayProcess

# The quick profile streams 512 MiB; FERRY_TEST_BIG_BYTES=5368709120 runs the full 5 GiB case.
SIZE = int(os.environ.get("FERRY_TEST_BIG_BYTES", 512 * 1024 * 1024))
ALLOWED_GROWTH = 96 * 1024 * 1024


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


class _RandomFile:
    """A seekable file-like body of SIZE pseudo-random bytes generated on the fly."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.pos = 0
        self.block = os.urandom(1024 * 1024)

    def read(self, n: int = -1) -> bytes:
        if n < 0:
            n = self.size - self.pos
        n = min(n, self.size - self.pos)
        out = bytearray()
        while len(out) < n:
            off = (self.pos + len(out)) % len(self.block)
            out += self.block[off: off + n - len(out)]
        self.pos += n
        return bytes(out)

    def seek(self, pos: int, whence: int = 0) -> int:
        self.pos = pos if whence == 0 else (self.pos + pos if whence == 1 else self.size + pos)
        return self.pos

    def tell(self) -> int:
        return self.pos


def test_large_put_and_get_stream(seaweed: Any, tmp_path: Path) -> None:
    with GatewayProcess(seaweed, tmp_path / "gw") as gw:
        s3 = gw.client(read_timeout=300)
        s3.create_bucket(Bucket="bigmem")
        s3.put_object(Bucket="bigmem", Key="warmup", Body=b"x")
        s3.get_object(Bucket="bigmem", Key="warmup")["Body"].read()
        baseline = _peak_rss(gw.proc.pid)  # type: ignore[union-attr]

        body = _RandomFile(SIZE)
        expected = hashlib.sha256()
        while chunk := body.read(8 * 1024 * 1024):
            expected.update(chunk)
        body.seek(0)
        s3.put_object(Bucket="bigmem", Key="big", Body=body, ContentLength=SIZE)

        got = hashlib.sha256()
        stream = s3.get_object(Bucket="bigmem", Key="big")["Body"]
        for chunk in stream.iter_chunks(1024 * 1024):
            got.update(chunk)
        assert got.hexdigest() == expected.hexdigest()

        growth = _peak_rss(gw.proc.pid) - baseline  # type: ignore[union-attr]
        assert growth < ALLOWED_GROWTH, f"gateway peak RSS grew by {growth / 2**20:.0f} MiB"
        s3.delete_object(Bucket="bigmem", Key="big")
