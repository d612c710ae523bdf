"""Staging jobs: warm a prefix into the read cache ahead of a job, watch it, cancel it."""

from __future__ import annotations

import time
from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Path, Query

from app.admin.auth import Authenticator, Principal
from app.admin.common import BucketName, Model, Name, Out, Prefix, run
from app.bootstrap import Container
from app.domain.staging import JobInfo

JobIdPath = Annotated[str, Path(max_length=32, pattern=r"^[A-Za-z0-9]+$")]
JobState = Literal["queued", "running", "done", "failed", "cancelled"]
Limit = Annotated[int, Query(ge=1, le=1000)]


class StageIn(Model):
    bucket: BucketName
    prefix: Prefix = ""
    tenant: Name | None = None


class JobOut(Out):
    id: str
    bucket: str
    prefix: str
    node_id: str
    tenant_id: int | None
    state: str
    objects_total: int
    objects_done: int
    objects_skipped: int
    bytes_total: int
    bytes_done: int
    listing_done: bool
    error: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    elapsed_seconds: float | None
    rate_bytes_per_second: float | None
    rate_objects_per_second: float | None
    eta_seconds: float | None
    percent: float | None


def job_out(job: JobInfo, now: float | None = None) -> JobOut:
    """The row plus what an operator wants to read off it: rate, ETA, percent."""
    now = now or time.time()
    elapsed = rate_b = rate_o = eta = percent = None
    if job.started_at:
        elapsed = max(0.0, (job.finished_at or now) - job.started_at)
        if elapsed > 0:
            rate_b, rate_o = job.bytes_done / elapsed, job.objects_done / elapsed
    if job.listing_done:
        if job.bytes_total:
            percent = round(100.0 * job.bytes_done / job.bytes_total, 2)
        elif job.objects_total:
            percent = round(100.0 * job.objects_done / job.objects_total, 2)
        else:
            percent = 100.0
        if job.state == "running" and rate_b:
            eta = round(max(0, job.bytes_total - job.bytes_done) / rate_b, 1)
        elif job.state == "running" and rate_o:
            eta = round(max(0, job.objects_total - job.objects_done) / rate_o, 1)
    return JobOut(**{k: getattr(job, k) for k in JobInfo.__dataclass_fields__},
                  elapsed_seconds=round(elapsed, 3) if elapsed is not None else None,
                  rate_bytes_per_second=round(rate_b, 1) if rate_b is not None else None,
                  rate_objects_per_second=round(rate_o, 2) if rate_o is not None else None,
                  eta_seconds=eta, percent=percent)


def router(container: Container, auth: Authenticator) -> APIRouter:
    repo = container.admin.staging
    tenants = container.admin.tenants
    staging = container.staging
    api = APIRouter(prefix="/admin/staging", tags=["staging"])

    @api.post("", response_model=JobOut, status_code=201)
    async def create_job(body: StageIn, principal: Principal = auth.tenant_write()) -> JobOut:
        """Start warming bucket/prefix on this node; progress is in ``GET /admin/staging/{id}``.
        A token bound to a tenant stages that tenant's buckets, counted against its quota; without
        a tenant (an admin token, no ``tenant``), the cached data is the bucket owner's."""
        await auth.check_bucket(principal, body.bucket)
        if principal.tenant_id is not None:
            if body.tenant not in (None, principal.tenant):
                raise HTTPException(403, f"token {principal.name!r} is bound to tenant {principal.tenant!r}")
            tenant_id: int | None = principal.tenant_id
        elif body.tenant:
            tenant_id = await run(tenants.id_of, body.tenant)
        else:  # an admin's job warms for the bucket's owner: its data is charged (and listed) there
            tenant_id, _ = await run(auth.owners.owner, body.bucket)
        job = await staging.start(body.bucket, body.prefix, tenant_id)
        return job_out(job)

    @api.get("", response_model=list[JobOut])
    async def list_jobs(state: JobState | None = None, limit: Limit = 50,
                        principal: Principal = auth.tenant_read()) -> list[JobOut]:
        """Jobs, newest first (a token bound to a tenant: those on its buckets)."""
        now = time.time()
        jobs = await run(repo.list, state, limit)
        mine = await auth.visible(principal, sorted({j.bucket for j in jobs}))
        return [job_out(j, now) for j in jobs if j.bucket in mine]

    async def job_of(job_id: str, principal: Principal) -> JobInfo:
        job = await run(repo.get, job_id)  # NotFound: 404 "no staging job 'id'"
        await auth.check_found(principal, job.bucket, f"no staging job {job_id!r}")
        return job

    @api.get("/{job_id}", response_model=JobOut)
    async def get_job(job_id: JobIdPath, principal: Principal = auth.tenant_read()) -> JobOut:
        return job_out(await job_of(job_id, principal))

    @api.post("/{job_id}/cancel", response_model=JobOut)
    async def cancel_job(job_id: JobIdPath, principal: Principal = auth.tenant_write()) -> JobOut:
        """Stop a queued or running job (409 when it has finished); what it warmed stays cached."""
        await job_of(job_id, principal)
        job = await staging.cancel(job_id)
        return job_out(job)

    return api
