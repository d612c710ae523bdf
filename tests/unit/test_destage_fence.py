"""Every request that writes a key at the remote starts under a lease the catalog just confirmed
(renewed before it; for the first request after a fresh claim, the claim): when the renewal fails
(the catalog restarting) or finds the row taken over, nothing is sent, so a worker whose lease
lapsed never writes alongside the one that claimed the row after it (issue 15: after a
PostgreSQL restart the remote saw two writes of one key at once). And a request already in
flight when the lease lapses is bounded by it (the body stops, no retry starts), while another worker
takes the row only a takeover grace after the lease, once nothing of the old holder can be in flight."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from sqlalchemy.exc import OperationalError

from app.domain import fencing
from app.domain.fencing import Lease, LeaseLost
from app.domain.states import VersionState
from app.services.destage.destager import Destager
from tests.fakes.faulty import FaultyRemote
from tests.fakes.harness import build
from tests.fakes.remote import InMemoryRemote


@pytest.mark.parametrize("renewal", ["catalog-down", "taken-over"])
@pytest.mark.parametrize("op", ["put", "delete"])
def test_no_remote_write_without_a_renewed_lease(tmp_path: Path, renewal: str, op: str) -> None:
    remote = FaultyRemote()
    remote.create_bucket("b", None)
    svc = build(tmp_path, remote)

    async def write() -> int:
        if op == "put":
            await svc.put("b", "k", b"v1")
        else:  # on a key the remote has (a delete of an absent key sends nothing)
            await svc.put("b", "k", b"v0")
            assert svc.destage_all() == ["durable"]
            await svc.gateway.delete_object("b", "k")
        return svc.executor.queued[-1]

    seq = asyncio.run(write())
    # Half a term passes between the claim and the request (a worker that stalled, a busy
    # machine): the fence must ask the catalog before anything is sent.
    clock = Clock()
    svc.destager.clock = clock.monotonic
    claim = svc.journal.claim

    def late_claim(seq: int, seconds: float) -> Any:
        row = claim(seq, seconds)
        clock.t += seconds / 2
        return row

    svc.journal.claim = late_claim  # type: ignore[method-assign]
    real = svc.journal.renew

    def renew(row: object, seconds: float) -> bool:
        if renewal == "catalog-down":
            raise OperationalError("UPDATE object_versions", {}, Exception("server closed the connection"))
        return False

    svc.journal.renew = renew  # type: ignore[method-assign]
    before = list(remote.calls)
    assert svc.destager.destage(seq) == "retry"  # an outage: it does not use up the attempts
    assert not [c for c in remote.calls[len(before):] if c.startswith(("PUT", "DELETE"))], remote.calls
    row = svc.journal.get(seq)
    assert row is not None and row.state is VersionState.BUFFERED
    svc.journal.renew = real  # type: ignore[method-assign]
    assert svc.destager.destage(seq) == "durable"


def test_a_fresh_claim_sends_without_asking_the_catalog_and_a_late_one_renews(tmp_path: Path) -> None:
    """A small new key destaged right after its claim costs no renewal (the claim's commit just
    confirmed the lease); one whose lease is a third used renews before its first request. Every
    later request renews (tests/integration/test_write_order.py: after a refusal and a HEAD)."""
    remote = InMemoryRemote()
    remote.create_bucket("b", None)
    svc = build(tmp_path, remote)
    renewals: list[int] = []
    renew = svc.journal.renew

    def counted(row: Any, seconds: float) -> bool:
        renewals.append(row.seq)
        return renew(row, seconds)

    svc.journal.renew = counted  # type: ignore[method-assign]
    asyncio.run(svc.put("b", "fresh", b"v1"))
    assert svc.destage_all() == ["durable"] and renewals == []
    clock = Clock()
    svc.destager.clock = clock.monotonic
    claim = svc.journal.claim

    def late_claim(seq: int, seconds: float) -> Any:
        row = claim(seq, seconds)
        clock.t += seconds * (1 - fencing.FRESH) + 0.1
        return row

    svc.journal.claim = late_claim  # type: ignore[method-assign]
    asyncio.run(svc.put("b", "late", b"v1"))
    assert svc.destage_all() == ["durable"] and len(renewals) == 1


# ---- issue 15, the request already in flight: a lease watchdog and a takeover grace ------------
# Fake time throughout (no sleeps): one clock drives the holder's lease (monotonic) and the
# catalog's leases (wall). The remote below reads bodies in chunks and answers after a
# processing tail, advancing the clock as it goes; on every tick a second worker (B) tries to
# take the row, as another Celery worker of the node would, and destages it if it can. The
# remote counts the writes of each key in flight: two at once is the bug.

LEASE = 30.0


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def wall(self) -> float:
        return 1_000_000.0 + self.t


class OverlapRemote(InMemoryRemote):
    """Counts writes of a key in flight at once; time passes while a body is read and while
    the remote works on the answer (the read timeout bounds that in production)."""

    def __init__(self, clock: Clock, *, chunk: int, tail_seconds: float) -> None:
        super().__init__()
        self.clock, self.chunk, self.tail_seconds = clock, chunk, tail_seconds
        self.in_flight: dict[str, int] = {}
        self.most_at_once = 0
        self.tick: Callable[[], None] = lambda: None

    def put_object(self, bucket: str, key: str, body: BinaryIO, size: int, *args: Any, **kwargs: Any) -> str:
        self.in_flight[key] = self.in_flight.get(key, 0) + 1
        self.most_at_once = max(self.most_at_once, self.in_flight[key])
        try:
            data = b""
            while len(data) < size:  # a chunk a second
                data += body.read(min(self.chunk, size - len(data)))
                self._advance()
            for _ in range(int(self.tail_seconds)):  # the answer takes this long
                self._advance()
            return super().put_object(bucket, key, io.BytesIO(data), size, *args, **kwargs)
        finally:
            self.in_flight[key] -= 1

    def _advance(self) -> None:
        self.clock.t += 1.0
        self.tick()


class Fleet:
    """Worker A (holder) and worker B (taker) of one node, over one catalog whose renewals fail
    while it is down (a PostgreSQL restart)."""

    def __init__(self, tmp_path: Path, *, body: bytes, tail_seconds: float, grace: float,
                 down: tuple[float, float]) -> None:
        self.clock = Clock()
        self.remote = OverlapRemote(self.clock, chunk=1024, tail_seconds=tail_seconds)
        self.remote.create_bucket("b", None)
        self.svc = build(tmp_path, self.remote)
        journal = self.svc.journal
        journal.clock, journal.takeover_grace = self.clock.wall, grace
        renew = journal.renew

        def flaky_renew(row: object, seconds: float) -> bool:
            if down[0] <= self.clock.t < down[1]:
                raise OperationalError("UPDATE object_versions", {}, Exception("the database system is starting up"))
            return renew(row, seconds)  # type: ignore[arg-type]

        journal.renew = flaky_renew  # type: ignore[method-assign]
        self.a, self.b = (Destager(journal, self.svc.blobs, self.remote, lease_seconds=LEASE, backoff_base=0.0,
                                   backoff_cap=0.0, clock=self.clock.monotonic) for _ in range(2))
        self.seq = asyncio.run(self._write(body))
        self.b_outcomes: list[str] = []
        self.remote.tick = self.try_b

    async def _write(self, body: bytes) -> int:
        await self.svc.put("b", "k", body)
        return self.svc.executor.queued[-1]

    def try_b(self) -> None:
        """The other worker: the node's sweep frees expired leases, then B claims what it can."""
        if self.b_outcomes and self.b_outcomes[-1] == "durable":
            return
        self.remote.tick = lambda: None  # B's own requests do not recurse into B
        try:
            self.svc.journal.release_expired_leases()
            row = self.svc.journal.get(self.seq)
            if row is not None and row.state is VersionState.BUFFERED:
                self.b_outcomes.append(self.b.destage(self.seq))
        finally:
            self.remote.tick = self.try_b

    def run_b_until_durable(self, seconds: float) -> None:
        for _ in range(int(seconds)):
            self.clock.t += 1.0
            self.try_b()


