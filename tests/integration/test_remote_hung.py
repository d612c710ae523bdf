"""A hung remote (SeaweedFS stopped with SIGSTOP: connections accepted, never answered) must not
hang Ferry: every request that needs the remote answers 503 with Retry-After within the gateway's
deadline, and write-back PUTs are still acknowledged and destaged once the remote is back.

Before the deadlines (read timeout 60 s, 3 botocore attempts, the lean GET's own 3 attempts) a cold
GET took minutes to answer; this test sets FERRY_REMOTE_READ_TIMEOUT=2 and keeps the default attempts.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.support.gateway import GatewayProcess
from tests.support.seaweed import SeaweedServer

DEADLINE_S = 10.0  # what a client may wait for a 503 while the remote hangs
HUNG_ENV = {"FERRY_REMOTE_READ_TIMEOUT": "2", "FERRY_REMOTE_CONNECT_TIMEOUT": "2",
            "FERRY_SWEEP_INTERVAL": "0.5"}


@pytest.fixture(scope="module")
def hung_remote() -> Iterator[SeaweedServer]:
    with SeaweedServer() as sw:
        yield sw
        if sw.paused:
            sw.resume()


def timed_503(call: Callable[[], Any]) -> tuple[float, dict[str, Any]]:
    """Seconds until ``call`` failed, and the error's HTTP metadata; it must fail with 503."""
    started = time.monotonic()
    with pytest.raises(ClientError) as info:
        call()
    elapsed = time.monotonic() - started
    meta = info.value.response["ResponseMetadata"]
    assert meta["HTTPStatusCode"] == 503, info.value.response
    return elapsed, meta["HTTPHeaders"]


@pytest.mark.parametrize("mode", ["write-back", "write-through"])
def test_hung_remote_answers_503_within_deadline(hung_remote: SeaweedServer, tmp_path: Path, mode: str) -> None:
    bucket = hung_remote.create_bucket(f"hung-{mode}")
    hung_remote.client().put_object(Bucket=bucket, Key="cold", Body=b"cold bytes")  # never read through Ferry
    with GatewayProcess(hung_remote, tmp_path / "gw", env={**HUNG_ENV, "FERRY_DEFAULT_MODE": mode}) as gw:
        client = gw.client(read_timeout=120, connect_timeout=5)
        client.head_bucket(Bucket=bucket)
        hung_remote.pause()
        try:
            calls: dict[str, Callable[[], Any]] = {
                "GET": lambda: client.get_object(Bucket=bucket, Key="cold")["Body"].read(),
                "HEAD": lambda: client.head_object(Bucket=bucket, Key="cold"),
                "ListObjectsV2": lambda: client.list_objects_v2(Bucket=bucket),
            }
            if mode == "write-through":
                calls["PUT"] = lambda: client.put_object(Bucket=bucket, Key="wt", Body=b"x" * 1000)
            for name, call in calls.items():
                elapsed, headers = timed_503(call)
                print(f"{mode} {name}: 503 after {elapsed:.2f} s, Retry-After {headers.get('retry-after')}")
                assert elapsed < DEADLINE_S, f"{name} took {elapsed:.1f} s"
                assert headers.get("retry-after"), headers  # HEAD too: the header says when to come back
            if mode == "write-back":
                body = b"acknowledged while the remote hangs" * 1000
                started = time.monotonic()
                client.put_object(Bucket=bucket, Key="wb", Body=body)
                print(f"write-back PUT acknowledged in {time.monotonic() - started:.3f} s")
        finally:
            hung_remote.resume()
        if mode == "write-back":
            result = gw.flush(bucket)
            assert result["durable"], result
            got = hung_remote.client().get_object(Bucket=bucket, Key="wb")["Body"].read()
            assert hashlib.sha256(got).digest() == hashlib.sha256(body).digest()
        assert client.get_object(Bucket=bucket, Key="cold")["Body"].read() == b"cold bytes"
