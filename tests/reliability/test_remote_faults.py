"""The remote misbehaving, through a fault-injecting proxy in front of SeaweedFS: slow, answering
500 / 503 SlowDown, flapping, resetting connections mid-body (and after a write reached it),
sending GET bodies cut short or altered.

During each fault: write-back PUTs, cold GETs, HEADs and listings through a real ``ferry serve``.
Every answer is either right (the bytes verified by sha256) or a clear S3 error (503 with
Retry-After) or a dropped connection (never bytes a client could take for the object); never a
500. The metrics and the status page's stats count the remote's errors. After the fault: every
acknowledged PUT reaches the remote, and cold keys read right (no corrupt cache entry), twice.
"""

from __future__ import annotations

import random
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from tests.reliability.conftest import soak_rounds
from tests.reliability.fleet import START_TIMEOUT, admin
from tests.reliability.ledger import ABSENT, Ledger, sha
from tests.reliability.record import Record
from tests.support.counting_proxy import CountingProxy
from tests.support.gateway import ADMIN_TOKEN, GatewayProcess

FAULTS: dict[str, dict[str, Any]] = {
    "remote-slow": {"delay": 1.0},
    "remote-500": {"fail_with": 500, "fail_code": "InternalError"},
    "remote-503-slowdown": {"fail_with": 503, "fail_code": "SlowDown"},
    "remote-flapping": {"fail_with": 503, "fail_code": "ServiceUnavailable", "fail_ratio": 0.5},
    "remote-reset": {"reset_ratio": 0.5},
    "remote-truncated": {"truncate_ratio": 0.5},
    "remote-altered": {"corrupt_at": 1000},
}
# Faults whose window must move the status page's remote errors. Not remote-truncated: the quick
# profile may inject a single truncation, on a request retried before any reader saw it;
# tests/integration/test_remote_body_errors.py proves that a truncated body is counted.
ERRORS_COUNTED = {"remote-500", "remote-503-slowdown", "remote-flapping", "remote-reset"}
ENV = {"FERRY_REMOTE_READ_TIMEOUT": "4", "FERRY_REMOTE_CIRCUIT_COOLDOWN": "1", "FERRY_SWEEP_INTERVAL": "0.5",
       "FERRY_DESTAGE_BACKOFF_CAP": "2", "FERRY_DESTAGE_LEASE_SECONDS": "5"}


@pytest.fixture(scope="module")
def faulty(seaweed: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CountingProxy, GatewayProcess]]:
    with CountingProxy(seaweed) as proxy, \
            GatewayProcess(proxy, tmp_path_factory.mktemp("faulty"), env=ENV).start(timeout=START_TIMEOUT) as gw:
        yield proxy, gw


def remote_errors(gw: GatewayProcess) -> float:
    """What the status page shows as the remote's errors (server errors + network failures)."""
    return float(admin(gw, "GET", "/admin/stats")["remote"]["errors"])


def metric_sum(gw: GatewayProcess, name: str, label: str) -> float:
    req = urllib.request.Request(f"{gw.endpoint}/metrics", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        lines = r.read().decode().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(name + "{") and label in line)


