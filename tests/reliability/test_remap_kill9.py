"""A bucket remapped from region A to region B under a mixed write load, with kill -9 of the
gateway and the worker around the remap (issue 26), in fleet mode.

Region A (behind a CountingProxy) answers 503 from before the load until the remap answers, and
is healthy from then on, so no write may become durable there (the retries queued during the
outage are sent at once after it, by processes that must already route to B). After the flush
barrier every acknowledged write must be on region B (the remote the bucket maps to), through
the gateway and there (a destage in flight at the remap may leave a stray copy on A). Quick: 2
kill rounds before and 2 after the remap.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.reliability.fleet import FleetNode, admin, check_leaks, verify_keys
from tests.reliability.ledger import Ledger
from tests.reliability.load import MixedLoad
from tests.reliability.record import Record
from tests.support.counting_proxy import CountingProxy
from tests.support.seaweed import SeaweedServer

VICTIMS = ["gateway", "worker", "gateway+worker"]


def _kill_rounds(node: FleetNode, rec: Record, rnd: random.Random, rounds: int) -> None:
    for _ in range(rounds):
        time.sleep(rnd.uniform(0.5, 2.0))
        for name in rnd.choice(VICTIMS).split("+"):
            node.kill(name)
            rec.add(faults_injected=1)
        node.ensure_running()


@pytest.mark.fleet
def test_remap_under_load_with_kill9_loses_nothing_and_ends_on_the_new_remote(
        fleet_node: Callable[..., FleetNode], recorder: Callable[[str, str], Record], seaweed: Any) -> None:
    rec = recorder("faults", "remap-kill9")
    ledger = Ledger(rec)
    rnd = random.Random()
    bucket = f"rmp-{uuid.uuid4().hex[:10]}"
    seaweed.client().create_bucket(Bucket=bucket)
    with CountingProxy(seaweed) as region_a, SeaweedServer() as region_b:
        region_b.client().create_bucket(Bucket=bucket)
        node = fleet_node(env={"FERRY_REMOTE_REFRESH_SECONDS": "0.5", "FERRY_DESTAGE_MAX_ATTEMPTS": "1000"})
        ids = {}
        for name, remote in (("a", region_a), ("b", region_b)):
            ids[name] = admin(node.gw, "POST", "/admin/remotes", {
                "name": f"{name}-{bucket}", "endpoint": remote.endpoint, "access_key": remote.access_key,
                "secret_key": remote.secret_key})["id"]
        admin(node.gw, "PUT", f"/admin/bucket-mappings/{bucket}", {"remote_id": ids["a"], "remote_bucket": bucket})
        # A write the journal knows the bucket by (so writes go on while A fails), acknowledged first.
        node.client().put_object(Bucket=bucket, Key="first", Body=b"acknowledged before the outage")
        ledger.seed("first", b"acknowledged before the outage")
        region_a.fail_with, region_a.fail_code = 503, "SlowDown"
        load = MixedLoad(node.client, bucket, ledger, prefix="w/", cold_keys=[], threads=4).start()
        try:
            _kill_rounds(node, rec, rnd, 2)
            admin(node.gw, "PUT", f"/admin/bucket-mappings/{bucket}", {"remote_id": ids["b"],
                                                                        "remote_bucket": bucket})
            region_a.clear_faults()  # A is back the moment the remap answers: nothing may land there now
            _kill_rounds(node, rec, rnd, 2)
        finally:
            load.stop()
        region_a.clear_faults()
        node.ensure_running()
        result = node.gw.flush(bucket, timeout=300)
        if not result.get("durable"):
            rec.odd(f"flush did not complete: {result}")
        keys = load.all_keys() + ["first"]
        verify_keys(ledger, node.client(), region_b.client(), bucket, keys)
        # A destage whose request was on its way to A at the remap may leave a copy there (its
        # durable commit refused it and it was sent to B): allowed, and shown, not lost.
        on_a = [o["Key"] for o in seaweed.client().list_objects_v2(Bucket=bucket).get("Contents", [])]
        print(f"stray copies on the old region A: {len(on_a)} {on_a[:5]}")
        check_leaks(rec, node, bucket)
    print(rec.as_json())
    rec.assert_clean()
