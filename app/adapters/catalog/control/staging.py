"""Staging job rows: the durable record of a warm-up, which any process can read or cancel.

The runner (app/services/control/staging.py) writes progress with a guarded update (``state = running``),
so a cancel made through any process is seen by the runner at its next progress write. Each write
is also the runner's heartbeat: a running job whose heartbeat stopped lost its process.
"""

from __future__ import annotations

import secrets
import time

from sqlalchemy import Engine, func, select, update

from app.adapters.catalog.engine import Sessions, affected
from app.adapters.catalog.errors import Conflict, NotFound
from app.adapters.catalog.tables import StagingJob
from app.domain.staging import ACTIVE, JobInfo, Progress


def _info(r: StagingJob) -> JobInfo:
    return JobInfo(r.id, r.bucket, r.prefix, r.node_id, r.tenant_id, r.state, r.objects_total, r.objects_done,
                   r.objects_skipped, r.bytes_total, r.bytes_done, r.listing_done, r.error, r.created_at,
                   r.started_at, r.finished_at)


class StagingRepo:
    def __init__(self, engine: Engine) -> None:
        self.sessions = Sessions(engine)

    def create(self, bucket: str, prefix: str, node_id: str, tenant_id: int | None) -> JobInfo:
        with self.sessions.begin() as s:
            row = StagingJob(id=secrets.token_hex(8), bucket=bucket, prefix=prefix, node_id=node_id,
                             tenant_id=tenant_id, state="queued", objects_total=0, objects_done=0,
                             objects_skipped=0, bytes_total=0, bytes_done=0, listing_done=False,
                             created_at=time.time())
            s.add(row)
            s.flush()
            return _info(row)

    def get(self, job_id: str) -> JobInfo:
        with self.sessions() as s:
            row = s.get(StagingJob, job_id)
            if row is None:
                raise NotFound(f"no staging job {job_id!r}")
            return _info(row)

    def list(self, state: str | None = None, limit: int = 100) -> list[JobInfo]:
        stmt = select(StagingJob).order_by(StagingJob.created_at.desc()).limit(limit)
        if state:
            stmt = stmt.where(StagingJob.state == state)
        with self.sessions() as s:
            return [_info(r) for r in s.scalars(stmt)]

    def mark_running(self, job_id: str) -> bool:
        with self.sessions.begin() as s:
            result = s.execute(update(StagingJob).where(StagingJob.id == job_id, StagingJob.state == "queued")
                               .values(state="running", started_at=time.time(), heartbeat_at=time.time()))
            return affected(result) == 1

    def save_progress(self, job_id: str, p: Progress) -> bool:
        """Write progress; False when the job is no longer running (cancelled elsewhere)."""
        with self.sessions.begin() as s:
            result = s.execute(update(StagingJob).where(StagingJob.id == job_id, StagingJob.state == "running")
                               .values(objects_total=p.objects_total, objects_done=p.objects_done,
                                       objects_skipped=p.objects_skipped, bytes_total=p.bytes_total,
                                       bytes_done=p.bytes_done, listing_done=p.listing_done,
                                       heartbeat_at=time.time()))
            return affected(result) == 1

    def finish(self, job_id: str, state: str, p: Progress, error: str | None = None) -> bool:
        with self.sessions.begin() as s:
            result = s.execute(update(StagingJob).where(StagingJob.id == job_id, StagingJob.state.in_(ACTIVE))
                               .values(state=state, error=error[:2000] if error else None, finished_at=time.time(),
                                       objects_total=p.objects_total, objects_done=p.objects_done,
                                       objects_skipped=p.objects_skipped, bytes_total=p.bytes_total,
                                       bytes_done=p.bytes_done, listing_done=p.listing_done))
            return affected(result) == 1

    def cancel(self, job_id: str) -> JobInfo:
        with self.sessions.begin() as s:
            # One guarded update: read first, a finish committed in between would be overwritten.
            moved = affected(s.execute(update(StagingJob).where(StagingJob.id == job_id, StagingJob.state.in_(ACTIVE))
                                       .values(state="cancelled", finished_at=time.time())
                                       .execution_options(synchronize_session=False)))
            row = s.get(StagingJob, job_id)
            if row is None:
                raise NotFound(f"no staging job {job_id!r}")
            if moved != 1:
                raise Conflict(f"staging job {job_id} is already {row.state}")
            return _info(row)

    def abandon_active(self, node_id: str, created_before: float) -> int:
        """Jobs of this node that a previous process left running: they cannot resume by themselves."""
        with self.sessions.begin() as s:
            result = s.execute(update(StagingJob).where(StagingJob.node_id == node_id, StagingJob.state.in_(ACTIVE),
                                                        StagingJob.created_at < created_before)
                               .values(state="failed", error="interrupted: the gateway restarted; start it again",
                                       finished_at=time.time()))
            return affected(result)

    def fail_stale(self, node_id: str, heartbeat_before: float) -> int:
        """Running jobs of this node whose runner stopped writing (killed): they cannot resume."""
        beat = func.coalesce(StagingJob.heartbeat_at, StagingJob.started_at, StagingJob.created_at)
        with self.sessions.begin() as s:
            result = s.execute(update(StagingJob).where(StagingJob.node_id == node_id, StagingJob.state == "running",
                                                        beat < heartbeat_before)
                               .values(state="failed", error="interrupted: the process running it stopped; "
                                                             "start it again", finished_at=time.time()))
            return affected(result)
