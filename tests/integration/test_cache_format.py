"""Damaged cached blocks against a real gateway and SeaweedFS: a block whose header is wrong is
refetched at the next read, one whose bytes were flipped is dropped by the scrub; the client
always gets the remote's bytes (remote GETs counted through tests/support/counting_proxy.py)."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.adapters.local.blockformat import DATA_OFFSET
from app.domain.cache import block_name
from tests.support.counting_proxy import CountingProxy
from tests.support.gateway import GatewayProcess

BLOCK = 1024 * 1024


@pytest.fixture(scope="module")
def fgw(proxy: CountingProxy, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    env = {"FERRY_CACHE_BLOCK_BYTES": str(BLOCK), "FERRY_CACHE_REVALIDATE_INTERVAL": "0"}
    with GatewayProcess(proxy, tmp_path_factory.mktemp("format-gw"), env=env) as gw:
        yield gw


@pytest.fixture(scope="module")
def fbucket(seaweed: Any) -> str:
    name = f"cf-{uuid.uuid4().hex[:12]}"
    seaweed.client().create_bucket(Bucket=name)
    return name


def cached_block(gw: GatewayProcess, proxy: CountingProxy, remote: Any, bucket: str, key: str,
                 data: bytes) -> Path:
    """Put ``data`` on the remote, read it once through the gateway; the path of block 0."""
    etag = str(remote.put_object(Bucket=bucket, Key=key, Body=data)["ETag"]).strip('"')
    assert read(gw, bucket, key) == data
    name = block_name(bucket, key, etag, 0, BLOCK)
    path = gw.data_dir / "cache" / "blocks" / name[:2] / name
    assert path.stat().st_size == DATA_OFFSET + len(data)
    proxy.reset()
    assert read(gw, bucket, key) == data and proxy.gets(key) == []  # a hit
    return path


def read(gw: GatewayProcess, bucket: str, key: str) -> bytes:
    client = gw.client()
    try:
        return bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    finally:
        client.close()


def flip(path: Path, offset: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0x01
    path.write_bytes(bytes(raw))


def test_a_block_with_a_wrong_header_version_is_refetched(fgw: GatewayProcess, proxy: CountingProxy,
                                                          fbucket: str, seaweed: Any) -> None:
    data = os.urandom(300_000)
    path = cached_block(fgw, proxy, seaweed.client(), fbucket, "hdr/a.bin", data)
    flip(path, 4)  # the format version
    proxy.reset()
    assert read(fgw, fbucket, "hdr/a.bin") == data
    assert len(proxy.gets("hdr/a.bin")) == 1, "a block with a wrong header is refetched, never served"
    proxy.reset()
    assert read(fgw, fbucket, "hdr/a.bin") == data and proxy.gets("hdr/a.bin") == []  # cached again


def test_the_scrub_drops_a_corrupt_block_and_the_next_read_refetches(fgw: GatewayProcess, proxy: CountingProxy,
                                                                     fbucket: str, seaweed: Any) -> None:
    data = os.urandom(200_000)
    path = cached_block(fgw, proxy, seaweed.client(), fbucket, "scrub/a.bin", data)
    flip(path, DATA_OFFSET + 12345)  # one bit of the bytes: the header still matches
    deadline = time.monotonic() + 60
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not path.exists(), "the scrub did not drop the corrupt block"
    proxy.reset()
    assert read(fgw, fbucket, "scrub/a.bin") == data
    assert len(proxy.gets("scrub/a.bin")) == 1
