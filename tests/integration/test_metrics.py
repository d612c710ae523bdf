"""/metrics of a real gateway: the counters a scripted workload must move, with one and two workers.

Counters are cumulative over the session's gateway, so each test compares a scrape before and
after its own workload.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.request
import uuid
from collections import Counter as Tally
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from prometheus_client.parser import text_string_to_metric_families

from tests.support.gateway import ADMIN_TOKEN, GatewayProcess
from tests.support.seaweed import SeaweedServer

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(gw: GatewayProcess) -> Samples:
    req = urllib.request.Request(f"{gw.endpoint}/metrics", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= set(lab))


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def test_workload_moves_request_byte_destage_and_remote_counters(gateway: GatewayProcess, bucket: str) -> None:
    s3 = gateway.client()
    body = os.urandom(10_000)
    before = scrape(gateway)
    for i in range(3):
        s3.put_object(Bucket=bucket, Key=f"m/{i}", Body=body)
    result = gateway.flush(bucket, "m/")
    assert result["durable"], result
    for _ in range(2):
        for i in range(3):
            assert s3.get_object(Bucket=bucket, Key=f"m/{i}")["Body"].read() == body
    s3.head_object(Bucket=bucket, Key="m/0")
    with pytest.raises(ClientError):
        s3.get_object(Bucket=bucket, Key="m/missing")
    after = scrape(gateway)

    assert delta(before, after, "ferry_http_requests_total", operation="PutObject", outcome="ok") == 3
    assert delta(before, after, "ferry_http_requests_total", operation="HeadObject") == 1
    gets = {dict(lab)["outcome"]: after[(n, lab)] - before.get((n, lab), 0.0)
            for (n, lab) in after if n == "ferry_http_requests_total" and dict(lab)["operation"] == "GetObject"}
    assert sum(gets.values()) == 7, gets
    assert {o for o, n in gets.items() if n} <= {"ok", "hit", "miss", "stale", "bypass", "client_error"}, gets
    assert delta(before, after, "ferry_http_request_duration_seconds_count", operation="PutObject") == 3
    assert delta(before, after, "ferry_http_request_duration_seconds_count", operation="GetObject") == 7
    assert delta(before, after, "ferry_http_request_bytes_total", operation="PutObject") >= 3 * len(body)
    assert delta(before, after, "ferry_http_response_bytes_total", operation="GetObject") >= 6 * len(body)
    assert value(after, "ferry_http_requests_in_flight") == 0

    assert delta(before, after, "ferry_destage_attempts_total", outcome="durable") >= 3
    assert delta(before, after, "ferry_destaged_bytes_total") >= 3 * len(body)
    assert delta(before, after, "ferry_destage_delay_seconds_count") >= 3
    assert delta(before, after, "ferry_remote_requests_total", operation="PutObject", outcome="ok") >= 3
    assert delta(before, after, "ferry_remote_request_duration_seconds_count", operation="PutObject") >= 3

    # Catalog gauges, read at scrape time: everything written is durable again.
    assert value(after, "ferry_catalog_up") == 1
    assert value(after, "ferry_dirty_bytes") == 0
    assert value(after, "ferry_destage_queue_depth") == 0
    assert value(after, "ferry_destage_lag_seconds") == 0
    assert value(after, "ferry_write_buffer_bytes") == 64 * 1024**3
    # The default budget is a share of the data dir's filesystem (app/domain/cache_budget.py)
    assert 0 < value(after, "ferry_cache_budget_bytes") < shutil.disk_usage(gateway.data_dir).total


def test_unsigned_requests_are_counted_under_their_operation(gateway: GatewayProcess, bucket: str) -> None:
    before = scrape(gateway)
    req = urllib.request.Request(f"{gateway.endpoint}/{bucket}/some-key", method="GET")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=10)
    assert info.value.code == 403
    after = scrape(gateway)
    # The operation is named even though authentication failed.
    assert delta(before, after, "ferry_http_requests_total", operation="GetObject", outcome="client_error") == 1


def test_cache_hit_and_miss_are_counted_by_bucket_and_label_the_request(gateway: GatewayProcess, bucket: str,
                                                                        seaweed: SeaweedServer) -> None:
    """A remote object read twice through the gateway: a miss, then a hit (the read cache's counters)."""
    key = f"cold/{uuid.uuid4().hex}"
    body = os.urandom(50_000)
    seaweed.client().put_object(Bucket=bucket, Key=key, Body=body)
    s3 = gateway.client()
    before = scrape(gateway)
    for _ in range(2):
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body
    after = scrape(gateway)
    assert delta(before, after, "ferry_cache_requests_total", bucket=bucket, outcome="miss") == 1
    assert delta(before, after, "ferry_cache_requests_total", bucket=bucket, outcome="hit") == 1
    assert delta(before, after, "ferry_http_requests_total", operation="GetObject", outcome="hit") == 1
    assert delta(before, after, "ferry_http_requests_total", operation="GetObject", outcome="miss") == 1
    assert value(after, "ferry_cache_bytes") >= len(body)


@pytest.fixture(scope="module")
def gateway2(seaweed: SeaweedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(seaweed, tmp_path_factory.mktemp("gw2"), workers=2) as gw:
        yield gw


def _served_by_pid(metrics_dir: Path, operation: str) -> Tally[str]:
    """Requests of ``operation`` per worker pid, read from each worker's own counter file."""
    from prometheus_client.multiprocess import MultiProcessCollector

    served: Tally[str] = Tally()
    for path in metrics_dir.glob("counter_*.db"):
        pid = path.stem.split("_", 1)[1]
        for family in MultiProcessCollector.merge([str(path)]):
            for s in family.samples:
                if s.name == "ferry_http_requests_total" and s.labels.get("operation") == operation:
                    served[pid] += int(s.value)
    return served


def test_two_workers_report_the_same_totals(gateway2: GatewayProcess, seaweed: SeaweedServer) -> None:
    name = f"w2-{uuid.uuid4().hex[:12]}"
    gateway2.client().create_bucket(Bucket=name)
    metrics_dir = gateway2.data_dir / "metrics"
    pids = {p.stem.split("_", 1)[1] for p in metrics_dir.glob("*.db")}
    assert len(pids) >= 2, f"expected files of both workers in {metrics_dir}: {sorted(os.listdir(metrics_dir))}"

    def put(i: int) -> None:
        client = gateway2.client()  # a new connection each: the kernel spreads them over the workers
        client.put_object(Bucket=name, Key=f"k{i}", Body=b"x" * 100)
        client.close()

    before = scrape(gateway2)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(40)))
    assert gateway2.flush(name)["durable"]
    # Each worker writes its figures within half a second; then whichever worker answers a scrape
    # adds up every worker's counters.
    deadline = time.monotonic() + 10
    while delta(before, scrape(gateway2), "ferry_http_requests_total", operation="PutObject") < 40:
        assert time.monotonic() < deadline, "the workers' counters never added up to 40"
        time.sleep(0.2)
    totals = set()
    for _ in range(6):
        totals.add(delta(before, scrape(gateway2), "ferry_http_requests_total", operation="PutObject"))
    assert totals == {40.0}
    served = _served_by_pid(metrics_dir, "PutObject")
    assert sum(served.values()) == 40 + int(value(before, "ferry_http_requests_total", operation="PutObject"))
    assert len([pid for pid, n in served.items() if n]) >= 2, f"one worker served every request: {served}"
    final = scrape(gateway2)
    assert value(final, "ferry_dirty_bytes") == 0
    assert value(final, "ferry_destage_attempts_total", outcome="durable") >= 40


