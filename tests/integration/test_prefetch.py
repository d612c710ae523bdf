"""Prefetch (issue 28) against a real gateway and SeaweedFS, counting the gateway's remote
requests: shards read in key order are fetched ahead within the byte budget and no further once
the reader stops; random reads fetch nothing ahead; ``prefetch: prefix`` stages a prefix on its
first miss, never more than the cache budget keeps."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support.counting_proxy import CountingProxy
from tests.support.gateway import GatewayProcess

MiB = 1024 * 1024


pytestmark = pytest.mark.usefixtures("healthy_proxy")


def env(**extra: str) -> dict[str, str]:
    out = {"FERRY_CACHE_BLOCK_BYTES": str(MiB), "FERRY_CACHE_REVALIDATE_INTERVAL": "0",
           "FERRY_POLICY_REFRESH_SECONDS": "0.2", "FERRY_CACHE_PREFETCH_BYTES": str(4 * MiB)}
    out.update(extra)
    return out


def upload(remote: Any, bucket: str, prefix: str, count: int, size: int = MiB) -> dict[str, bytes]:
    data = {f"{prefix}{i:04d}.tar": os.urandom(size) for i in range(count)}
    for key, body in data.items():
        remote.put_object(Bucket=bucket, Key=key, Body=body)
    return data


def settled(proxy: CountingProxy, seconds: float = 1.5) -> Counter[str]:
    """The remote GETs per key once the gateway has been quiet for ``seconds``."""
    last, since = -1, time.monotonic()
    while True:
        now = len(proxy.requests())
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= seconds:
            return Counter(s.key for s in proxy.gets())
        time.sleep(0.1)


def lists(proxy: CountingProxy) -> int:
    """The prefetcher's listings (a page after a key; the gateway's own byte-order probes of a
    listing, max-keys=1, are not counted)."""
    return len([s for s in proxy.requests("GET") if not s.key and "start-after" in s.query])


def test_shards_in_key_order_are_fetched_ahead_and_not_past_a_stopped_reader(
        proxy: CountingProxy, module_seaweed_bucket: str, seaweed: Any, tmp_path: Path) -> None:
    data = upload(seaweed.client(), module_seaweed_bucket, "seq/shard-", 20)
    keys = sorted(data)
    with GatewayProcess(proxy, tmp_path / "gw", env=env()) as gw:
        client = gw.client()
        for key in keys[:3]:
            assert client.get_object(Bucket=module_seaweed_bucket, Key=key)["Body"].read() == data[key]
        ahead = settled(proxy)
        assert [k for k in keys if ahead[k]] == keys[:7], "the three read and four (4 MiB) ahead"
        proxy.reset()
        for key in keys[3:10]:  # read while prefetched: hits, and the window moves on
            assert client.get_object(Bucket=module_seaweed_bucket, Key=key)["Body"].read() == data[key]
        later = settled(proxy)
        assert not any(later[k] for k in keys[:7]), "prefetched shards were fetched again"
        assert [k for k in keys if later[k]] == keys[7:14], "four ahead of the last read, and no more"
        assert all(n == 1 for n in later.values()), later
        proxy.reset()
        time.sleep(2)  # the reader stopped: so does the prefetch
        assert settled(proxy) == Counter()
        client.close()


def test_random_reads_fetch_nothing_ahead(proxy: CountingProxy, module_seaweed_bucket: str, seaweed: Any, tmp_path: Path) -> None:
    data = upload(seaweed.client(), module_seaweed_bucket, "rnd/shard-", 40)
    keys = sorted(data)
    picks = random.Random(28).sample(keys, 12)
    with GatewayProcess(proxy, tmp_path / "gw", env=env()) as gw:
        client = gw.client()
        for key in picks:
            assert client.get_object(Bucket=module_seaweed_bucket, Key=key)["Body"].read() == data[key]
        fetched = settled(proxy)
        client.close()
    assert set(fetched) == set(picks), "only what was read"
    assert lists(proxy) <= 1


def test_prefix_policy_stages_the_prefix_within_the_cache_budget(
        proxy: CountingProxy, module_seaweed_bucket: str, seaweed: Any, tmp_path: Path) -> None:
    data = upload(seaweed.client(), module_seaweed_bucket, "ds/img-", 16)
    budget = 8 * MiB
    policies = [{"bucket": module_seaweed_bucket, "prefix": "ds/", "prefetch": "prefix"}]
    with GatewayProcess(proxy, tmp_path / "gw",
                        env=env(FERRY_CACHE_BYTES=str(budget), FERRY_POLICIES=json.dumps(policies))) as gw:
        client = gw.client()
        first = sorted(data)[11]
        assert client.get_object(Bucket=module_seaweed_bucket, Key=first)["Body"].read() == data[first]
        fetched = settled(proxy)
        db = sqlite3.connect(gw.data_dir / "ferry.db")
        cached = dict(db.execute("SELECT key, cached_bytes FROM cache_entries WHERE state = 'ready'").fetchall())
        db.close()
        assert sum(cached.values()) <= budget, cached
        assert len(cached) >= 7, f"the prefix was staged up to the budget: {sorted(cached)}"
        assert sum(fetched.values()) <= len(cached) + 1, "nothing fetched that the cache did not keep"
        proxy.reset()
        for key in cached:
            assert client.get_object(Bucket=module_seaweed_bucket, Key=key)["Body"].read() == data[key]
        assert settled(proxy, 0.5) == Counter(), "staged objects are hits"
        client.close()
