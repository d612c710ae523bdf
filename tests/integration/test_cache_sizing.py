"""Sizing (issue 28) against real gateways: one generated trace (Zipf 0.9 over 250 objects of
2-64 KiB, 1500 GETs) replayed against three gateways whose cache budgets are B/2, B and 2B. The
miss-ratio curve any of them builds predicts, at each of the three budgets, the hit ratio the
gateway with that budget measures (its own ferry_cache_requests_total) within 5 points; the
per-bucket gauges and the answer's own measured figures agree with those counters.

The gateways check their budget every 64 KiB filled (FERRY_CACHE_BLOCK_BYTES, the smallest block:
an eviction check runs after max(block, budget/100) bytes), so the real cache follows the budget
closely; the objects are put on the remote directly, so no dirty bytes share it.
"""

from __future__ import annotations

import random
import re
import threading
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.support.gateway import ADMIN_TOKEN, GatewayProcess
from tests.support.seaweed import SeaweedServer

KiB = 1024
OBJECTS, GETS = 250, 1500
FACTORS = (0.5, 1.0, 2.0)  # the three gateways' budgets, as multiples of B


def trace(seed: int = 28) -> tuple[list[int], list[int]]:
    """(object sizes, the object index of each GET): popularity unrelated to size."""
    rng = random.Random(seed)
    sizes = [rng.randint(2, 64) * KiB - rng.randrange(KiB) for _ in range(OBJECTS)]
    order = list(range(OBJECTS))
    rng.shuffle(order)
    picks = rng.choices(order, weights=[1 / (i + 1) ** 0.9 for i in range(OBJECTS)], k=GETS)
    return sizes, picks


