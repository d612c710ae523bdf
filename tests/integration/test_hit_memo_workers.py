"""The warm hit's in-memory lookups across ``--workers 2``: each worker keeps its catalog answers
between commits (app/adapters/catalog/cache/hotpath.py); an overwrite or a delete through one worker
must be what the next GET through either worker sees. Every GET here opens a new connection, so
the kernel hands them to both workers."""

from __future__ import annotations

import http.client
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.gateway import GatewayProcess
from tests.support.seaweed import SeaweedServer


@pytest.fixture(scope="module")
def gateway2(seaweed: SeaweedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(seaweed, tmp_path_factory.mktemp("hitmemo"), workers=2) as gw:
        yield gw


def fresh_get(url: str) -> tuple[int, bytes]:
    """One GET on a connection of its own (either worker may accept it)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request("GET", f"{parts.path}?{parts.query}")
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_an_overwrite_and_a_delete_through_one_worker_are_seen_by_the_next_get(
        gateway2: GatewayProcess, tmp_path: Path) -> None:
    s3 = gateway2.client()
    bucket = f"hitmemo-{int(time.time() * 1000)}"
    s3.create_bucket(Bucket=bucket)
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"}, ExpiresIn=600)
    for version in range(1, 4):
        body = bytes([48 + version]) * 4096
        s3.put_object(Bucket=bucket, Key="k", Body=body)
        for _ in range(12):  # every answer after the PUT's ack is this version, buffered or destaged
            assert fresh_get(url) == (200, body)
        gateway2.flush(bucket)  # durable: the cache fills from the remote, and is hit from then on
        for _ in range(12):
            assert fresh_get(url) == (200, body)
    s3.delete_object(Bucket=bucket, Key="k")
    for _ in range(12):
        assert fresh_get(url)[0] == 404
    gateway2.flush(bucket)
    for _ in range(6):
        assert fresh_get(url)[0] == 404
