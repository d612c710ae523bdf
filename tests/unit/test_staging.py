"""Staging as a task function: ``run_staging_job`` runs a job from its row to its end (the same
entry point both executors call), a duplicate message runs nothing, a cancel through the row stops
it, and the recovery chore fails a running job whose runner stopped writing its heartbeat. Real
SQLite job rows, the in-memory remote, a warm function that records what it was asked."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from sqlalchemy import update

from app.adapters.catalog.control.staging import StagingRepo
from app.adapters.catalog.engine import make_engine
from app.adapters.catalog.migrate import upgrade
from app.adapters.catalog.tables import StagingJob
from app.domain.errors import S3Error
from app.services.control.chores import Intervals, run_chore
from app.services.control.staging import EmbeddedStagingExecutor, StagingParts, StagingService, run_staging_job
from tests.fakes.remote import InMemoryRemote, Stored
from tests.unit.test_chores import _parts as chore_parts


def _parts(tmp_path: Path, remote: InMemoryRemote, warmed: list[str], delay: float = 0.0) -> StagingParts:
    url = f"sqlite:///{tmp_path / 'ferry.db'}"
    upgrade(url)

    async def warm(bucket: str, key: str, tenant_id: int | None) -> int:
        await asyncio.sleep(delay)
        if key.endswith("bad"):
            raise S3Error("InternalError")
        warmed.append(key)
        return 0 if key.endswith("fresh") else len(remote.buckets[bucket][key].data)

    return StagingParts(StagingRepo(make_engine(url)), remote, warm, "n-1", concurrency=2,
                        persist_interval=0.01, page_size=2)


def _remote(keys: dict[str, bytes]) -> InMemoryRemote:
    remote = InMemoryRemote()
    remote.create_bucket("bkt", None)
    for key, data in keys.items():
        remote.buckets["bkt"][key] = Stored(data, "e", {}, {}, {})
    return remote


def test_a_job_runs_from_its_row_to_done_with_its_progress(tmp_path: Path) -> None:
    remote = _remote({"p/a": b"x" * 10, "p/b": b"y" * 20, "p/c-fresh": b"z" * 5, "q/other": b"w"})
    warmed: list[str] = []
    parts = _parts(tmp_path, remote, warmed)
    job = parts.repo.create("bkt", "p/", "n-1", None)
    assert asyncio.run(run_staging_job(job.id, parts)) == "done"
    assert sorted(warmed) == ["p/a", "p/b", "p/c-fresh"]
    row = parts.repo.get(job.id)
    assert (row.state, row.objects_total, row.objects_done, row.objects_skipped) == ("done", 3, 3, 1)
    assert (row.bytes_total, row.bytes_done, row.listing_done) == (35, 35, True)
    assert asyncio.run(run_staging_job(job.id, parts)) == "skipped"  # a duplicate message
    assert len(warmed) == 3


def test_an_object_that_cannot_be_warmed_fails_the_job_and_says_which(tmp_path: Path) -> None:
    parts = _parts(tmp_path, _remote({"a": b"1", "bad": b"2"}), [])
    job = parts.repo.create("bkt", "", "n-1", None)
    assert asyncio.run(run_staging_job(job.id, parts)) == "failed"
    row = parts.repo.get(job.id)
    assert row.state == "failed" and row.error is not None and "bad: InternalError" in row.error


def test_a_cancel_through_the_row_stops_the_running_job(tmp_path: Path) -> None:
    parts = _parts(tmp_path, _remote({f"k{i:03}": b"x" for i in range(200)}), [], delay=0.01)
    service = StagingService(parts, EmbeddedStagingExecutor(parts))

    async def scenario() -> str:
        job = await service.start("bkt", "", None)
        await asyncio.sleep(0.2)
        await service.cancel(job.id)
        await service.shutdown()
        return job.id

    row = parts.repo.get(asyncio.run(scenario()))
    assert row.state == "cancelled" and row.objects_done < 200


def test_the_recovery_chore_fails_a_running_job_whose_heartbeat_stopped(tmp_path: Path) -> None:
    parts = _parts(tmp_path, _remote({"a": b"1"}), [])
    job = parts.repo.create("bkt", "", "n-1", None)
    assert parts.repo.mark_running(job.id)  # then its process is killed: no more progress writes
    other = parts.repo.create("bkt", "", "n-2", None)
    assert parts.repo.mark_running(other.id)
    chores = chore_parts(tmp_path / "chores", InMemoryRemote(), intervals=Intervals())
    chores.staging = parts
    assert run_chore("staging-recovery", chores) == 0  # the heartbeat is fresh
    with parts.repo.sessions.begin() as s:  # a minute without a progress write
        s.execute(update(StagingJob).values(heartbeat_at=time.time() - 60))
    assert run_chore("staging-recovery", chores) == 1
    row = parts.repo.get(job.id)
    assert row.state == "failed" and "stopped" in (row.error or "")
    assert parts.repo.get(other.id).state == "running"  # another node's job is its own recovery's
