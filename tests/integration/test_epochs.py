"""Training epochs over a dataset twice the cache (issue 28), against a real gateway and SeaweedFS,
counting the gateway's remote GETs with the counting proxy.

Every epoch reads every object once: in a fresh shuffled order (samples), or in key order with
ranged reads (shards of several blocks). The cache holds r = 0.5 of the dataset. Frequency
admission (the default) must hit at least 0.9 x r of each epoch from epoch 2 on; LRU
(``admission: always``), measured in the same run, hits about r²/2 shuffled and nothing in key
order. Pinned objects, quotas and dirty data keep their guarantees under the gate.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.counting_proxy import CountingProxy
from tests.support.gateway import GatewayProcess, admin_call

KiB, MiB = 1024, 1024 * 1024
BUDGET = 16 * MiB
R = 0.5  # the part of the dataset the cache holds
EPOCHS = 4


pytestmark = pytest.mark.usefixtures("healthy_proxy")


def env(admission: str, **extra: str) -> dict[str, str]:
    out = {"FERRY_CACHE_BYTES": str(BUDGET), "FERRY_CACHE_ADMISSION": admission,
           "FERRY_CACHE_BLOCK_BYTES": str(MiB), "FERRY_CACHE_REVALIDATE_INTERVAL": "0",
           "FERRY_POLICY_REFRESH_SECONDS": "0.2"}
    out.update(extra)
    return out


def upload(remote: Any, bucket: str, prefix: str, count: int, size: int) -> dict[str, bytes]:
    data = {f"{prefix}{i:04d}": os.urandom(size) for i in range(count)}
    for key, body in data.items():
        remote.put_object(Bucket=bucket, Key=key, Body=body)
    return data


def epoch_hits(proxy: CountingProxy, gw: GatewayProcess, bucket: str, data: dict[str, bytes],
               read_one: Callable[[Any, str], bytes], order: Callable[[list[str], int], list[str]],
               epochs: int = EPOCHS) -> list[float]:
    """Per epoch: the share of objects read without any remote GET."""
    client = gw.client()
    ratios = []
    try:
        for epoch in range(epochs):
            proxy.reset()
            for key in order(sorted(data), epoch):
                assert read_one(client, key) == data[key], key
            fetched = {s.key for s in proxy.gets() if s.key}
            ratios.append(1 - len(fetched & set(data)) / len(data))
    finally:
        client.close()
    return ratios


def shuffled(keys: list[str], epoch: int) -> list[str]:
    random.Random(epoch).shuffle(keys)
    return keys


def key_order(keys: list[str], epoch: int) -> list[str]:
    return keys


def whole(client: Any, key: str, bucket: str) -> bytes:
    return bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read())


def by_ranges(client: Any, key: str, bucket: str, size: int, step: int) -> bytes:
    """A shard read front to back in ranged GETs, as a sequential loader does."""
    parts = [client.get_object(Bucket=bucket, Key=key, Range=f"bytes={first}-{min(first + step, size) - 1}")["Body"]
             .read() for first in range(0, size, step)]
    return b"".join(parts)


SHAPES = {
    # 128 samples of 256 KiB (one block each), read whole, shuffled every epoch.
    "shuffled-samples": (128, 256 * KiB, shuffled, lambda b: lambda c, k: whole(c, k, b)),
    # 16 shards of 2 MiB (two blocks each), read in key order in 512 KiB ranges.
    "key-order-shards": (16, 2 * MiB, key_order, lambda b: lambda c, k: by_ranges(c, k, b, 2 * MiB, 512 * KiB)),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_epochs_over_twice_the_cache_hit_r_with_frequency_admission_and_not_with_lru(
        proxy: CountingProxy, module_seaweed_bucket: str, seaweed: Any, tmp_path: Path, shape: str) -> None:
    count, size, order, reader = SHAPES[shape]
    assert count * size == 2 * BUDGET
    data = upload(seaweed.client(), module_seaweed_bucket, f"{shape}/", count, size)
    figures = {}
    for admission in ("frequency", "always"):
        with GatewayProcess(proxy, tmp_path / admission, env=env(admission)) as gw:
            figures[admission] = epoch_hits(proxy, gw, module_seaweed_bucket, data, reader(module_seaweed_bucket), order)
            db = sqlite3.connect(gw.data_dir / "ferry.db")
            cached = db.execute("SELECT COALESCE(SUM(cached_bytes), 0) FROM cache_entries "
                                "WHERE state = 'ready'").fetchone()[0]
            db.close()
            if admission == "frequency":  # the gate evicts before it fills; LRU overshoots until its janitor
                assert cached <= BUDGET, cached
    print(f"{shape}: hits per epoch, frequency {figures['frequency']}, LRU {figures['always']}")
    assert figures["frequency"][0] == 0.0  # a cold cache: every object fetched once
    assert all(h >= 0.9 * R for h in figures["frequency"][1:]), figures
    # What the gate fixes: LRU keeps about r²/2 of a shuffled epoch and nothing in key order
    # (an evicted block stays in cache/retired for readers already serving it, never for a
    # later read: this figure once read 1.0 from there, its bytes uncounted).
    assert all(lru < 0.9 * R for lru in figures["always"][1:]), figures
    if order is key_order:
        assert figures["always"][1:] == [0.0] * (EPOCHS - 1), figures


def test_the_gate_keeps_pinned_objects_dirty_data_and_quotas(proxy: CountingProxy, module_seaweed_bucket: str, seaweed: Any,
                                                              tmp_path: Path) -> None:
    """A full cache of pinned objects refuses newcomers (victims are never pinned); a dirty write
    counts against the budget and is never a victim; a bucket quota still evicts; a pinned miss
    is cached even when that pushes the cache over (eviction then frees unpinned entries)."""
    remote = seaweed.client()
    policies = [{"bucket": "*", "prefix": "pin/", "pinned": True},
                {"bucket": module_seaweed_bucket, "prefix": "quota/", "quota_bytes": 4 * MiB}]
    pinned = upload(remote, module_seaweed_bucket, "pin/", 24, 512 * KiB)  # 12 MiB of the 16
    hot = upload(remote, module_seaweed_bucket, "hot/", 8, 512 * KiB)
    with GatewayProcess(proxy, tmp_path / "gate", env=env("frequency", FERRY_POLICIES=json.dumps(policies))) as gw:
        client = gw.client()
        for key, body in {**pinned, **hot}.items():
            assert whole(client, key, module_seaweed_bucket) == body
        client.put_object(Bucket=module_seaweed_bucket, Key="dirty/known", Body=b"x")
        proxy.fail_with = 503  # the remote is down: this write lives only here, dirty
        dirty = os.urandom(2 * MiB)
        client.put_object(Bucket=module_seaweed_bucket, Key="dirty/obj", Body=dirty)
        proxy.fail_with = None
        for _ in range(3):  # newcomers read once each, over and over a full cache
            for key, body in upload(remote, module_seaweed_bucket, f"new-{uuid.uuid4().hex[:6]}/", 8, 512 * KiB).items():
                assert whole(client, key, module_seaweed_bucket) == body
        proxy.reset()
        for key, body in pinned.items():
            assert whole(client, key, module_seaweed_bucket) == body
        assert not [s for s in proxy.gets() if s.key.startswith("pin/")], "a pinned object was evicted"
        assert whole(client, "dirty/obj", module_seaweed_bucket) == dirty
        quota = upload(remote, module_seaweed_bucket, "quota/", 8, MiB)
        for key, body in quota.items():
            assert whole(client, key, module_seaweed_bucket) == body
        deadline = time.monotonic() + 10  # the janitor enforces quotas every few seconds
        while True:
            db = sqlite3.connect(gw.data_dir / "ferry.db")
            rows = dict(db.execute("SELECT key, cached_bytes FROM cache_entries WHERE state = 'ready'").fetchall())
            db.close()
            in_quota = sum(v for k, v in rows.items() if k.startswith("quota/"))
            if in_quota <= 4 * MiB or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert in_quota <= 4 * MiB, rows
        assert all(rows.get(k) == 512 * KiB for k in pinned)
        assert gw.flush()["durable"]
        assert remote.get_object(Bucket=module_seaweed_bucket, Key="dirty/obj")["Body"].read() == dirty
        client.close()


def outcomes(gw: GatewayProcess, bucket: str) -> tuple[int, int]:
    """(hits, misses) the gateway counted for the bucket's GETs."""
    rows = [r for r in admin_call(gw, "GET", "/admin/stats")["cache"]["by_bucket"] if r["bucket"] == bucket]
    return sum(r["hit"] + r["stale"] for r in rows), sum(r["miss"] for r in rows)


