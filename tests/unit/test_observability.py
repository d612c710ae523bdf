"""Metrics and log plumbing in-process: outcomes, batching, remote hooks, request ids in log lines."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import anyio.to_thread
import boto3
import pytest
from botocore.config import Config
from prometheus_client import CollectorRegistry, Histogram

from app import metrics
from app.logs import REQUEST_ID, JsonFormatter, RequestIdFilter, RequestIdMiddleware, configure_logging
from app.metrics import http_requests
from tests.support.listener import closed_port


def sample(name: str, **labels: str) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_batched_observations_equal_one_by_one() -> None:
    registry = CollectorRegistry()
    buckets = (0.001, 0.01, 0.1, 1.0)
    one = Histogram("one_seconds", "x", buckets=buckets, registry=registry)
    many = Histogram("many_seconds", "x", buckets=buckets, registry=registry)
    values = [0.0, 0.001, 0.0010001, 0.01, 0.05, 0.1, 0.99, 1.0, 1.5, 30.0]
    for v in values:
        one.observe(v)
    http_requests._observe_all(many, values)
    for le in ("0.001", "0.01", "0.1", "1.0", "+Inf"):
        assert registry.get_sample_value("many_seconds_bucket", {"le": le}) == \
            registry.get_sample_value("one_seconds_bucket", {"le": le}), le
    assert registry.get_sample_value("many_seconds_sum") == pytest.approx(registry.get_sample_value("one_seconds_sum"))
    assert registry.get_sample_value("many_seconds_count") == len(values)


@pytest.mark.parametrize(("status", "explicit", "expected"), [
    (200, None, "ok"), (304, None, "ok"), (404, None, "client_error"), (503, None, "error"),
    (200, "hit", "hit"), (206, "miss", "miss"), (404, "miss", "miss"), (500, "hit", "error"), (0, None, "aborted"),
])
def test_outcome_rules(status: int, explicit: str | None, expected: str) -> None:
    stats = metrics.RequestStats()
    stats.status, stats.outcome = status, explicit
    assert metrics.outcome_of(stats) == expected


def test_a_request_is_recorded_with_the_outcome_set_in_a_worker_thread() -> None:
    """The cache may decide the outcome in a thread: the holder in the context is shared with it."""
    op = "TestOp-thread"
    before = sample("ferry_http_requests_total", operation=op, outcome="hit")

    async def request() -> None:
        stats = metrics.request_started()
        metrics.set_operation(op)

        async def send(_: Any) -> None:
            return None

        wrapped = stats.wrap_send(send)
        await anyio.to_thread.run_sync(metrics.set_outcome, "hit")
        await wrapped({"type": "http.response.start", "status": 200, "headers": []})
        await wrapped({"type": "http.response.body", "body": b"x" * 123})
        metrics.request_finished(stats)
        assert metrics.current_outcome() is None  # the context is back to no request
        metrics.flush_requests()

    asyncio.run(request())
    assert sample("ferry_http_requests_total", operation=op, outcome="hit") == before + 1
    assert sample("ferry_http_response_bytes_total", operation=op, outcome="hit") >= 123
    assert sample("ferry_http_request_duration_seconds_count", operation=op, outcome="hit") >= 1


def test_pending_figures_are_written_by_the_event_loop_within_the_flush_interval() -> None:
    op = "TestOp-timer"

    async def run() -> tuple[float, float]:
        stats = metrics.request_started()
        metrics.set_operation(op)
        stats.status = 204
        metrics.request_finished(stats)
        early = sample("ferry_http_requests_total", operation=op, outcome="ok")
        await asyncio.sleep(metrics.FLUSH_SECONDS + 0.3)
        return early, sample("ferry_http_requests_total", operation=op, outcome="ok")

    early, late = asyncio.run(run())
    assert (early, late) == (0.0, 1.0)
    assert sample("ferry_http_requests_in_flight") == 0


def test_cache_outcome_labels_the_current_request() -> None:
    async def run() -> str | None:
        stats = metrics.request_started()
        metrics.cache_outcome("stale", "bkt", 7)
        seen = metrics.current_outcome()
        stats.status = 200
        metrics.request_finished(stats)
        metrics.flush_requests()  # cache figures are written in the request batches too
        return seen

    assert asyncio.run(run()) == "stale"
    metrics.set_outcome("hit")  # outside a request: a no-op, not an error
    assert sample("ferry_cache_requests_total", bucket="bkt", tenant="7", outcome="stale") >= 1


def test_remote_hooks_time_calls_and_count_answers_and_network_errors(seaweed: Any) -> None:
    """Against the real SeaweedFS of the session: the hooks see real answers (200, 404)."""
    client = boto3.client("s3", endpoint_url=seaweed.endpoint, region_name="us-east-1",
                          aws_access_key_id=seaweed.access_key, aws_secret_access_key=seaweed.secret_key)
    metrics.instrument_boto_client(client)
    before_ok = sample("ferry_remote_requests_total", operation="PutObject", outcome="ok")
    before_404 = sample("ferry_remote_requests_total", operation="HeadObject", outcome="client_error")
    before_count = sample("ferry_remote_request_duration_seconds_count", operation="PutObject")
    client.create_bucket(Bucket="bkt-obs")
    client.put_object(Bucket="bkt-obs", Key="k", Body=b"x")
    with pytest.raises(client.exceptions.ClientError):
        client.head_object(Bucket="bkt-obs", Key="missing")
    client.delete_object(Bucket="bkt-obs", Key="k")
    client.delete_bucket(Bucket="bkt-obs")
    assert sample("ferry_remote_requests_total", operation="PutObject", outcome="ok") == before_ok + 1
    assert sample("ferry_remote_requests_total", operation="HeadObject", outcome="client_error") == before_404 + 1
    assert sample("ferry_remote_request_duration_seconds_count", operation="PutObject") == before_count + 1

    down = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{closed_port()}", region_name="us-east-1",
                        aws_access_key_id="k", aws_secret_access_key="s",
                        config=Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=1))
    metrics.instrument_boto_client(down)
    before = sample("ferry_remote_requests_total", operation="ListBuckets", outcome="network")
    with pytest.raises(Exception):  # noqa: B017 - botocore's connection error class varies
        down.list_buckets()
    assert sample("ferry_remote_requests_total", operation="ListBuckets", outcome="network") == before + 1


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    configure_logging("debug", as_json=True)
    handler = logging.getLogger("ferry").handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    stream = io.StringIO()
    old = handler.setStream(stream)
    try:
        yield stream
    finally:
        handler.setStream(old)  # type: ignore[arg-type]


def test_json_lines_carry_the_request_id_and_fields(captured: io.StringIO) -> None:
    log = logging.getLogger("ferry.test")
    log.info("outside")
    token = REQUEST_ID.set("ABC123")
    try:
        log.warning("inside %s", "a request", extra={"fields": {"status": 503}})
    finally:
        REQUEST_ID.reset(token)
    lines = [json.loads(line) for line in captured.getvalue().splitlines()]
    assert "request_id" not in lines[0]
    assert lines[1]["request_id"] == "ABC123"
    assert lines[1]["msg"] == "inside a request" and lines[1]["status"] == 503 and lines[1]["level"] == "warning"


def test_text_lines_carry_the_request_id() -> None:
    record = logging.LogRecord("ferry.x", logging.INFO, __file__, 1, "hello", None, None)
    token = REQUEST_ID.set("RID42")
    try:
        assert RequestIdFilter().filter(record)
    finally:
        REQUEST_ID.reset(token)
    from app.logs import TEXT_FORMAT

    assert "[RID42]: hello" in logging.Formatter(TEXT_FORMAT).format(record)
    assert json.loads(JsonFormatter().format(record))["request_id"] == "RID42"


@pytest.mark.parametrize(("sent", "kept"), [("proxy-id.1:2", True), ("bad id\nInjected: x", False), ("x" * 100, False)])
def test_middleware_keeps_a_safe_caller_id_and_logs_under_it(sent: str, kept: bool) -> None:
    seen: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen["id"] = REQUEST_ID.get()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    sent_messages: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent_messages.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    scope = {"type": "http", "method": "GET", "path": "/healthz",
             "headers": [(b"x-request-id", sent.encode("latin-1"))]}
    asyncio.run(RequestIdMiddleware(app)(scope, receive, send))
    header = dict(sent_messages[0]["headers"])[b"x-request-id"].decode()
    assert header == seen["id"]
    assert (header == sent) is kept
    assert REQUEST_ID.get() is None
