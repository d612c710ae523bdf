"""The read and listing services on a fake remote with a real SQLite journal: no SeaweedFS."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import time
from pathlib import Path
from typing import Any

import pytest

from app.domain.conditions import Conditions
from app.domain.errors import S3Error
from app.domain.ranges import RangeRequest
from tests.fakes.faulty import Fault, FaultyRemote
from tests.fakes.harness import build, read_all


def test_truncated_remote_body_fails_the_read_and_leaves_nothing_behind(tmp_path: Path) -> None:
    remote = FaultyRemote()
    remote.create_bucket("b", None)
    svc = build(tmp_path, remote)
    data = bytes(range(256)) * 4096  # 1 MiB

    async def scenario() -> None:
        await svc.put("b", "k", data)
        svc.destage_all()
        for kind in ("truncate", "reset"):
            remote.inject("get_object", Fault(kind, keep=1000))
            read = await svc.gateway.get_object("b", "k")
            with pytest.raises(S3Error) as err:
                await read_all(read)
            assert err.value.code == "ServiceUnavailable"  # the response ends, it does not hang
        assert await svc.get("b", "k") == data  # the next read is whole
        assert remote.buckets["b"]["k"].data == data

    asyncio.run(scenario())


def test_slow_remote_still_answers(tmp_path: Path) -> None:
    remote = FaultyRemote()
    remote.create_bucket("b", None)
    remote.put_object("b", "k", io.BytesIO(b"x"), 1, base64.b64encode(hashlib.md5(b"x").digest()).decode(),
                      {}, {}, {})
    svc = build(tmp_path, remote)
    remote.inject("get_object", Fault("slow", seconds=0.2))
    started = time.monotonic()
    assert asyncio.run(svc.get("b", "k")) == b"x"
    assert time.monotonic() - started >= 0.2  # the fault was met, and waited out


def test_range_is_a_value_on_local_and_remote_reads(tmp_path: Path) -> None:
    remote = FaultyRemote()
    remote.create_bucket("b", None)
    svc = build(tmp_path, remote)
    data = b"0123456789"

    async def scenario() -> None:
        await svc.put("b", "k", data)
        for where in ("journal", "remote"):
            read = await svc.gateway.get_object("b", "k", RangeRequest.from_header("bytes=2-4"))
            assert read.byte_range is not None and read.byte_range.content_range == "bytes 2-4/10", where
            assert await read_all(read) == b"234", where
            suffix = await svc.gateway.get_object("b", "k", RangeRequest.from_header("bytes=-3"))
            assert await read_all(suffix) == b"789", where
            ignored = await svc.gateway.get_object("b", "k", RangeRequest.from_header("bytes=5-1"))
            assert ignored.byte_range is None and await read_all(ignored) == data, where
            svc.destage_all()

    asyncio.run(scenario())


def test_conditions_judged_from_the_journal_before_any_remote_request(tmp_path: Path) -> None:
    remote = FaultyRemote()
    remote.create_bucket("b", None)
    svc = build(tmp_path, remote)

    async def scenario() -> None:
        etag = await svc.put("b", "k", b"buffered")
        remote.calls.clear()
        with pytest.raises(S3Error) as err:
            await svc.gateway.get_object("b", "k", conditions=Conditions(if_none_match=f'"{etag}"'))
        assert err.value.code == "NotModified"
        with pytest.raises(S3Error) as err:
            await svc.gateway.get_object("b", "k", conditions=Conditions(if_match='"nope"'))
        assert err.value.code == "PreconditionFailed"
        assert remote.calls == []
        ok = await svc.gateway.get_object("b", "k", conditions=Conditions(if_match=f'"{etag}"'))
        assert await read_all(ok) == b"buffered"

    asyncio.run(scenario())


def test_delete_and_listing_merge(tmp_path: Path) -> None:
    remote = FaultyRemote()
    remote.create_bucket("b", None)
    svc = build(tmp_path, remote)

    async def names(prefix: str = "", delimiter: str | None = None) -> tuple[list[str], list[str]]:
        page = await svc.gateway.list_objects("b", prefix, delimiter, None, 1000)
        return [c.key for c in page.contents], page.common_prefixes

    async def scenario() -> None:
        for key in ("a", "b", "c", "dir/x"):
            await svc.put("b", key, key.encode())
        svc.destage_all()
        await svc.gateway.delete_object("b", "b")
        await svc.put("b", "d", b"d")
        await svc.gateway.delete_object("b", "dir/x")
        assert "b" in remote.buckets["b"]  # the delete is buffered
        assert await names() == (["a", "c", "d"], [])
        assert await names("", "/") == (["a", "c", "d"], [])  # dir/ held only the deleted dir/x
        with pytest.raises(S3Error) as err:
            await svc.gateway.head_object("b", "b")
        assert err.value.code == "NoSuchKey"
        assert svc.destage_all() == ["durable", "durable", "durable"]
        assert sorted(remote.buckets["b"]) == ["a", "c", "d"]
        assert await names() == (["a", "c", "d"], [])

    asyncio.run(scenario())


def test_listing_pages_merge_buffered_rows(tmp_path: Path) -> None:
    remote = FaultyRemote()
    remote.create_bucket("b", None)
    svc = build(tmp_path, remote)

    async def scenario() -> None:
        for key in ("k1", "k3", "k5"):
            await svc.put("b", key, b"r")
        svc.destage_all()
        for key in ("k2", "k4"):
            await svc.put("b", key, b"l")
        seen: list[str] = []
        marker = None
        while True:
            page = await svc.gateway.list_objects("b", "", None, marker, 2)
            seen += [c.key for c in page.contents]
            if not page.is_truncated:
                break
            marker = page.next_marker
        assert seen == ["k1", "k2", "k3", "k4", "k5"]

    asyncio.run(scenario())


def test_buffered_delete_of_last_key_hides_its_common_prefix(tmp_path: Path) -> None:
    remote = FaultyRemote()
    remote.create_bucket("b", None)
    svc = build(tmp_path, remote)

    async def scenario() -> list[str]:
        await svc.put("b", "dir/x", b"x")
        svc.destage_all()
        await svc.gateway.delete_object("b", "dir/x")
        page = await svc.gateway.list_objects("b", "", "/", None, 1000)
        return page.common_prefixes

    assert asyncio.run(scenario()) == []


def test_a_prefix_with_anything_left_keeps_listing(tmp_path: Path) -> None:
    remote = FaultyRemote()
    remote.create_bucket("b", None)
    svc = build(tmp_path, remote)

    async def prefixes() -> list[str]:
        return (await svc.gateway.list_objects("b", "", "/", None, 1000)).common_prefixes

    async def scenario() -> None:
        for key in ("two/x", "two/y", "one/x"):
            await svc.put("b", key, b"x")
        svc.destage_all()
        await svc.gateway.delete_object("b", "two/x")
        await svc.gateway.delete_object("b", "one/x")
        assert await prefixes() == ["two/"]  # two/y is left on the remote; one/ is empty
        await svc.put("b", "one/z", b"z")  # a buffered put brings one/ back
        assert await prefixes() == ["one/", "two/"]
        svc.destage_all()
        assert await prefixes() == ["one/", "two/"]

    asyncio.run(scenario())


def _all_pages(svc: Any, delimiter: str | None, max_keys: int) -> list[tuple[list[str], list[str], bool]]:
    async def pages() -> list[tuple[list[str], list[str], bool]]:
        out = []
        marker = None
        for _ in range(50):
            page = await svc.gateway.list_objects("b", "", delimiter, marker, max_keys)
            out.append(([c.key for c in page.contents], page.common_prefixes, page.is_truncated))
            if not page.is_truncated:
                return out
            marker = page.next_marker
        raise AssertionError("more than 50 pages")

    return asyncio.run(pages())


def test_the_last_page_of_a_backlog_is_not_truncated(tmp_path: Path) -> None:
    """MaxKeys=1, delimiter '/', buffered rows under the last common prefix: S3 says
    IsTruncated=false on the page that ends the listing, not on an empty page after it."""
    remote = FaultyRemote()
    remote.create_bucket("b", None)
    svc = build(tmp_path, remote)

    async def scenario() -> None:
        for key in ("a", "d/1", "d/2", "d/3"):
            await svc.put("b", key, b"x")

    asyncio.run(scenario())
    assert _all_pages(svc, "/", 1) == [(["a"], [], True), ([], ["d/"], False)]


def test_a_truncated_page_is_full_when_buffered_deletes_thin_the_remote_page(tmp_path: Path) -> None:
    remote = FaultyRemote()
    remote.create_bucket("b", None)
    svc = build(tmp_path, remote)

    async def scenario() -> None:
        for key in [f"k{i}" for i in range(8)]:
            await svc.put("b", key, b"x")
        svc.destage_all()
        for key in ("k1", "k2", "k4", "k5"):
            await svc.gateway.delete_object("b", key)

    asyncio.run(scenario())
    pages = _all_pages(svc, None, 2)
    assert pages == [(["k0", "k3"], [], True), (["k6", "k7"], [], False)]


class _PrefixAtMarkerRemote(FaultyRemote):
    """Lists a common prefix that the start-after marker lies in, or equals (SeaweedFS's walk with
    a delimiter other than '/' did; S3 itself may): a key after the marker rolls it up again."""

    def list_objects(self, bucket: str, prefix: str, delimiter: str | None, start_after: str | None,
                     max_keys: int) -> Any:
        page = super().list_objects(bucket, prefix, delimiter, None, 100_000)
        names = sorted([(c.key, c) for c in page.contents] + [(p, None) for p in page.common_prefixes],
                       key=lambda n: n[0])
        names = [n for n in names if not start_after or n[0] > start_after
                 or (n[1] is None and start_after.startswith(n[0]) and any(
                     k > start_after and k.startswith(n[0]) for k in self.buckets[bucket]))]
        chosen, truncated = names[:max_keys], len(names) > max_keys
        from app.domain.objects import ListPage
        return ListPage([c for _, c in chosen if c is not None], [n for n, c in chosen if c is None], truncated,
                        chosen[-1][0] if truncated and chosen else None)


def test_a_prefix_emptied_by_buffered_deletes_ends_no_listing_early(tmp_path: Path) -> None:
    """max-keys 1, delimiter '-': the merge's limit is a remote common prefix that buffered deletes
    emptied; reading on from it rolled it up again, round after round, until the rounds ran out
    and the page said IsTruncated=false with keys still to come (found by
    tests/integration/test_listing_compare.py against SeaweedFS)."""
    remote = _PrefixAtMarkerRemote()
    remote.create_bucket("b", None)
    svc = build(tmp_path, remote)

    async def scenario() -> None:
        for key in ("a", "d/<-0/x", "d/<-1", "z"):
            await svc.put("b", key, b"x")
        svc.destage_all()
        for key in ("d/<-0/x", "d/<-1"):
            await svc.gateway.delete_object("b", key)

    asyncio.run(scenario())
    assert _all_pages(svc, "-", 1) == [(["a"], [], True), (["z"], [], False)]
    assert _all_pages(svc, "-", 1000) == [(["a", "z"], [], False)]
