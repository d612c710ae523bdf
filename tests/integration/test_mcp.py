"""``ferry mcp`` through the SDK's own client (stdio and streamable HTTP) against a live gateway.

Every answer is checked against what the admin API itself reports; a read token must not act.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.support.gateway import ADMIN_TOKEN, FERRY, GatewayProcess, free_port

DOCS = Path(__file__).resolve().parents[2] / "docs"
READ_TOOLS = {"status", "traffic", "where_is", "destage", "slow_requests", "effective_policy", "cache_sizing"}
ACTIONS = {"stage": {"uri": "s3://b/p/"}, "flush": {"uri": "s3://b/p/"}, "evict": {"uri": "s3://b/p/"},
           "retry": {"seq": 1}}
Opener = Callable[[str], AbstractAsyncContextManager[ClientSession]]


def _env(gw: GatewayProcess, token: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRY_")}
    return {**env, "FERRY_URL": gw.endpoint, "FERRY_ADMIN_TOKEN": token}


@asynccontextmanager
async def _stdio(gw: GatewayProcess, token: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=FERRY, args=["mcp"], env=_env(gw, token))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "ferry mcp --transport http exited"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("ferry mcp did not listen")


@asynccontextmanager
async def _http(gw: GatewayProcess, token: str) -> AsyncIterator[ClientSession]:
    port = free_port()
    proc = subprocess.Popen([FERRY, "mcp", "--transport", "http", "--port", str(port)], env=_env(gw, token),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_port(port, proc)
        async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            yield session
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(params=["stdio", "http"])
def opener(request: pytest.FixtureRequest, gateway: GatewayProcess) -> Opener:
    transport = _stdio if request.param == "stdio" else _http
    return lambda token: transport(gateway, token)


@pytest.fixture(scope="module")
def api(gateway: GatewayProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.endpoint, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                      timeout=60) as client:
        yield client


def _token(api: httpx.Client, scope: str) -> str:
    r = api.post("/admin/tokens", json={"name": f"mcp-{scope}-{uuid.uuid4().hex[:8]}", "scopes": [scope]})
    assert r.status_code == 201, r.text
    return str(r.json()["token"])


async def _call(session: ClientSession, name: str, args: dict[str, Any] | None = None) -> Any:
    result = await session.call_tool(name, args or {})
    assert not result.is_error, result.content
    data = result.structured_content
    if isinstance(data, dict) and set(data) == {"result"}:
        data = data["result"]
    return data if data is not None else json.loads(result.content[0].text)  # type: ignore[union-attr]


async def _ready_status(session: ClientSession, api: httpx.Client, timeout: float = 30.0) -> Any:
    """The status tool's readiness is /readyz's. Its checks are live probes with 3 s bounds (a
    ListBuckets of the session's SeaweedFS, the catalog): on a loaded machine one may miss its
    bound for a moment: the tool is asked again (a second apart) until it says ready, and a
    failure shows what both the tool and /readyz (with every check's detail) said."""
    deadline = time.monotonic() + timeout
    while True:
        status = await _call(session, "status")
        if status["ready"].get("ready") is True:
            return status
        if time.monotonic() >= deadline:
            raise AssertionError(f"not ready within {timeout}s: tool {status['ready']}, /readyz {api.get('/readyz').text}")
        await anyio.sleep(1.0)


def test_tools_answer_what_the_admin_api_reports(opener: Opener, api: httpx.Client, gateway: GatewayProcess,
                                                 bucket: str) -> None:
    s3 = gateway.client()
    started = time.time()  # the session's gateway served other tests' (slower) requests before
    s3.put_object(Bucket=bucket, Key="mcp/a.txt", Body=b"hello mcp")
    gateway.flush(bucket)
    s3.get_object(Bucket=bucket, Key="mcp/a.txt")["Body"].read()
    writer = _token(api, "write")

    async def scenario() -> None:
        async with opener(writer) as session:
            names = {t.name for t in (await session.list_tools()).tools}
            assert names == READ_TOOLS | set(ACTIONS)
            uris = {str(r.uri) for r in (await session.list_resources()).resources}
            assert {"ferry://docs/operations", "ferry://docs/configuration"} <= uris
            doc = await session.read_resource("ferry://docs/operations")
            assert doc.contents[0].text == (DOCS / "operations.md").read_text()  # type: ignore[union-attr]

            status = await _ready_status(session, api)
            stats = api.get("/admin/stats").json()
            assert status["node"]["node_id"] == stats["node_id"]

            traffic = await _call(session, "traffic")
            stats = api.get("/admin/stats").json()
            row = next(r for r in traffic["by_bucket"] if r["bucket"] == bucket)
            admin_row = next(r for r in stats["cache"]["by_bucket"] if r["bucket"] == bucket)
            assert {o: row[o] for o in ("hit", "miss")} == {o: admin_row[o] for o in ("hit", "miss")}
            assert row["hit"] + row["miss"] >= 1
            lat = next(r for r in traffic["latency_by_bucket"]["rows"] if r["bucket"] == bucket)
            assert lat["requests"] >= 2 and 0 < lat["p50_ms"] <= lat["max_ms"]
            windowed = await _call(session, "traffic", {"window_seconds": 0.5})
            assert windowed["window"].startswith("the last") and windowed["requests"] >= 0

            sizing = await _call(session, "cache_sizing")
            assert sizing["buckets"][bucket]["reads"] >= 1 and sizing["scope"] == "process"
            assert sizing["budget_bytes"] == api.get("/admin/cache/sizing").json()["budget_bytes"] > 0
            assert any(p["cache_bytes"] <= sizing["budget_bytes"] for p in sizing["points"])

            where = await _call(session, "where_is", {"uri": f"s3://{bucket}/mcp/a.txt"})
            versions = api.get("/admin/objects", params={"bucket": bucket, "prefix": "mcp/a.txt"}).json()["versions"]
            assert where["history"] == [v for v in versions if v["key"] == "mcp/a.txt"]
            assert where["journaled"] and where["durable"] is True and where["dirty"] == []
            cache = api.get("/admin/cache/object", params={"bucket": bucket, "key": "mcp/a.txt"}).json()
            assert where["cached"] is cache["cached"] and where["cache_copies"] == cache["copies"]
            ready = [c for c in cache["copies"] if c["state"] == "ready"]
            assert cache["cached"] and len(ready) == 1 and ready[0]["node_id"] != "*", cache
            assert ready[0]["size"] == 9 and ready[0]["blocks"] == 1 and ready[0]["cached_bytes"] == 9

            destage = await _call(session, "destage")
            summary = api.get("/admin/journal/summary").json()
            assert destage["summary"]["max_seq"] == summary["max_seq"]
            assert destage["failed"] == api.get("/admin/journal", params={"state": "failed", "limit": 50}).json()["entries"]

            slow = await _call(session, "slow_requests", {"limit": 5})
            admin_slow = api.get("/admin/requests/slowest", params={"limit": 5}).json()["requests"]
            assert slow["requests"] and len(slow["requests"]) <= 5
            totals = [r["total_ms"] for r in slow["requests"]]
            assert totals == sorted(totals, reverse=True) and totals[0] >= admin_slow[-1]["total_ms"]
            mine = api.get("/admin/requests/slowest", params={
                "limit": 200, "window_seconds": time.time() - started + 1}).json()["requests"]
            get = next(r for r in mine if r["key"] == "mcp/a.txt" and r["operation"] == "GetObject")
            stages = get["stages_ms"]
            assert get["bucket"] == bucket and get["status"] == 200 and get["bytes_out"] == 9
            assert 0 <= stages["auth"] <= stages["first_byte"] <= get["total_ms"]
            assert stages["lookup"] == pytest.approx(stages["first_byte"] - stages["auth"], abs=0.01)

            policy = await _call(session, "effective_policy", {"uri": f"s3://{bucket}/mcp/a.txt"})
            assert policy == api.get("/admin/policies/effective", params={"bucket": bucket, "key": "mcp/a.txt"}).json()

            s3.put_object(Bucket=bucket, Key="mcp/b.txt", Body=b"second")
            flushed = await _call(session, "flush", {"uri": f"s3://{bucket}/mcp/", "timeout_seconds": 60})
            assert flushed["durable"] is True and flushed["pending"] == 0
            evicted = await _call(session, "evict", {"uri": f"s3://{bucket}/mcp/"})
            assert evicted["entries"] >= 1
            job = await _call(session, "stage", {"uri": f"s3://{bucket}/mcp/"})
            assert api.get(f"/admin/staging/{job['id']}").json()["bucket"] == bucket
            missing = await session.call_tool("retry", {"seq": 2**62})
            assert missing.is_error and "404" in missing.content[0].text  # type: ignore[union-attr]

    anyio.run(scenario)


def test_a_read_token_cannot_act(opener: Opener, api: httpx.Client) -> None:
    reader = _token(api, "read")

    async def scenario() -> None:
        async with opener(reader) as session:
            assert (await _call(session, "destage"))["summary"]["max_seq"] >= 0  # reading is allowed
            for name, args in ACTIONS.items():
                result = await session.call_tool(name, args)
                text = result.content[0].text  # type: ignore[union-attr]
                assert result.is_error and "403" in text and "write-scoped" in text, (name, text)

    anyio.run(scenario)