def test_json_logs_carry_the_request_id(seaweed: SeaweedServer, tmp_path: Path) -> None:
    env = {"FERRY_LOG_JSON": "1", "FERRY_LOG_LEVEL": "debug"}
    with GatewayProcess(seaweed, tmp_path / "gw", env=env) as gw:
        s3 = gw.client()
        name = f"lj-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(Bucket=name)
        put = s3.put_object(Bucket=name, Key="k", Body=b"hello")
        s3_request_id = put["ResponseMetadata"]["RequestId"]
        req = urllib.request.Request(f"{gw.endpoint}/admin/objects?bucket={name}",
                                     headers={"Authorization": f"Bearer {ADMIN_TOKEN}",
                                              "X-Request-Id": "ops-check-42"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.headers["x-request-id"] == "ops-check-42"
        with urllib.request.urlopen(f"{gw.endpoint}/healthz", timeout=10) as r:
            generated = r.headers["x-request-id"]
        assert generated and generated != "ops-check-42"
        gw.flush(name)
    entries: list[dict[str, Any]] = []
    for line in gw.log_path.read_text().splitlines():
        if line.startswith("{"):
            entries.append(json.loads(line))
    by_id: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        by_id.setdefault(e.get("request_id", ""), []).append(e)
    s3_lines = by_id.get(s3_request_id, [])
    assert any(e["logger"] == "ferry.access" and e.get("operation") == "PutObject" and e.get("status") == 200
               for e in s3_lines), f"no access line for {s3_request_id}: {entries[-20:]}"
    assert any(e.get("path") == "/admin/objects" for e in by_id.get("ops-check-42", [])), entries[-20:]
    assert by_id.get(generated), f"no line with the generated id {generated}"
    # uvicorn's own lines are JSON as well (its log config is applied in the worker).
    assert any(e["logger"].startswith("uvicorn") for e in entries), entries[:5]
    for e in entries:
        assert {"ts", "level", "logger", "msg"} <= set(e)
