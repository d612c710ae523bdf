"""Part copy claims over a real migrated catalog (SQLite and PostgreSQL): one sender per part
of a remote upload across processes; the destage waits for live claims and not for a claim
whose holder was killed (its lease runs out); a taken-over claim cannot be renewed."""

from __future__ import annotations

import threading
import time

from sqlalchemy import Engine

from app.adapters.catalog.uploads.part_claims import PartClaims
from app.services.multipart.part_copies import PartCopies


def test_one_sender_per_part_and_a_dead_holder_runs_out(engine: Engine) -> None:
    claims = PartClaims(engine, "n1")
    # Leases long enough for a loaded machine (a 0.5 s one ran out between two statements in CI).
    assert claims.claim_part("r1", 1, "a", 30.0)
    assert not claims.claim_part("r1", 1, "b", 30.0)  # held by a
    assert claims.claim_part("r1", 2, "b", 30.0)  # another part is free
    assert claims.live_parts("r1") == {1, 2}
    # a and b were killed: their last renewals were short, and nobody renews them again
    assert claims.renew_part("r1", 1, "a", 0.05) and claims.renew_part("r1", 2, "b", 0.05)
    time.sleep(0.3)
    assert claims.live_parts("r1") == set()
    assert claims.claim_part("r1", 1, "c", 30.0)  # taken over
    assert not claims.renew_part("r1", 1, "a", 30.0)  # the old holder cannot come back
    claims.release_part("r1", 1, "a")  # nor release the new holder's claim
    assert claims.live_parts("r1") == {1}
    claims.release_part("r1", 1, "c")
    assert claims.live_parts("r1") == set()
    claims.forget_parts("r1")
    assert claims.claim_part("r1", 2, "d", 30.0)


def test_the_destage_waits_for_a_copy_in_flight_elsewhere(engine: Engine) -> None:
    copier = PartCopies(PartClaims(engine, "n1"), lease_seconds=0.6)
    destage = PartCopies(PartClaims(engine, "n1"), lease_seconds=0.6)
    landed = threading.Event()

    def copy() -> None:
        with copier.sending("r2", 3) as lease:
            assert lease is not None
            time.sleep(1.5)  # longer than the lease: renewed while the body is sent
            assert not lease.expired()
            landed.set()

    thread = threading.Thread(target=copy)
    thread.start()
    time.sleep(0.2)
    with destage.sending("r2", 3) as lease:
        assert lease is None  # never two senders of one part
    assert destage.wait_others("r2", timeout=10)
    assert landed.is_set()
    thread.join()
    with destage.sending_after_others("r2", 3, timeout=5) as (lease, waited):
        assert lease is not None and not waited


def test_claims_of_dead_holders_are_forgotten_an_hour_after_they_ran_out(engine: Engine) -> None:
    """A holder killed mid-copy whose upload was then aborted leaves its row; the upload expiry
    sweep drops rows whose lease ended long ago, and never a live one."""
    claims = PartClaims(engine, "n1")
    assert claims.claim_part("R-dead", 1, "t1", -7200)  # ran out two hours ago
    assert claims.claim_part("R-live", 1, "t2", 30)
    assert claims.forget_run_out(time.time() - 3600) == 1
    assert not claims.claim_part("R-live", 1, "t3", 30)  # still held
    assert claims.claim_part("R-dead", 1, "t4", 30)  # its row is gone: a fresh insert
