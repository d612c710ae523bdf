"""Issue 28, sizing, wired in: the read cache records every object read it answers into the
process's curves (app/services/cache/sizing.py), the admin API answers them (tenant-scoped), the gauges
follow, the chore is registered, and ``ferry cache sizing`` draws them."""

from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app import metrics
from app.adapters.catalog.migrate import upgrade
from app.bootstrap import build as build_container
from app.cli import cli as ferry_cli
from app.cli_admin import cache as cache_cli
from app.config import Settings
from app.domain.sizing import key_hash
from app.main import control_app
from app.services.cache.sizing import SizingRecorder
from app.services.control.chores import BY_NAME
from tests.fakes.harness import build, fills_settled
from tests.fakes.remote import InMemoryRemote

KiB, MiB = 1024, 1024**2


def _remote_object(remote: InMemoryRemote, bucket: str, key: str, data: bytes) -> None:
    import base64
    import hashlib

    remote.put_object(bucket, key, io.BytesIO(data), len(data), base64.b64encode(hashlib.md5(data).digest()).decode(),
                      {}, {}, {})


def test_the_cache_records_each_read_once_with_its_version(tmp_path: Path) -> None:
    """Two GETs of an object only the remote has: a miss then a hit, both in the curves; a HEAD is
    not a read; a new version (written through the gateway) is a new object in the curve."""
    remote = InMemoryRemote()
    remote.create_bucket("bkt", None)
    _remote_object(remote, "bkt", "a", b"x" * 5000)
    services = build(tmp_path, remote)
    sizing = services.cache.sizing

    async def scenario() -> None:
        assert await services.get("bkt", "a") == b"x" * 5000
        await fills_settled(services.cache)
        assert await services.get("bkt", "a") == b"x" * 5000
        await services.gateway.head_object("bkt", "a")
        await services.put("bkt", "a", b"y" * 7000)
        services.destage_all()
        assert await services.get("bkt", "a") == b"y" * 7000

    asyncio.run(scenario())
    report = sizing.report()
    assert report["reads"] == 3 and report["measured_hit_ratio"] == pytest.approx(1 / 3, abs=1e-4)
    assert report["footprint_bytes"] == 12_000  # two versions: 5000 + 7000 bytes
    assert report["touched_bytes"] == {"hour": 12_000, "day": 12_000}
    entry = report["buckets"]["bkt"]
    assert entry["reads"] == 3 and entry["measured_hit_ratio"] == report["measured_hit_ratio"]
    assert set(entry["touched_bytes"]) == {"hour", "day"}  # its curve alone: a 25% sample
    assert report["tenants"] == {}  # the harness reads without a tenant


def _recorder() -> SizingRecorder:
    """Budget 100 KiB, 30 KiB of it dirty. Bucket a (tenant 1) cycles 10 objects of 8 KiB, bucket b
    (tenant 2) rereads one of 1 KiB between them: a's reuses need 81 KiB, b's 9 KiB."""
    rec = SizingRecorder(100 * KiB, lambda: 30 * KiB)
    for i in range(300):
        rec.record("a", f"k{i % 10}", "e1", 8 * KiB, 1, i >= 10)
        rec.record("b", "hot", "e2", 1 * KiB, 2, i >= 1)
    return rec


def test_report_shape_and_tenant_scope() -> None:
    rec = _recorder()
    doc = rec.report()
    assert doc["budget_bytes"] == 100 * KiB and doc["centred_on"] == "budget"
    assert doc["dirty_bytes"] == 30 * KiB and doc["effective_budget_bytes"] == 70 * KiB
    sizes = [p["cache_bytes"] for p in doc["points"]]
    assert len(sizes) == 7 and 100 * KiB in sizes and min(sizes) < 100 * KiB
    assert set(doc["buckets"]) == {"a", "b"} and set(doc["tenants"]) == {"1", "2"}
    a, b = doc["buckets"]["a"], doc["buckets"]["b"]
    assert a["measured_hit_ratio"] == pytest.approx(290 / 300, abs=1e-4)
    # 81 KiB fit in the budget, not in the 70 KiB the dirty bytes leave the cache.
    assert a["predicted_hit_ratio"] == 0.0 and b["predicted_hit_ratio"] == pytest.approx(299 / 300, abs=1e-4)
    shared = {p["cache_bytes"]: p["hit_ratio"] for p in a["points"]}
    assert shared[75 * KiB] == 0.0 and shared[100 * KiB] == pytest.approx(290 / 300, abs=1e-4)
    assert len(a["points_alone"]) == 7  # a's curve alone (a 25% sample of its keys)
    assert doc["touched_bytes"] == {"hour": 81 * KiB, "day": 81 * KiB} and doc["reads"] == 600
    assert doc["predicted_hit_ratio"] == pytest.approx(299 / 600, abs=1e-4)

    scoped = rec.report(buckets={"b"}, tenant_id=2)
    assert set(scoped["buckets"]) == {"b"} and set(scoped["tenants"]) == {"2"}
    assert scoped["reads"] == 300 and scoped["measured_hit_ratio"] == pytest.approx(299 / 300, abs=1e-4)
    assert "dirty_bytes" not in scoped and "sample" not in scoped and scoped["scope"] == "process, tenant"
    assert scoped["points"] == scoped["tenants"]["2"]["points"]


