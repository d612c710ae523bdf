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
    # A 1.2 s lease renewed every 0.4 s: under two CPU hogs and the suite a 0.6 s one once ran out
    # (one renewal late by more than 0.4 s), which is the fence working, not this test's subject.
    copier = PartCopies(PartClaims(engine, "n1"), lease_seconds=1.2)
    destage = PartCopies(PartClaims(engine, "n1"), lease_seconds=1.2)
    landed = threading.Event()

    def copy() -> None:
        with copier.sending("r2", 3) as lease:
            assert lease is not None
            time.sleep(2.0)  # longer than the lease: renewed while the body is sent
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


class _Uploads:
    """The catalog side a part copy reads: the recorded remote upload, until it is aborted."""

    def __init__(self) -> None:
        self.remote_id: str | None = "R-abort"

    def open_remote_upload(self, upload_id: str, token: str, lease_seconds: float,
                           grace: float = 0.0) -> tuple[str, str | None]:
        return ("have", self.remote_id) if self.remote_id else ("gone", None)

    def remote_upload(self, upload_id: str) -> str | None:
        return self.remote_id


class _Remote:
    def __init__(self) -> None:
        self.parts: list[int] = []

    def upload_part(self, bucket: str, key: str, remote_id: str, number: int, body: object, size: int,
                    md5: str, checksums: object) -> None:
        self.parts.append(number)


class _Blobs:
    def __init__(self, path: object) -> None:
        self._path = path

    def path(self, blob: str) -> object:
        return self._path


def _ahead(engine: Engine, uploads: _Uploads, remote: _Remote, blob: object) -> object:
    from app.services.multipart.parts_ahead import PartsAhead

    return PartsAhead(uploads, _Blobs(blob), remote, PartCopies(PartClaims(engine, "n1")),  # type: ignore[arg-type]
                      None, None, enabled=True, takeover_grace=0.0)  # type: ignore[arg-type]


def test_a_part_copy_that_claims_after_the_abort_sends_nothing(engine: Engine, tmp_path: object) -> None:
    """The abort removes the upload, then waits for the claims it sees; a copier that claims its
    part after that sees the upload gone and sends nothing (a part landing after the remote
    abort is kept by SeaweedFS under the bucket: a deleted bucket came back in CI)."""
    from datetime import UTC, datetime

    from app.domain.objects import PartInfo

    blob = tmp_path / "blob"  # type: ignore[operator]
    blob.write_bytes(b"p" * 10)
    uploads, remote = _Uploads(), _Remote()
    ahead = _ahead(engine, uploads, remote, blob)
    part = PartInfo(1, 10, "0" * 32, datetime.now(UTC))

    class AbortOnClaim(PartClaims):
        def claim_part(self, remote_id: str, number: int, token: str, lease_seconds: float) -> bool:
            won = super().claim_part(remote_id, number, token, lease_seconds)
            uploads.remote_id = None  # the abort's catalog commit lands right after the claim
            return won

    ahead.part_copies = PartCopies(AbortOnClaim(engine, "n1"))  # type: ignore[attr-defined]
    ahead._copy_sync("b", "k", "U1", part, "blob")  # type: ignore[attr-defined]
    assert remote.parts == []
    uploads.remote_id = "R-abort"
    ahead.part_copies = PartCopies(PartClaims(engine, "n1"))  # type: ignore[attr-defined]
    ahead._copy_sync("b", "k", "U1", part, "blob")  # type: ignore[attr-defined]
    assert remote.parts == [1]  # not aborted: sent


def test_the_abort_waits_for_a_part_being_sent(engine: Engine) -> None:
    copier = PartCopies(PartClaims(engine, "n1"), lease_seconds=5)
    aborter = PartCopies(PartClaims(engine, "n2"), lease_seconds=5)
    claimed, landed = threading.Event(), threading.Event()

    def copy() -> None:
        with copier.sending("R-wait", 1) as lease:
            assert lease is not None
            claimed.set()
            time.sleep(1.0)
            landed.set()

    thread = threading.Thread(target=copy)
    thread.start()
    assert claimed.wait(10)
    aborter.settle_before_abort("R-wait", timeout=30)
    assert landed.is_set()
    thread.join()
