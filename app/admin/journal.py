"""The write journal as operators see it: what is not on the remote yet, why, and the buttons
to push it (flush) or retry a failed write."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Annotated, Any, Literal, get_args

from fastapi import APIRouter, Path, Query

from app.adapters.catalog.journal.queries import DIRTY_VALUES, JournalEntry, age_seconds
from app.admin.auth import Authenticator, Principal
from app.admin.common import Out, Prefix, Text, run
from app.bootstrap import Container
from app.domain.states import API_WORDS, VersionState

# The API's words (see ``domain.states.API_WORDS``, the one mapping); spelled out for the schema.
StateName = Literal["pending", "inflight", "failed"]
SeqPath = Annotated[int, Path(ge=1, le=2**63 - 1)]
ObjectsBucket = Annotated[Text, Query()]
BucketQuery = Annotated[Text | None, Query()]  # any name: the journal may hold a bucket of any spelling
PrefixQuery = Annotated[Prefix, Query()]
Limit = Annotated[int, Query(ge=1, le=1000)]
ObjectsLimit = Annotated[int, Query(ge=1, le=10000)]
SeqQuery = Annotated[int, Query(ge=0, le=2**63 - 1)]
OptSeqQuery = Annotated[int | None, Query(ge=0, le=2**63 - 1)]
FlushTimeout = Annotated[float, Query(gt=0, le=86400)]

_DOMAIN_STATE = {word: state.value for state, word in API_WORDS.items()}
_API_WORD = {state.value: word for state, word in API_WORDS.items()}
assert set(get_args(StateName)) == set(_DOMAIN_STATE), "StateName must list domain.states.API_WORDS"


class EntryOut(Out):
    seq: int
    bucket: str
    key: str
    op: str
    state: str
    status: str  # pending | inflight | failed | durable | superseded
    size: int
    node_id: str
    attempts: int
    last_error: str | None
    created_at: datetime
    age_seconds: float | None
    next_attempt_in_seconds: float | None


class EntriesOut(Out):
    entries: list[EntryOut]


class SummaryOut(Out):
    counts: dict[str, int]
    pending: int
    inflight: int
    failed: int
    outstanding: int
    dirty_objects: int
    dirty_bytes: int
    oldest_dirty_seq: int | None
    oldest_dirty_age_seconds: float | None
    max_seq: int


class FlushOut(Out):
    upto_seq: int
    pending: int
    failed: int
    durable: bool
    waited_seconds: float


def _entry(e: JournalEntry, now: float) -> EntryOut:
    next_in = max(0.0, round(e.next_attempt_at - now, 3)) if e.state == "buffered" else None
    return EntryOut(seq=e.seq, bucket=e.bucket, key=e.key, op=e.op, state=e.state,
                    status=_API_WORD.get(e.state, e.state), size=e.size, node_id=e.node_id,
                    attempts=e.attempts, last_error=e.last_error, created_at=e.created_at,
                    age_seconds=age_seconds(e.created_at, now), next_attempt_in_seconds=next_in)


def router(container: Container, auth: Authenticator) -> APIRouter:
    queries = container.admin.journal
    durability = container.admin.durability
    node_id = container.settings.node_id
    api = APIRouter(prefix="/admin", tags=["journal"])

    @api.get("/journal", response_model=EntriesOut)
    async def entries(state: StateName | None = None, bucket: BucketQuery = None, prefix: PrefixQuery = "",
                      limit: Limit = 100, after_seq: SeqQuery = 0,
                      principal: Principal = auth.tenant_read()) -> EntriesOut:
        """Writes not yet on the remote, oldest first: ``pending`` (buffered, waiting or backing
        off), ``inflight`` (being uploaded), ``failed`` (refused by the remote; retry after fixing).
        A token bound to a tenant must name one of its buckets."""
        await auth.check_bucket(principal, bucket)
        states = [_DOMAIN_STATE[state]] if state else list(DIRTY_VALUES)
        rows = await run(queries.entries, states, bucket, prefix, limit, after_seq)
        now = time.time()
        return EntriesOut(entries=[_entry(e, now) for e in rows])

    @api.get("/journal/summary", response_model=SummaryOut)
    async def summary(bucket: BucketQuery = None, prefix: PrefixQuery = "", upto_seq: OptSeqQuery = None,
                      principal: Principal = auth.tenant_read()) -> SummaryOut:
        """Counts by state and the age of the oldest write not yet on the remote (alert on it).

        With ``upto_seq`` (from a flush) only rows up to it count: how far a flush has come.
        """
        await auth.check_bucket(principal, bucket)
        s = await run(queries.summary, bucket, prefix, upto_seq)
        max_seq = await run(container.journal.max_seq)
        pending, inflight, failed = (s.counts[state.value] for state in
                                     (VersionState.BUFFERED, VersionState.DESTAGING, VersionState.FAILED))
        return SummaryOut(counts=s.counts, pending=pending, inflight=inflight, failed=failed,
                          outstanding=pending + inflight, dirty_objects=s.dirty_objects, dirty_bytes=s.dirty_bytes,
                          oldest_dirty_seq=s.oldest_dirty_seq,
                          oldest_dirty_age_seconds=age_seconds(s.oldest_dirty_created_at), max_seq=max_seq)

    @api.post("/journal/{seq}/retry", response_model=EntryOut, dependencies=auth.write())
    async def retry(seq: SeqPath) -> EntryOut:
        """A ``failed`` write goes back to pending and is destaged now (409 if it is not failed)."""
        entry = await run(queries.retry, seq)
        if entry.node_id == node_id:  # its bytes are on this node; another node's sweeper takes its own
            container.executor.submit(seq)
        return _entry(entry, time.time())

    @api.post("/flush", response_model=FlushOut)
    async def flush(bucket: BucketQuery = None, prefix: PrefixQuery = "", wait: bool = True,
                    timeout: FlushTimeout = 3600, principal: Principal = auth.tenant_write()) -> FlushOut:
        """Destage everything written under bucket/prefix before this call; wait for the remote."""
        await auth.check_bucket(principal, bucket)
        result = await durability.flush(bucket, prefix, wait=wait, timeout=timeout)
        return FlushOut(upto_seq=result.upto_seq, pending=result.pending, failed=result.failed,
                        durable=result.durable, waited_seconds=round(result.waited_seconds, 3))

    @api.get("/objects")
    async def object_states(bucket: ObjectsBucket, prefix: PrefixQuery = "", limit: ObjectsLimit = 1000,
                            principal: Principal = auth.tenant_read()) -> dict[str, Any]:
        """Durability state of each journaled version under a prefix, newest first."""
        await auth.check_bucket(principal, bucket)
        rows = await durability.states(bucket, prefix, limit)
        return {"versions": [
            {"seq": r.seq, "key": r.key, "op": r.op, "state": r.state.value, "size": r.size, "etag": r.etag,
             "attempts": r.attempts, "last_error": r.last_error, "remote_etag": r.remote_etag,
             "created_at": r.created_at.isoformat(),
             "durable_at": r.durable_at.isoformat() if r.durable_at else None}
            for r in rows]}

    return api