def test_without_a_budget_the_points_centre_on_the_footprint() -> None:
    rec = SizingRecorder(0)
    assert rec.report()["points"] == [] and rec.publish() == 0
    for i in range(40):
        rec.record("a", f"k{i % 8}", "e", 4 * KiB, None, i >= 8)
    doc = rec.report()
    assert doc["centred_on"] == "footprint" and 32 * KiB in [p["cache_bytes"] for p in doc["points"]]
    assert doc["predicted_hit_ratio"] is None and doc["buckets"]["a"]["predicted_hit_ratio"] is None


def test_publish_sets_the_gauges_per_bucket() -> None:
    rec = _recorder()
    assert rec.publish() == 2
    got = metrics.samples(["ferry_cache_predicted_hit_ratio", "ferry_cache_measured_hit_ratio"])
    predicted = {labels["bucket"]: v for labels, v in got["ferry_cache_predicted_hit_ratio"]}
    measured = {labels["bucket"]: v for labels, v in got["ferry_cache_measured_hit_ratio"]}
    assert predicted["a"] == 0.0 and measured["a"] == pytest.approx(290 / 300, abs=1e-4)
    assert predicted["b"] == pytest.approx(299 / 300, abs=1e-4)
    assert BY_NAME["sizing-gauges"].scope == "process"


def test_the_names_stay_bounded() -> None:
    rec = SizingRecorder(MiB, max_names=4)
    for i in range(50):
        rec.record(f"b{i}", "k", "e", 100, i, False)
    doc = rec.report()
    assert len(rec.book.names()) == 4 and doc["sample"]["refused_reads"] > 0
    assert len(doc["buckets"]) + len(doc["tenants"]) <= 8  # the node curve's parts: 2 x max_names


def test_record_is_cheap_when_the_sample_skips_the_read() -> None:
    """A read of a key every curve's sample skips: a hash and three short locked updates."""
    rec = SizingRecorder(MiB)
    for i in range(20_000):  # enough keys for every curve's rate to fall
        rec.record("a", f"k{i}", "e", 10 * KiB, 1, False)
    skipped = next(f"x{i}" for i in range(10**6) if all(
        key_hash(f"a/x{i}@e") >= st.threshold for st in _strata(rec)))
    n = 20_000
    started = time.perf_counter()
    for _ in range(n):
        rec.record("a", skipped, "e", 10 * KiB, 1, True)
    per_read = (time.perf_counter() - started) / n
    assert per_read < 50e-6, per_read  # about 5 us on a quiet machine; generous for loaded CI


def _strata(rec: SizingRecorder) -> list[Any]:
    curves = [rec.node, *(c for c in (rec.book.get("bucket:a"), rec.book.get("tenant:1")) if c is not None)]
    return [st for c in curves for st in c._strata.values()]


def test_admin_endpoint_scopes_a_tenant_token(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, admin_token="root-token", remote_endpoint="http://127.0.0.1:9",
                        cache_bytes=MiB, _env_file=None)
    upgrade(settings.effective_database_url)
    container = build_container(settings)
    acme = container.admin.tenants.create("acme", None)
    container.admin.owners.assign("acme-data", "acme")
    _, token = container.admin.tokens.create("acme-read", ["read"], "acme")
    for i in range(20):
        container.cache.sizing.record("acme-data", f"k{i % 4}", "e", 1000, acme.id, i >= 4)
        container.cache.sizing.record("other", f"k{i % 4}", "e", 1000, 999, i >= 4)
    client = TestClient(control_app(container))
    full = client.get("/admin/cache/sizing", headers={"Authorization": "Bearer root-token"})
    assert full.status_code == 200, full.text
    doc = full.json()
    assert set(doc["buckets"]) == {"acme-data", "other"} and doc["reads"] == 40 and doc["workers"] == 1
    mine = client.get("/admin/cache/sizing", headers={"Authorization": f"Bearer {token}"}).json()
    assert set(mine["buckets"]) == {"acme-data"} and set(mine["tenants"]) == {str(acme.id)}
    assert doc["tenants"][str(acme.id)]["name"] == mine["tenants"][str(acme.id)]["name"] == "acme"
    assert doc["tenants"]["999"]["name"] is None
    assert mine["reads"] == 20 and mine["measured_hit_ratio"] == 0.8
    assert client.get("/admin/cache/sizing").status_code == 401
    stats = client.get("/admin/stats", headers={"Authorization": "Bearer root-token"}).json()
    assert stats["sizing"]["reads"] == 40 and len(stats["sizing"]["points"]) == 7


def test_cli_draws_a_table_and_a_plot(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = {**_recorder().report(), "workers": 1, "node_id": "n1"}

    class FakeAdmin:
        def __init__(self, url: str, token: str | None) -> None:
            pass

        def get(self, path: str, **_: Any) -> Any:
            assert path == "/admin/cache/sizing"
            return doc

    monkeypatch.setattr(cache_cli, "Admin", FakeAdmin)
    out = CliRunner().invoke(ferry_cli, ["cache", "sizing"], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    budget_line = next(line for line in lines if "<- budget" in line)
    assert budget_line.lstrip().startswith("100.0 KiB |") and "#" in budget_line
    assert sum(1 for line in lines if "|" in line and "%" in line and "#" in line) >= 6
    assert "predicted at the budget less 30.0 KiB dirty 49.8%" in out.output and "measured 98.2%" in out.output
    one = CliRunner().invoke(ferry_cli, ["cache", "sizing", "--bucket", "b"])
    assert one.exit_code == 0 and "measured 99.7%" in one.output
    assert CliRunner().invoke(ferry_cli, ["cache", "sizing", "--bucket", "nope"]).exit_code == 1
    assert cache_cli.plot([], 1) == "no reads recorded yet"
