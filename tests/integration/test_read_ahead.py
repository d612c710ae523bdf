"""Reads the cache passes through keep a read-ahead (issue 28; app/services/reads/read_ahead.py),
against a real gateway and SeaweedFS behind the counting proxy.

An object larger than the whole cache budget is never kept (frequency admission refuses it), so
every ranged GET of it is read through. Read front to back in 512 KiB ranges, it used to cost one
remote GET per range; now the first range goes as asked and the next ones fetch growing windows
(at most a cache block), served from memory: far fewer remote GETs, the object's bytes fetched
about once. Random ranges fetch exactly what they ask for. A write of the key through the
gateway is never answered from a window fetched before it.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_zerocopy import metric
from tests.support.counting_proxy import CountingProxy
from tests.support.gateway import GatewayProcess

KiB, MiB = 1024, 1024 * 1024
SIZE, STEP = 12 * MiB, 512 * KiB

pytestmark = pytest.mark.usefixtures("healthy_proxy")


def env() -> dict[str, str]:
    # A 4 MiB budget: a 12 MiB object never fits, so frequency admission refuses every read of it.
    return {"FERRY_CACHE_BYTES": str(4 * MiB), "FERRY_CACHE_BLOCK_BYTES": str(2 * MiB),
            "FERRY_CACHE_REVALIDATE_INTERVAL": "60"}


def ranged(client: Any, bucket: str, key: str, first: int, last: int) -> bytes:
    return bytes(client.get_object(Bucket=bucket, Key=key, Range=f"bytes={first}-{last}")["Body"].read())


def test_a_refused_object_read_in_order_is_fetched_in_windows(proxy: CountingProxy, module_seaweed_bucket: str,
                                                              seaweed: Any, tmp_path: Path) -> None:
    bucket, key = module_seaweed_bucket, "ahead/shard"
    body = os.urandom(SIZE)
    seaweed.client().put_object(Bucket=bucket, Key=key, Body=body)
    with GatewayProcess(proxy, tmp_path / "gw", env=env()) as gw:
        client = gw.client()
        proxy.reset()
        got = b"".join(ranged(client, bucket, key, first, first + STEP - 1) for first in range(0, SIZE, STEP))
        assert got == body
        gets = proxy.gets(key)
        fetched = sum(s.sent_bytes for s in gets)
        # 24 ranges: one GET each before. Now the discovery's GET of block 0 (its bytes serve the
        # first range; the object is then refused), the second range as asked, then windows of
        # 1, 2, 2, ... MiB: every byte fetched once but for the rest of block 0.
        assert len(gets) <= 10, [s.range for s in gets]
        assert fetched <= SIZE + 2 * MiB, fetched
        assert metric(gw, "ferry_read_ahead_bytes_total", 'outcome="served"') == SIZE - 2 * STEP

        # Random ranges: never more than asked.
        rnd = random.Random(7)
        proxy.reset()
        for _ in range(12):
            first = rnd.randrange(0, SIZE - 64 * KiB) // 4096 * 4096
            assert ranged(client, bucket, key, first, first + 64 * KiB - 1) == body[first:first + 64 * KiB]
        fetched = sum(s.sent_bytes for s in proxy.gets(key))
        assert fetched <= 12 * 64 * KiB + 12 * 8 * KiB, fetched  # (plus a little: headers are not counted)
        client.close()


def test_a_write_is_never_answered_from_an_older_window(proxy: CountingProxy, module_seaweed_bucket: str,
                                                        seaweed: Any, tmp_path: Path) -> None:
    bucket, key = module_seaweed_bucket, "ahead/rewritten"
    old, new = os.urandom(SIZE), os.urandom(SIZE)
    seaweed.client().put_object(Bucket=bucket, Key=key, Body=old)
    with GatewayProcess(proxy, tmp_path / "gw", env=env()) as gw:
        client = gw.client()
        assert ranged(client, bucket, key, 0, STEP - 1) == old[:STEP]  # the discovery (then refused)
        assert ranged(client, bucket, key, STEP, 2 * STEP - 1) == old[STEP:2 * STEP]  # as asked
        assert ranged(client, bucket, key, 2 * STEP, 3 * STEP - 1) == old[2 * STEP:3 * STEP]  # a 1 MiB window
        proxy.reset()
        assert ranged(client, bucket, key, 3 * STEP, 4 * STEP - 1) == old[3 * STEP:4 * STEP]
        assert proxy.gets(key) == []  # served from the window
        client.put_object(Bucket=bucket, Key=key, Body=new)
        assert ranged(client, bucket, key, 3 * STEP, 4 * STEP - 1) == new[3 * STEP:4 * STEP]  # the journal's
        gw.flush()  # durable on the remote: the journal no longer answers, the catalog's tombstone does
        assert ranged(client, bucket, key, 3 * STEP, 4 * STEP - 1) == new[3 * STEP:4 * STEP]
        assert ranged(client, bucket, key, 4 * STEP, 5 * STEP - 1) == new[4 * STEP:5 * STEP]
        client.close()