def admin(gw: GatewayProcess, path: str, token: str = ADMIN_TOKEN) -> Any:
    r = httpx.get(f"{gw.endpoint}{path}", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json() if path != "/metrics" else r.text


def measured(gw: GatewayProcess, bucket: str) -> tuple[float, int]:
    """(hit ratio, reads) of the bucket from the gateway's own cache counters."""
    rows = [r for r in admin(gw, "/admin/stats")["cache"]["by_bucket"] if r["bucket"] == bucket]
    hits = sum(r["hit"] + r["stale"] for r in rows)
    reads = hits + sum(r["miss"] for r in rows)
    return hits / reads, int(reads)


def gauge(text: str, name: str, bucket: str) -> float:
    found = re.findall(rf'^{name}\{{[^}}]*bucket="{re.escape(bucket)}"[^}}]*\}} (\S+)$', text, re.M)
    assert len(found) == 1, (name, found)
    return float(found[0])


def each(fn: Callable[[GatewayProcess], object], gateways: list[GatewayProcess]) -> None:
    """``fn`` on every gateway at once, in threads; the first failure is raised here."""
    errors: list[BaseException] = []

    def run(g: GatewayProcess) -> None:
        try:
            fn(g)
        except BaseException as exc:  # pragma: no cover - raised below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(g,)) for g in gateways]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def replay(gw: GatewayProcess, bucket: str, picks: list[int]) -> None:
    s3 = gw.client()
    for k in picks:
        s3.get_object(Bucket=bucket, Key=f"o/{k:04d}")["Body"].read()


def test_the_curve_predicts_three_real_budgets_within_5_points(seaweed: SeaweedServer) -> None:
    sizes, picks = trace()
    bucket = seaweed.create_bucket(f"sz-{uuid.uuid4().hex[:12]}")
    remote = seaweed.client()
    for i, size in enumerate(sizes):
        remote.put_object(Bucket=bucket, Key=f"o/{i:04d}", Body=random.Random(i).randbytes(size))
    budget = sum(sizes) // 4 // 4 * 4  # B: a quarter of the objects' bytes (hit ratio about 0.59)
    env = {"FERRY_CACHE_BLOCK_BYTES": str(64 * KiB), "FERRY_CACHE_REVALIDATE": "immutable",
           "FERRY_CACHE_REVALIDATE_INTERVAL": "0", "FERRY_CACHE_ADMISSION": "always"}
    gateways = [GatewayProcess(seaweed, env={**env, "FERRY_CACHE_BYTES": str(int(budget * f))}) for f in FACTORS]
    try:
        each(lambda g: g.start(), gateways)  # side by side: the three replays too
        each(lambda g: replay(g, bucket, picks), gateways)
        answers = [admin(g, "/admin/cache/sizing") for g in gateways]
        truth = [measured(g, bucket) for g in gateways]
        middle = answers[1]
        predicted = {p["cache_bytes"]: p["hit_ratio"] for p in middle["points"]}
        report = []
        for f, g, doc, (actual, reads) in zip(FACTORS, gateways, answers, truth, strict=True):
            at = int(budget * f)
            assert reads == GETS and doc["budget_bytes"] == at and doc["reads"] == GETS
            assert doc["measured_hit_ratio"] == pytest.approx(actual, abs=1e-4)  # the same reads
            report.append((at, predicted[at], doc["predicted_hit_ratio"], actual))
            # Every gateway's curve is the same stream's, and each predicts its own budget.
            assert doc["predicted_hit_ratio"] == pytest.approx(predicted[at], abs=0.01)
            text = admin(g, "/metrics")
            assert gauge(text, "ferry_cache_measured_hit_ratio", bucket) == pytest.approx(actual, abs=1e-3)
            assert gauge(text, "ferry_cache_predicted_hit_ratio", bucket) == pytest.approx(
                doc["predicted_hit_ratio"], abs=1e-3)
        print("budget, predicted (B's curve), predicted (own curve), measured:", report)
        for at, from_middle, own, actual in report:
            assert abs(from_middle - actual) <= 0.05, (at, from_middle, actual)
            assert abs(own - actual) <= 0.05, (at, own, actual)
        assert [r[3] for r in report] == sorted(r[3] for r in report)  # more cache, more hits
        entry = middle["buckets"][bucket]
        assert entry["reads"] == GETS and entry["points"] and entry["points_alone"]
        distinct = sum(sizes[k] for k in set(picks))
        assert middle["touched_bytes"]["hour"] == middle["touched_bytes"]["day"] == distinct
        assert middle["footprint_bytes"] == distinct and middle["scope"] == "process"
        assert sum(1 for p in middle["points"] if p["cache_bytes"] <= budget) >= 1
        _tenant_tokens_see_their_own(gateways[1], bucket)
    finally:
        each(lambda g: g.stop(), gateways)


def _tenant_tokens_see_their_own(gw: GatewayProcess, bucket: str) -> None:
    """A token bound to the bucket's tenant (the bootstrap one) sees it; another tenant's sees
    neither the bucket nor the node's curve."""
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with httpx.Client(base_url=gw.endpoint, headers=headers, timeout=30) as api:
        other = f"tn-{uuid.uuid4().hex[:8]}"
        assert api.post("/admin/tenants", json={"name": other}).status_code == 201
        tokens = {}
        for tenant in ("default", other):
            made = api.post("/admin/tokens", json={"name": f"sz-{uuid.uuid4().hex[:8]}", "scopes": ["read"],
                                                   "tenant": tenant})
            assert made.status_code == 201, made.text
            tokens[tenant] = made.json()["token"]
    mine = admin(gw, "/admin/cache/sizing", tokens["default"])
    assert list(mine["buckets"]) == [bucket] and len(mine["tenants"]) == 1
    assert mine["reads"] == GETS and mine["scope"] == "process, tenant" and "dirty_bytes" not in mine
    theirs = admin(gw, "/admin/cache/sizing", tokens[other])
    assert theirs["buckets"] == {} and theirs["tenants"] == {} and theirs["reads"] == 0 and theirs["points"] == []
