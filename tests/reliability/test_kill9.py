"""kill -9 of the gateway, the Celery worker and beat at random moments under a mixed load, in
fleet mode (PostgreSQL catalog, Redis broker, real processes), for N rounds.

After the last round and the flush barrier: every key holds its last acknowledged state (or a
later unacknowledged one), through the gateway and on the remote; no read during the load
returned bytes the key never had; no blob or cache block file is left that no row accounts for.

Quick: 3 rounds. Soak: ``FERRY_RELIABILITY_ROUNDS`` rounds and at least
``FERRY_RELIABILITY_SECONDS`` seconds (scripts/reliability.sh --soak).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.reliability.conftest import soak_rounds, soak_seconds
from tests.reliability.fleet import FleetNode, check_leaks, verify_keys
from tests.reliability.ledger import Ledger
from tests.reliability.load import MixedLoad
from tests.reliability.record import Record

MiB = 1024 * 1024
VICTIMS = ["gateway", "gateway", "worker", "worker", "beat", "gateway+worker"]


@pytest.mark.fleet
def test_kill9_under_mixed_load(fleet_node: Callable[..., FleetNode], recorder: Callable[[str, str], Record],
                                seaweed: Any) -> None:
    rec = recorder("faults", "kill9")
    ledger = Ledger(rec)
    rnd = random.Random()
    bucket = seaweed.create_bucket(f"k9-{uuid.uuid4().hex[:10]}")
    remote = seaweed.client(max_pool_connections=16)
    cold = [f"cold/{i}" for i in range(6)]
    for key in cold:
        body = rnd.randbytes(rnd.randint(256 * 1024, 2 * MiB))
        remote.put_object(Bucket=bucket, Key=key, Body=body)
        ledger.seed(key, body)
    node = fleet_node()
    node.client().head_bucket(Bucket=bucket)
    load = MixedLoad(node.client, bucket, ledger, prefix="w/", cold_keys=cold, threads=4).start()
    rounds, seconds = soak_rounds(3), soak_seconds()
    started = time.monotonic()
    done = 0
    try:
        while done < rounds or time.monotonic() - started < seconds:
            time.sleep(rnd.uniform(0.5, 3.0))
            victim = rnd.choice(VICTIMS)
            for name in victim.split("+"):
                node.kill(name)
                rec.add(faults_injected=1)
            time.sleep(rnd.uniform(0.0, 1.0))
            node.ensure_running()
            done += 1
            print(f"round {done}: killed {victim} at {time.monotonic() - started:.1f}s; "
                  f"{rec.operations} operations so far")
    finally:
        load.stop()
    node.ensure_running()
    result = node.gw.flush(bucket, timeout=300)
    if not result.get("durable"):
        rec.odd(f"flush did not complete: {result}")
    verify_keys(ledger, node.client(), remote, bucket, load.all_keys() + cold)
    leaks = check_leaks(rec, node, bucket)
    print(f"{done} rounds in {time.monotonic() - started:.0f}s; {rec.as_json()}; leaks: {leaks}")
    assert done >= rounds
    rec.assert_clean()
