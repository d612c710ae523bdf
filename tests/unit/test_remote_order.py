"""The byte-order walk over a remote that lists as SeaweedFS does (app/adapters/remote/order.py),
on a fake that lists each level by name, a directory by its name (tests/integration/
test_listing_order.py and test_listing_compare.py hold it against SeaweedFS itself)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from app.adapters.remote.order import ByteOrderWalk
from app.domain.objects import ListPage, ObjectSummary


def seaweed_like(keys: list[str]) -> Any:
    """A remote that lists as SeaweedFS does: a level's entries by name, a directory by its name
    (so before the names that extend it with a character below '/'), after the start name."""
    when = datetime(2026, 1, 1, tzinfo=UTC)

    def call(prefix: str, delimiter: str | None, start_after: str | None, max_keys: int) -> ListPage:
        under = sorted(k for k in keys if k.startswith(prefix))
        if delimiter is None:  # only asked whether anything is under a prefix
            return ListPage([ObjectSummary(k, 1, "e", when) for k in under[:max_keys]], [], len(under) > max_keys)
        start = (start_after or prefix)[len(prefix):]
        level = sorted({(k[len(prefix):].split("/")[0], "/" in k[len(prefix):]) for k in under})
        level = [(name, is_dir) for name, is_dir in level if not start_after or name > start]
        chosen = level[:max_keys]
        return ListPage([ObjectSummary(prefix + n, 1, "e", when) for n, d in chosen if not d],
                        [prefix + n + "/" for n, d in chosen if d], len(level) > max_keys)

    return call


def test_the_walk_lists_no_prefix_the_marker_lies_in() -> None:
    """A delimiter other than '/': the walk rolls keys up itself, and a common prefix that the
    start-after marker lies in (or equals) is no entry after the marker."""
    walk = ByteOrderWalk(seaweed_like(["a", "d/<-0/x", "d/<-1", "d!", "e-f", "z"]))

    def listed(after: str | None) -> list[str]:
        page = walk.page("", "-", after, 10)
        return sorted([c.key for c in page.contents] + page.common_prefixes)

    assert listed(None) == ["a", "d!", "d/<-", "e-", "z"]
    assert listed("d/<-") == ["e-", "z"]
    assert listed("d/<-0/x") == ["e-", "z"]
    assert listed("d/<") == ["d/<-", "e-", "z"]
    assert listed("d!") == ["d/<-", "e-", "z"]


def test_remote_pages_are_sized_by_what_the_reader_still_wants() -> None:
    """A page of 1,000 read one past: the remote's first page is 1,000 entries, the next only the
    few still wanted (it was another 1,000, parsed to use two)."""
    keys = [f"k{i:05d}" for i in range(3000)]
    inner = seaweed_like(keys)
    asked: list[int] = []

    def counting(prefix: str, delimiter: str | None, start_after: str | None, max_keys: int) -> ListPage:
        asked.append(max_keys)
        return inner(prefix, delimiter, start_after, max_keys)

    page = ByteOrderWalk(counting).page("", "/", None, 1001)
    assert len(page.contents) == 1001 and page.is_truncated
    assert asked[0] == 1000 and max(asked[1:]) <= 3, asked