@pytest.mark.parametrize("watchdog", [True, False], ids=["lease-watchdog", "control-no-watchdog"])
def test_a_body_in_flight_stops_when_the_lease_lapses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      watchdog: bool) -> None:
    """A 64 s upload whose lease (30 s) lapses while the catalog is down (renewals fail from
    t=1 to t=40): the body stops being read at the lease's end, so the remote never commits
    it, and B takes the row after the outage. Without the watchdog (the previous fix) A writes
    on, and B, once the grace has passed, writes the same key beside it."""
    if not watchdog:
        monkeypatch.setattr(Lease, "bound", lambda self, body: body)
    fleet = Fleet(tmp_path, body=bytes(range(256)) * 256, tail_seconds=1, grace=25.0, down=(1.0, 40.0))
    outcome_a = fleet.a.destage(fleet.seq)
    if not watchdog:
        assert fleet.remote.most_at_once == 2  # the harness sees the bug it is meant to catch
        return
    assert outcome_a == "retry" and fleet.clock.t <= LEASE + 1
    assert fleet.remote.most_at_once == 1 and "k" not in fleet.remote.buckets["b"]
    fleet.remote.chunk = 1 << 20  # B's upload, within its lease (the renewer runs in real time)
    fleet.run_b_until_durable(60)
    assert fleet.b_outcomes[-1] == "durable" and fleet.remote.most_at_once == 1
    row = fleet.svc.journal.get(fleet.seq)
    assert row is not None and row.state is VersionState.DURABLE


