"""Eager part copies give way to acknowledgements (app/services/multipart/copy_admission.py): they wait
while bodies are being received, start once ingest pauses, and none is ever left behind."""

from __future__ import annotations

import asyncio

from app.services.destage.background import AckGate
from app.services.multipart.copy_admission import CopyAdmission

MiB = 1024 * 1024


async def _copies(gate: CopyAdmission, n: int, size: int, log: list[str], release: asyncio.Event
                  ) -> list[asyncio.Task[None]]:
    async def copy(i: int) -> None:
        async with gate.slot(size):
            log.append(f"start {i}")
            await release.wait()
            log.append(f"done {i}")

    tasks = [asyncio.create_task(copy(i)) for i in range(n)]
    await asyncio.sleep(0.01)
    return tasks


def test_no_copy_starts_while_a_body_is_arriving_and_all_start_when_ingest_pauses() -> None:
    acks = AckGate(max_wait=0)
    gate = CopyAdmission(acks, idle_limit=4, busy_limit=0, backlog_bytes=1024 * MiB)
    log: list[str] = []

    async def run() -> None:
        release = asyncio.Event()
        with acks.held():  # a part's body is being received
            tasks = await _copies(gate, 6, 8 * MiB, log, release)
            assert log == [] and gate.waiting == 6
        await asyncio.sleep(0.01)  # the acknowledgement ended: idle, full concurrency
        assert sorted(log) == [f"start {i}" for i in range(4)] and gate.running == 4
        release.set()
        await asyncio.gather(*tasks)

    asyncio.run(run())
    assert sorted(x for x in log if x.startswith("done")) == [f"done {i}" for i in range(6)]  # none left uncopied
    assert gate.running == 0 and gate.waiting == 0


def test_busy_limit_copies_run_during_acknowledgements_in_arrival_order() -> None:
    acks = AckGate(max_wait=0)
    gate = CopyAdmission(acks, idle_limit=8, busy_limit=1, backlog_bytes=1024 * MiB)
    log: list[str] = []

    async def run() -> None:
        release = asyncio.Event()
        with acks.held():
            tasks = await _copies(gate, 3, 8 * MiB, log, release)
            assert log == ["start 0"] and gate.running == 1
            release.set()
            await asyncio.sleep(0.01)
            assert log[:4] == ["start 0", "done 0", "start 1", "done 1"]  # one at a time
        await asyncio.gather(*tasks)

    asyncio.run(run())
    assert [x for x in log if x.startswith("done")] == ["done 0", "done 1", "done 2"]


def test_a_backlog_past_the_bound_runs_at_full_concurrency_during_acknowledgements() -> None:
    acks = AckGate(max_wait=0)
    gate = CopyAdmission(acks, idle_limit=4, busy_limit=0, backlog_bytes=16 * MiB)
    log: list[str] = []

    async def run() -> None:
        release = asyncio.Event()
        with acks.held():
            tasks = await _copies(gate, 5, 8 * MiB, log, release)
            # 40 MiB waiting > 16 MiB: copies start until what still waits is within the bound
            assert gate.running == 3 and gate.waiting == 2
            release.set()
            await asyncio.sleep(0.01)
            assert gate.waiting == 2  # within the bound: they wait for the acknowledgement to end
        await asyncio.gather(*tasks)

    asyncio.run(run())
    assert len([x for x in log if x.startswith("done")]) == 5


def test_a_copy_cancelled_while_waiting_or_running_frees_its_place() -> None:
    acks = AckGate(max_wait=0)
    gate = CopyAdmission(acks, idle_limit=1, busy_limit=1, backlog_bytes=1024 * MiB)
    log: list[str] = []

    async def run() -> None:
        release = asyncio.Event()
        tasks = await _copies(gate, 3, MiB, log, release)
        assert gate.running == 1 and gate.waiting == 2
        tasks[1].cancel()  # waiting
        tasks[0].cancel()  # running
        await asyncio.sleep(0.01)
        assert gate.running == 1 and log[-1] == "start 2"
        release.set()
        await tasks[2]

    asyncio.run(run())
    assert gate.running == 0 and gate.waiting == 0


def test_a_copy_held_back_by_a_stream_of_acknowledgements_starts_after_max_hold() -> None:
    acks = AckGate(max_wait=0)
    gate = CopyAdmission(acks, idle_limit=2, busy_limit=0, backlog_bytes=1024 * MiB, max_hold=0.05)
    log: list[str] = []

    async def run() -> None:
        release = asyncio.Event()
        release.set()
        with acks.held():  # acknowledgements never pause
            tasks = await _copies(gate, 1, MiB, log, release)
            assert log == []
            await asyncio.wait_for(asyncio.gather(*tasks), 1.0)

    asyncio.run(run())
    assert log == ["start 0", "done 0"]