class Probe:
    """Requests during a fault, judged as they come back."""

    def __init__(self, client: Any, bucket: str, ledger: Ledger) -> None:
        self.client, self.bucket, self.ledger = client, bucket, ledger
        self.rec = ledger.record

    def error(self, what: str, exc: Exception) -> None:
        if isinstance(exc, ClientError):
            meta = exc.response.get("ResponseMetadata", {})
            status, code = meta.get("HTTPStatusCode", 0), exc.response.get("Error", {}).get("Code", "")
            if status == 503 and meta.get("HTTPHeaders", {}).get("retry-after"):
                return  # the clear answer: come back later
            if what.startswith("HEAD") and status == 503:
                return  # HEAD has no body; its Retry-After is checked by the GETs
            self.rec.odd(f"{what}: {status} {code} (want 503 with Retry-After or success)")
        # else: a dropped connection, never a body taken for the object

    def put(self, key: str, body: bytes) -> None:
        op = self.ledger.begin(key, sha(body), len(body))
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body)
            op.outcome = "acked"
        except (ClientError, BotoCoreError, OSError) as exc:
            op.outcome = "refused" if isinstance(exc, ClientError) else "unknown"
            self.error(f"PUT {key}", exc)

    def get(self, key: str) -> None:
        try:
            data = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "NoSuchKey":
                self.ledger.read(key, ABSENT, 0, where="GET")
                return
            self.rec.add(operations=1)
            self.error(f"GET {key}", exc)
            return
        except (BotoCoreError, OSError):
            self.rec.add(operations=1)
            return
        self.ledger.read(key, sha(data), len(data), where="GET")

    def other(self, what: str, call: Callable[[], Any]) -> None:
        self.rec.add(operations=1)
        try:
            call()
        except (ClientError, BotoCoreError, OSError) as exc:
            self.error(what, exc)


@pytest.mark.parametrize("fault", list(FAULTS))
def test_remote_fault(faulty: tuple[CountingProxy, GatewayProcess], seaweed: Any,
                      recorder: Callable[[str, str], Record], fault: str) -> None:
    proxy, gw = faulty
    rec = recorder("faults", fault)
    ledger = Ledger(rec)
    rnd = random.Random()
    bucket = seaweed.create_bucket(f"rf-{uuid.uuid4().hex[:10]}")
    remote = seaweed.client()
    cold = {f"cold/{i}": rnd.randbytes(rnd.randint(300_000, 1_500_000)) for i in range(3)}
    for key, body in cold.items():
        remote.put_object(Bucket=bucket, Key=key, Body=body)
        ledger.seed(key, body)
    client = gw.client(connect_timeout=5, read_timeout=60)
    client.head_bucket(Bucket=bucket)  # the gateway trusts the bucket for a while: PUTs go on
    errors_before = remote_errors(gw)
    faults_before = proxy.faults
    for name, value in FAULTS[fault].items():
        setattr(proxy, name, value)
    probe = Probe(client, bucket, ledger)
    started = time.monotonic()
    try:
        for n in range(max(1, soak_rounds(1) // 10)):  # quick: once; soak: a tenth of the kill rounds
            for i in range(6):
                probe.put(f"w/{n}/{i}", rnd.randbytes(rnd.randint(1, 200_000)))
            for key in list(cold) * 2:
                probe.get(key)
            probe.other("HEAD cold/0", lambda: client.head_object(Bucket=bucket, Key="cold/0"))
            probe.other("LIST", lambda: client.list_objects_v2(Bucket=bucket))
    finally:
        proxy.clear_faults()
    during = time.monotonic() - started
    rec.add(faults_injected=proxy.faults - faults_before)
    errors_seen = remote_errors(gw) - errors_before
    if fault in ERRORS_COUNTED and errors_seen <= 0:
        rec.odd(f"{fault}: the status page's remote errors did not move")
    if fault in ERRORS_COUNTED and metric_sum(gw, "ferry_remote_requests_total", 'outcome="ok"') <= 0:
        rec.odd("ferry_remote_requests_total has no ok outcome at all")
    time.sleep(1.2)  # past the circuit's cooldown
    result = gw.flush(bucket, timeout=120)
    if not result.get("durable"):
        rec.odd(f"flush after {fault} did not complete: {result}")
    for key in ledger.keys:
        for where, c in (("remote", remote), ("gateway", client), ("gateway again", client)):
            try:
                data = c.get_object(Bucket=bucket, Key=key)["Body"].read()
                state, size = sha(data), len(data)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "NoSuchKey":
                    rec.odd(f"{where}: {key} after {fault}: {exc}")
                    continue
                state, size = ABSENT, 0
            ledger.verify_final(key, state, size, where=where)
    print(f"{fault}: {during:.1f}s under the fault, {proxy.faults - faults_before} injected, "
          f"remote errors on the status page +{errors_seen:.0f}; {rec.as_json()}")
    rec.assert_clean()

