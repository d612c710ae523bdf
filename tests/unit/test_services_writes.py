"""The write and destage services on a fake remote with a real SQLite journal: no SeaweedFS."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest
from sqlalchemy import select

from app.adapters.catalog.tables import ObjectVersion
from app.domain.errors import S3Error
from app.domain.ranges import WHOLE
from app.domain.states import VersionState
from app.services.bodies import ExpectedDigests
from tests.fakes.faulty import Fault, FaultyRemote
from tests.fakes.harness import body, build, read_all
from tests.support.journal_rows import append_delete


def test_put_read_your_writes_destage_durable(tmp_path: Path) -> None:
    remote = FaultyRemote()
    remote.create_bucket("b", None)
    svc = build(tmp_path, remote)
    data = b"hello ferry " * 1000

    async def scenario() -> None:
        etag = await svc.put("b", "k", data)
        assert etag == hashlib.md5(data).hexdigest()
        assert "k" not in remote.buckets["b"]  # acknowledged, not yet remote
        assert await svc.get("b", "k") == data  # read-your-writes from the journal's blob
        row = svc.journal.latest_dirty("b", "k")
        assert row is not None and row.state is VersionState.BUFFERED
        assert svc.destage_all() == ["durable"]
        assert remote.buckets["b"]["k"].data == data
        assert remote.buckets["b"]["k"].etag == etag
        assert svc.journal.latest_dirty("b", "k") is None
        assert not svc.blobs.path(row.blobs[0].blob).exists()  # dropped once durable
        assert await svc.get("b", "k") == data  # now from the remote

    asyncio.run(scenario())


def test_5xx_during_destage_retries_then_lands(tmp_path: Path) -> None:
    remote = FaultyRemote()
    remote.create_bucket("b", None)
    svc = build(tmp_path, remote)
    remote.inject("put_object", Fault("5xx"), Fault("5xx"))

    async def scenario() -> None:
        await svc.put("b", "k", b"v1")
        seq = svc.executor.queued[0]
        assert svc.destager.destage(seq) == "retry"
        assert svc.destager.destage(seq) == "retry"
        row = svc.journal.get(seq)
        assert row is not None and row.state is VersionState.BUFFERED and row.attempts == 2
        assert await svc.get("b", "k") == b"v1"  # still served locally meanwhile
        assert svc.destager.destage(seq) == "durable"
        assert remote.buckets["b"]["k"].data == b"v1"

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", ["reset", "truncate"])
def test_body_cut_during_destage_keeps_the_row(tmp_path: Path, kind: str) -> None:
    remote = FaultyRemote()
    remote.create_bucket("b", None)
    svc = build(tmp_path, remote)
    data = bytes(range(256)) * 400
    remote.inject("put_object", Fault(kind, keep=1000))

    async def scenario() -> None:
        await svc.put("b", "k", data)
        seq = svc.executor.queued[0]
        assert svc.destager.destage(seq) == "retry"
        assert "k" not in remote.buckets["b"]  # nothing partial landed
        row = svc.journal.get(seq)
        assert row is not None and row.state is VersionState.BUFFERED
        assert svc.blobs.path(row.blobs[0].blob).read_bytes() == data  # the bytes are intact
        assert svc.destager.destage(seq) == "durable"
        assert remote.buckets["b"]["k"].data == data

    asyncio.run(scenario())


def test_newer_write_supersedes_older_row(tmp_path: Path) -> None:
    remote = FaultyRemote()
    remote.create_bucket("b", None)
    svc = build(tmp_path, remote)

    async def scenario() -> None:
        await svc.put("b", "k", b"old")
        await svc.put("b", "k", b"new")
        assert await svc.get("b", "k") == b"new"
        assert svc.destage_all() == ["superseded", "durable"]
        assert remote.buckets["b"]["k"].data == b"new"

    asyncio.run(scenario())


def test_copy_source_changing_between_requests_is_refused(tmp_path: Path) -> None:
    remote = FaultyRemote()
    remote.create_bucket("b", None)
    svc = build(tmp_path, remote)

    async def scenario() -> None:
        await svc.put("b", "src", b"source bytes")
        svc.destage_all()
        remote.inject("head_object", Fault("etag"))  # HEAD sees one ETag, the GET another body
        with pytest.raises(S3Error) as err:
            await svc.gateway.copy_object("b", "dst", "b", "src", False, {}, {}, lambda meta: None)
        assert err.value.code == "InternalError"
        assert svc.journal.latest_dirty("b", "dst") is None  # no row was committed
        assert svc.executor.queued == []

    asyncio.run(scenario())


def test_multipart_complete_then_destage(tmp_path: Path) -> None:
    remote = FaultyRemote()
    remote.create_bucket("b", None)
    svc = build(tmp_path, remote)
    part1, part2 = b"a" * (5 * 1024 * 1024), b"tail"

    async def scenario() -> None:
        from app.services.bodies import ExpectedDigests

        gw = svc.gateway
        info = await gw.create_upload("b", "mp", None, {}, {}, None)
        r1 = await gw.upload_part("b", "mp", info.upload_id, 1, body(part1, 1024 * 1024),
                                  ExpectedDigests(declared_size=len(part1)))
        r2 = await gw.upload_part("b", "mp", info.upload_id, 2, body(part2), ExpectedDigests(declared_size=4))
        etag = await gw.complete_upload("b", "mp", info.upload_id, [(1, r1.etag, {}), (2, r2.etag, {})])
        assert etag.endswith("-2")
        assert await read_all(await gw.get_object("b", "mp")) == part1 + part2
        assert "mp" not in remote.buckets["b"]
        assert svc.destage_all() == ["durable"]
        assert remote.buckets["b"]["mp"].data == part1 + part2
        assert remote.buckets["b"]["mp"].etag == etag
        # A repeated Complete answers the committed result (a retry never turns into a failure).
        again = await gw.complete_upload("b", "mp", info.upload_id, [(1, r1.etag, {}), (2, r2.etag, {})])
        assert again == etag

    asyncio.run(scenario())


def test_write_through_goes_to_the_remote_unless_behind_a_backlog(tmp_path: Path) -> None:
    remote = FaultyRemote()
    remote.create_bucket("b", None)
    svc = build(tmp_path, remote, mode="write-through")

    async def scenario() -> None:
        await svc.put("b", "direct", b"now")
        assert remote.buckets["b"]["direct"].data == b"now"  # on the remote before the answer
        assert svc.journal.latest_dirty("b", "direct") is None
        # A backlog of the key (an older buffered row): the write is journaled behind it and
        # destaged inline, superseding the older row.
        older = append_delete(svc.journal, "b", "k", None, invalidate=False)
        await svc.put("b", "k", b"newer")
        assert remote.buckets["b"]["k"].data == b"newer"
        assert svc.journal.latest_dirty("b", "k") is None
        assert svc.destager.destage(older.seq) == "superseded"  # never lands over the newer one
        assert remote.buckets["b"]["k"].data == b"newer"
        await svc.gateway.delete_object("b", "direct")
        assert "direct" not in remote.buckets["b"]

    asyncio.run(scenario())


@pytest.mark.parametrize("inline_max", [0, 64 * 1024])
def test_small_bodies_go_into_the_row_only_when_inline_bodies_are_on(tmp_path: Path, inline_max: int) -> None:
    remote = FaultyRemote()
    remote.create_bucket("b", None)
    svc = build(tmp_path, remote, inline_max=inline_max)

    async def scenario() -> None:
        for key, data in (("empty", b""), ("small", b"s" * 4096), ("big", b"B" * (64 * 1024 + 1))):
            await svc.put("b", key, data)
            row = svc.journal.latest_dirty("b", key)
            assert row is not None
            inline = inline_max > 0 and key != "big"
            assert row.blobs[0].inline is inline, key
            assert svc.journal.inline_body(row.seq) == (data if inline else None), key
            assert await svc.get("b", key) == data
        files = [p for p in (tmp_path / "data" / "blobs").rglob("*") if p.is_file()]
        assert len(files) == (1 if inline_max else 3)
        assert svc.destage_all() == ["durable"] * 3
        for key in ("empty", "small", "big"):
            assert remote.buckets["b"][key].data == await svc.get("b", key)
        rows = svc.journal.versions("b")
        assert all(svc.journal.inline_body(r.seq) is None for r in rows)  # emptied by the durable move

    asyncio.run(scenario())


def test_a_reader_whose_inline_row_was_destaged_meanwhile_reads_the_remote(tmp_path: Path) -> None:
    remote = FaultyRemote()
    remote.create_bucket("b", None)
    svc = build(tmp_path, remote, inline_max=64 * 1024)

    async def scenario() -> None:
        await svc.put("b", "k", b"inline body")
        row = svc.journal.latest_dirty("b", "k")
        assert row is not None
        assert svc.destage_all() == ["durable"]
        # The row as the reader looked it up (dirty), its body since emptied: no bytes from it.
        assert await svc.gateway.reads._open_local(row, WHOLE) is None
        assert await svc.get("b", "k") == b"inline body"

    asyncio.run(scenario())


def test_journal_rows_carry_the_writers_tenant(tmp_path: Path) -> None:
    """object_versions.tenant_id is the tenant whose request made the row: a PUT, a copy, a
    delete and a completed multipart upload (the upload's creator)."""
    remote = FaultyRemote()
    remote.create_bucket("b", None)
    svc = build(tmp_path, remote)
    gw = svc.gateway

    async def scenario() -> None:
        await gw.put_object("b", "put", body(b"x"), {}, {}, ExpectedDigests(declared_size=1), tenant_id=7)
        await gw.copy_object("b", "copy", "b", "put", False, {}, {}, lambda _: None, tenant_id=8)
        await gw.delete_object("b", "put", tenant_id=9)
        await gw.delete_objects("b", ["copy"], tenant_id=10)
        upload = await gw.create_upload("b", "mpu", 11, {}, {}, None)
        part = await gw.upload_part("b", "mpu", upload.upload_id, 1, body(b"p"), ExpectedDigests(declared_size=1))
        await gw.complete_upload("b", "mpu", upload.upload_id, [(1, part.etag, {})])

    asyncio.run(scenario())
    with svc.journal.sessions() as s:
        rows = [(k, op, t) for k, op, t in s.execute(
            select(ObjectVersion.key, ObjectVersion.op, ObjectVersion.tenant_id).order_by(ObjectVersion.seq))]
    assert rows == [("put", "put", 7), ("copy", "put", 8), ("put", "delete", 9), ("copy", "delete", 10),
                    ("mpu", "put", 11)]
