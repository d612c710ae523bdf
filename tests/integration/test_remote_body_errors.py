"""A remote GET whose headers are fine but whose body is cut short (Content-Length promising more)
is a remote error: the status page's remote errors and ``ferry_remote_body_errors_total`` count it
(issue 15: it was counted as an ok call, so no alert would fire), and the client never gets the
short body as the object.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from botocore.exceptions import BotoCoreError, ClientError

from tests.support.counting_proxy import CountingProxy
from tests.support.gateway import ADMIN_TOKEN, GatewayProcess
from tests.support.seaweed import SeaweedServer

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture(scope="module")
def gw(proxy: CountingProxy, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(proxy, tmp_path_factory.mktemp("body-errors"),
                        env={"FERRY_REMOTE_CIRCUIT_COOLDOWN": "1"}) as g:
        yield g


def remote_stats(gw: GatewayProcess) -> dict[str, Any]:
    return dict(httpx.get(f"{gw.endpoint}/admin/stats", headers=ADMIN, timeout=30).json()["remote"])


@pytest.mark.parametrize("size", [200_000, 20 * 1024 * 1024], ids=["one-block", "several-blocks"])
def test_a_truncated_remote_body_counts_as_a_remote_error(gw: GatewayProcess, proxy: CountingProxy,
                                                          seaweed: SeaweedServer, size: int) -> None:
    bucket = seaweed.create_bucket(f"trunc-{uuid.uuid4().hex[:10]}")
    body = b"t" * size
    seaweed.client().put_object(Bucket=bucket, Key="cold", Body=body)
    client = gw.client(read_timeout=60)
    client.head_bucket(Bucket=bucket)
    before = remote_stats(gw)
    proxy.truncate_ratio = 1.0
    try:
        try:
            got = client.get_object(Bucket=bucket, Key="cold")["Body"].read()
        except (ClientError, BotoCoreError, OSError):
            got = None  # a clear error or a cut connection: never a short body taken as the object
    finally:
        proxy.clear_faults()
    assert got is None or got == body, len(got or b"")
    after = remote_stats(gw)
    print(f"remote before {before}, after {after}")
    assert after["errors"] > before["errors"], (before, after)
    assert after["body_errors"].get("truncated", 0) > before.get("body_errors", {}).get("truncated", 0)
    metrics = httpx.get(f"{gw.endpoint}/metrics", headers=ADMIN, timeout=30).text
    assert 'ferry_remote_body_errors_total{reason="truncated"}' in metrics
    assert client.get_object(Bucket=bucket, Key="cold")["Body"].read() == body  # nothing bad was cached