def test_files_large_against_the_cache_keep_the_free_room_in_part(
        proxy: CountingProxy, module_seaweed_bucket: str, seaweed: Any, tmp_path: Path) -> None:
    """Eight files of a little over a quarter of the cache each (4 MiB + 256 KiB, as Parquet files
    run over their nominal size), read in key order in 512 KiB ranges. Whole, three fit and the
    fourth does not: 3 of 8 files hit where the cache holds r = 0.47 of the dataset. Admitted in
    part, the fourth keeps the blocks the free room holds, and >= 0.9 x r of the reads hit, as
    the gateway counts them (a read that needs a block from the remote is a miss) and as the
    remote's GETs show."""
    size, step, count = 4 * MiB + 256 * KiB, 512 * KiB, 8
    data = upload(seaweed.client(), module_seaweed_bucket, "in-part/", count, size)
    r = BUDGET / (count * size)
    reads = count * -(-size // step)
    with GatewayProcess(proxy, tmp_path / "gw", env=env("frequency")) as gw:
        client = gw.client()
        counted, fetched = [], []
        try:
            for _ in range(EPOCHS):
                proxy.reset()
                before = outcomes(gw, module_seaweed_bucket)
                for key in sorted(data):
                    assert by_ranges(client, key, module_seaweed_bucket, size, step) == data[key], key
                after = outcomes(gw, module_seaweed_bucket)
                assert (after[0] - before[0]) + (after[1] - before[1]) == reads
                counted.append((after[0] - before[0]) / reads)
                fetched.append(sum(s.sent_bytes for s in proxy.gets() if s.key in data) / (count * size))
        finally:
            client.close()
        db = sqlite3.connect(gw.data_dir / "ferry.db")
        rows = dict(db.execute("SELECT key, cached_bytes FROM cache_entries WHERE state = 'ready'").fetchall())
        db.close()
    print(f"in part: hits per epoch {counted}, remote bytes / dataset {fetched}, r {r:.3f}, cached {rows}")
    assert sum(rows.values()) <= BUDGET, rows
    # Usually three whole and one in part; under load an overshoot that eviction corrects may
    # leave two in part instead (admission.py): what must hold is that room is used in part.
    assert any(0 < v < size for v in rows.values()), rows
    assert all(h >= 0.9 * r for h in counted[1:]), counted
    # What is not cached is fetched about once: a read past the allowance goes through with its
    # own range, not as a block fetched and dropped for each range in it.
    assert all(f <= 1.05 * (1 - sum(rows.values()) / (count * size)) for f in fetched[1:]), fetched