@pytest.mark.parametrize("grace", [25.0, 0.0], ids=["grace-covers-the-tail", "control-no-grace"])
def test_no_takeover_while_an_answer_may_still_come(tmp_path: Path, grace: float) -> None:
    """A small body sent at once, whose answer comes 20 s later, while the lease (30 s) lapses
    in the catalog outage (t=1..35): with a grace longer than that tail, B cannot take the row
    before A's request ended, and A's write is the one kept. Without it B writes beside A."""
    fleet = Fleet(tmp_path, body=b"v1" * 512, tail_seconds=LEASE + 14, grace=grace, down=(1.0, 35.0))
    outcome_a = fleet.a.destage(fleet.seq)
    if grace == 0.0:
        assert fleet.remote.most_at_once == 2 and outcome_a == "lost"
        return
    assert fleet.remote.most_at_once == 1 and fleet.b_outcomes == []
    assert outcome_a == "durable"


def test_an_expired_lease_is_taken_over_only_after_the_grace(tmp_path: Path) -> None:
    """A dead holder's row (no renewals at all) is released, and another row of the key may be
    claimed, once ``lease_until + grace`` has passed, not before: kill -9 takeover still works."""
    clock = Clock()
    remote = InMemoryRemote()
    remote.create_bucket("b", None)
    svc = build(tmp_path, remote)
    svc.journal.clock, svc.journal.takeover_grace = clock.wall, 10.0

    async def write(body: bytes) -> int:
        await svc.put("b", "k", body)
        return svc.executor.queued[-1]

    first = asyncio.run(write(b"v1"))
    assert svc.journal.claim(first, 3.0) is not None  # the holder then dies
    second = asyncio.run(write(b"v2"))
    clock.t = 3.0 + 9.5  # lease over, grace not
    assert svc.journal.release_expired_leases() == 0
    assert svc.journal.claim(second, 3.0) is None
    clock.t = 3.0 + 10.5
    assert svc.journal.claim(second, 3.0) is not None
    assert svc.journal.release_expired_leases() == 1
    row = svc.journal.get(first)
    assert row is not None and row.state is VersionState.BUFFERED


def test_the_lease_bounds_bodies_and_new_requests() -> None:
    """The watchdog's own rules: renewals move the end forward (a long upload goes on while
    they succeed), a refused renewal ends the lease at once, and inside ``guard`` no request
    (the remote client's before-send hook) starts after the end."""
    clock = Clock()
    answers = [True, False]
    lease = Lease(lambda: answers.pop(0), 10.0, clock=clock.monotonic)
    body = lease.bound(io.BytesIO(b"x" * 10))
    clock.t = 9.0
    assert body.read(1) == b"x" and lease.renew()  # until 19 now
    clock.t = 18.0
    assert body.read(1) == b"x"
    with lease.guard():
        fencing.check()
    assert not lease.renew() and lease.expired()  # taken over: nothing more
    with pytest.raises(LeaseLost):
        body.read(1)
    with lease.guard(), pytest.raises(LeaseLost):
        fencing.check()
    fencing.check()  # outside a destage's requests: nothing to fence
