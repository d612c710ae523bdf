"""The mount's metadata cache while the remote is out: the buckets seen last still resolve.

``Metadata.call`` is the filesystem's ``_call``, which answers every gateway error as the
``FUSEError`` the kernel gets, so the fallback must read that error's errno (stop 37's CI failure:
it caught only ``OSError`` and a bucket listed a moment before answered EAGAIN)."""

from __future__ import annotations

import errno
from typing import Any

import pytest

trio = pytest.importorskip("trio")

from app.mount import protocol as fuse  # noqa: E402
from app.mount.inodes import ROOT  # noqa: E402
from app.mount.metadata import Metadata  # noqa: E402


class _Gateway:
    def __init__(self) -> None:
        self.answers: list[Any] = [["a", "b"]]

    def buckets(self) -> list[str]:
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return list(answer)


async def _call(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except OSError as exc:
        raise fuse.FUSEError(exc.errno or errno.EIO) from exc


def _metadata(gateway: _Gateway) -> Metadata:
    return Metadata(gateway, _call, cache_seconds=0.0, only_bucket=None)  # type: ignore[arg-type]


@pytest.mark.parametrize("failure", [fuse.FUSEError(errno.EAGAIN), OSError(errno.EAGAIN, "SlowDown")])
def test_an_unavailable_remote_answers_the_buckets_seen_last(failure: BaseException) -> None:
    gateway = _Gateway()
    meta = _metadata(gateway)
    gateway.answers.append(failure)
    assert trio.run(meta.buckets) == ["a", "b"]
    assert trio.run(meta.buckets) == ["a", "b"]


def test_an_unavailable_remote_with_no_buckets_seen_fails() -> None:
    gateway = _Gateway()
    gateway.answers = [OSError(errno.EAGAIN, "SlowDown")]
    with pytest.raises(fuse.FUSEError) as caught:
        trio.run(_metadata(gateway).buckets)
    assert caught.value.errno == errno.EAGAIN


def test_a_denied_listing_is_not_answered_from_the_last_one() -> None:
    gateway = _Gateway()
    meta = _metadata(gateway)
    trio.run(meta.buckets)
    gateway.answers.append(OSError(errno.EACCES, "AccessDenied"))
    with pytest.raises(fuse.FUSEError) as caught:
        trio.run(meta.buckets)
    assert caught.value.errno == errno.EACCES
    assert ROOT in meta._listings  # kept for the next outage


def test_concurrent_identical_requests_share_one_answer() -> None:
    calls: list[str] = []

    async def slow_call(fn: Any, *args: Any) -> Any:
        calls.append(fn.__name__)
        await trio.sleep(0.05)
        return fn(*args)

    gateway = _Gateway()
    meta = Metadata(gateway, slow_call, cache_seconds=0.0, only_bucket=None)  # type: ignore[arg-type]
    answers: list[list[str]] = []

    async def many() -> None:
        async def one() -> None:
            answers.append(await meta.buckets())

        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(one)

    trio.run(many)
    assert calls == ["buckets"] and answers == [["a", "b"]] * 5


def test_a_shared_failure_reaches_every_waiter() -> None:
    async def failing(fn: Any, *args: Any) -> Any:
        await trio.sleep(0.05)
        raise fuse.FUSEError(errno.EACCES)

    meta = Metadata(_Gateway(), failing, cache_seconds=0.0, only_bucket=None)  # type: ignore[arg-type]
    failed: list[int] = []

    async def many() -> None:
        async def one() -> None:
            try:
                await meta.shared(meta.objects.buckets)
            except fuse.FUSEError as exc:
                failed.append(exc.errno)

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(one)

    trio.run(many)
    assert failed == [errno.EACCES] * 3
