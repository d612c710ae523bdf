"""What the control paths show without a token: /metrics needs a read token (unless
FERRY_METRICS_PUBLIC), /readyz tells anonymous probes only ready or not, and its remote check is
cached so a burst of probes costs at most one remote call; /healthz stays public.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.counting_proxy import CountingProxy
from tests.support.gateway import ADMIN_TOKEN, GatewayProcess, free_port
from tests.support.seaweed import SeaweedServer

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture(scope="module")
def gw(proxy: CountingProxy, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(proxy, tmp_path_factory.mktemp("exposure"), env={"FERRY_READY_CACHE_SECONDS": "30"}) as g:
        yield g


def test_metrics_need_a_read_token(gw: GatewayProcess, seaweed: SeaweedServer) -> None:
    bucket = seaweed.create_bucket(f"exp-{uuid.uuid4().hex[:10]}")
    s3 = gw.client()
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    s3.get_object(Bucket=bucket, Key="k")["Body"].read()
    anon = httpx.get(f"{gw.endpoint}/metrics", timeout=30)
    assert anon.status_code == 401, anon.text[:300]
    assert bucket not in anon.text
    assert httpx.get(f"{gw.endpoint}/metrics", headers={"Authorization": "Bearer wrong"}, timeout=30).status_code == 401

    reader = httpx.post(f"{gw.endpoint}/admin/tokens", headers=AUTH, timeout=30,
                        json={"name": f"prom-{uuid.uuid4().hex[:8]}", "scopes": ["read"]}).json()["token"]
    r = httpx.get(f"{gw.endpoint}/metrics", headers={"Authorization": f"Bearer {reader}"}, timeout=30)
    assert r.status_code == 200 and "ferry_destage_lag_seconds" in r.text
    assert httpx.get(f"{gw.endpoint}/healthz", timeout=30).json() == {"status": "ok"}


def test_metrics_public_when_the_operator_says_so(seaweed: SeaweedServer, tmp_path: Any) -> None:
    with GatewayProcess(seaweed, tmp_path / "gw", env={"FERRY_METRICS_PUBLIC": "true"}) as g:
        r = httpx.get(f"{g.endpoint}/metrics", timeout=30)
        assert r.status_code == 200 and "ferry_destage_lag_seconds" in r.text


def test_readyz_details_only_with_a_token(gw: GatewayProcess) -> None:
    anon = httpx.get(f"{gw.endpoint}/readyz", timeout=30)
    assert anon.status_code == 200 and anon.json() == {"ready": True}
    full = httpx.get(f"{gw.endpoint}/readyz", headers=AUTH, timeout=30)
    assert full.status_code == 200 and {"catalog", "remote", "disk"} <= set(full.json()["checks"])
    assert httpx.get(f"{gw.endpoint}/readyz", headers={"Authorization": "Bearer wrong"}, timeout=30).status_code == 401


def test_readyz_of_a_failing_node_hides_why_from_anonymous_callers(tmp_path: Any) -> None:
    class Dead:
        endpoint = f"http://127.0.0.1:{free_port()}"
        access_key = "a"
        secret_key = "b"

    with GatewayProcess(Dead(), tmp_path / "gw", env={"FERRY_REMOTE_CONNECT_TIMEOUT": "1"}) as g:
        anon = httpx.get(f"{g.endpoint}/readyz", timeout=30)
        assert anon.status_code == 503 and anon.json() == {"ready": False}
        assert Dead.endpoint.split("//")[1] not in anon.text
        full = httpx.get(f"{g.endpoint}/readyz", headers=AUTH, timeout=30)
        assert full.status_code == 503 and full.json()["checks"]["remote"]["detail"]


def test_readyz_burst_makes_one_remote_call(gw: GatewayProcess, proxy: CountingProxy) -> None:
    httpx.get(f"{gw.endpoint}/readyz", timeout=30)  # warm: the window may have expired
    proxy.reset()
    barrier = threading.Barrier(16)
    statuses: list[int] = []

    def probe() -> None:
        barrier.wait()
        for _ in range(5):
            statuses.append(httpx.get(f"{gw.endpoint}/readyz", timeout=30).status_code)

    threads = [threading.Thread(target=probe) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert statuses == [200] * 80
    assert len([r for r in proxy.requests() if r.path in ("", "/")]) <= 1, proxy.requests()
