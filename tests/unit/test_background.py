"""Background work gives way to acknowledgements (app/services/destage/background.py), and the journal's
bookkeeping commits go through their own (relaxed) engine."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest

from app.adapters.catalog.engine import make_engine
from app.adapters.catalog.journal.journal import BlobRef, Journal
from app.adapters.catalog.migrate import upgrade
from app.domain.states import VersionState
from app.domain.versions import VersionDraft
from app.services.destage.background import AckGate, BackgroundThreads
from tests.support.journal_rows import append_put


def test_quiet_returns_at_once_when_nothing_is_acknowledged() -> None:
    gate = AckGate(max_wait=3600)
    asyncio.run(gate.quiet())  # would hang for an hour if it waited
    assert gate.inflight == 0


def test_quiet_waits_for_the_acknowledgement_in_flight() -> None:
    gate = AckGate(max_wait=3600, poll=0.001)
    order: list[str] = []

    async def ack() -> None:
        with gate.held():
            assert gate.inflight == 1
            await asyncio.sleep(0.01)
            order.append("acked")

    async def background() -> None:
        await asyncio.sleep(0)  # let the acknowledgement start first
        await gate.quiet()
        order.append("destage")

    async def both() -> None:
        await asyncio.gather(ack(), background())

    asyncio.run(both())
    assert order == ["acked", "destage"]
    assert gate.inflight == 0


def test_quiet_never_starves_background_work() -> None:
    gate = AckGate(max_wait=0.01, poll=0.001)

    async def forever_busy() -> None:
        with gate.held():
            await gate.quiet()  # an acknowledgement that never ends: quiet still returns

    asyncio.run(forever_busy())
    assert gate.inflight == 0


def test_settle_waits_until_no_acknowledgement_ended_lately() -> None:
    gate = AckGate(max_wait=0.05, poll=0.001)

    async def go() -> float:
        with gate.held():
            pass  # an acknowledgement that just ended
        t0 = time.monotonic()
        await gate.quiet(max_wait=5, settle=0.05)
        return time.monotonic() - t0

    waited = asyncio.run(go())
    assert 0.04 <= waited < 1.0


def test_settle_is_bounded_from_when_the_work_was_queued() -> None:
    gate = AckGate(max_wait=0.05, poll=0.001)

    async def go() -> tuple[float, float]:
        with gate.held():
            pass
        t0 = time.monotonic()
        await gate.quiet(since=t0 - 10, max_wait=1, settle=3600)  # queued long ago: goes at once
        old = time.monotonic() - t0
        t0 = time.monotonic()
        await gate.quiet(since=t0, max_wait=0.05, settle=3600)  # never settles: the bound ends it
        return old, time.monotonic() - t0

    old, bounded = asyncio.run(go())
    assert old < 0.02
    assert 0.04 <= bounded < 1.0


def test_background_threads_run_at_lower_priority_and_pass_errors_on() -> None:
    threads = BackgroundThreads(2, nice=5)
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    def niceness() -> tuple[int, str]:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id()), threading.current_thread().name

    def boom() -> None:
        raise ValueError("boom")

    async def go() -> tuple[int, str]:
        got = await threads.run(niceness)
        with pytest.raises(ValueError, match="boom"):
            await threads.run(boom)
        return got

    try:
        nice, name = asyncio.run(go())
    finally:
        threads.shutdown()
    assert name.startswith("ferry-bg")
    assert nice == min(19, mine + 5)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine  # the caller's is untouched


def test_bookkeeping_commits_use_their_own_engine(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ferry.db'}"
    upgrade(url)
    engine, relaxed = make_engine(url), make_engine(url, synchronous="NORMAL")
    try:
        journal = Journal(engine, "node-a", bookkeeping=relaxed)
        row = append_put(journal, VersionDraft("b", "k", 1, "e", [BlobRef("0" * 32, 1, "e")], {}, {}, {}, None))
        claimed = journal.claim(row.seq, 60.0)
        assert claimed is not None and claimed.state is VersionState.DESTAGING
        assert journal.renew(claimed, 60.0)
        assert journal.mark_retry(claimed, "boom", 0.0, failed=False)
        claimed = journal.claim(row.seq, 60.0)
        assert claimed is not None
        assert journal.mark_durable(claimed, "e", None)
        assert journal.get(row.seq).state is VersionState.DURABLE  # type: ignore[union-attr]
        with relaxed.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL: the writes' rows
    finally:
        engine.dispose()
        relaxed.dispose()
