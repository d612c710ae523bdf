"""The mount's lean listing: ListObjectsV2 pages parsed without botocore, a small tree's listings
derived from one whole-tree page exactly as a delimiter listing of each directory would give them,
and a large directory listed by level (issue 30: ``ls -l`` and ``find`` + ``grep -r`` speed)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import pytest

from app.mount.listing import Lister, Page, parse_page, tree
from app.mount.objects import FileStat, Listing, ObjectError

WHEN = "2026-12-06T01:44:00.250Z"
WHEN_NS = int(datetime(2026, 12, 6, 1, 44, 0, 250000, tzinfo=UTC).timestamp() * 1e9)


def _document(keys: list[str], prefixes: list[str] | None = None, token: str | None = None) -> bytes:
    contents = "".join(f"<Contents><Key>{quote(k)}</Key><LastModified>{WHEN}</LastModified>"
                       f"<ETag>&quot;e-{i}&quot;</ETag><Size>{i}</Size><StorageClass>STANDARD</StorageClass></Contents>"
                       for i, k in enumerate(keys))
    common = "".join(f"<CommonPrefixes><Prefix>{quote(p)}</Prefix></CommonPrefixes>" for p in prefixes or [])
    more = f"<NextContinuationToken>{token}</NextContinuationToken>" if token else ""
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<Name>b</Name><Prefix></Prefix><KeyCount>{len(keys)}</KeyCount><MaxKeys>1000</MaxKeys>"
            f"<EncodingType>url</EncodingType><IsTruncated>{'true' if token else 'false'}</IsTruncated>{more}"
            f"{contents}{common}</ListBucketResult>").encode()


def test_a_page_is_parsed_with_decoded_keys_sizes_times_and_etags() -> None:
    page = parse_page(_document(["d/a b", "d/ü&<x>", "d/%"], ["d/sub/"], token="tok=="))
    assert [k for k, _ in page.files] == ["d/a b", "d/ü&<x>", "d/%"]
    assert page.files[1][1] == FileStat(1, WHEN_NS, "e-1")
    assert page.prefixes == ["d/sub/"]
    assert page.next_token == "tok=="
    assert parse_page(_document(["k"])).next_token is None


def test_a_malformed_page_is_an_error_not_an_empty_directory() -> None:
    with pytest.raises(ObjectError):
        parse_page(b"<ListBucketResult><Contents>")
    with pytest.raises(ObjectError):
        parse_page(b"<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>")


def test_a_tree_gives_each_directory_what_its_delimiter_listing_would() -> None:
    stat = FileStat(1, 0, "e")
    keys = ["p/a", "p/d/", "p/d/x", "p/d/e/y", "p/f/", "p/z"]
    listings = tree("p/", Page(files=[(k, stat) for k in keys]))
    assert listings == {
        "p/": Listing(["d", "f"], {"a": stat, "z": stat}),
        "p/d/": Listing(["e"], {"x": stat}),
        "p/d/e/": Listing([], {"y": stat}),
        "p/f/": Listing([], {}),  # a folder marker: an empty directory, not a file
    }


class _Gateway:
    """Answers ``Lister.page`` from a sorted key list, as the gateway's ListObjectsV2 would."""

    def __init__(self, keys: list[str], page_keys: int = 3) -> None:
        self.keys = sorted(keys)
        self.page_keys = page_keys
        self.calls: list[dict[str, Any]] = []

    def page(self, bucket: str, prefix: str, *, delimiter: bool, token: str | None = None,
             start_after: str | None = None) -> Page:
        self.calls.append({"delimiter": delimiter, "token": token, "start_after": start_after})
        after = token or start_after or ""
        entries: list[str] = []
        for key in self.keys:
            if not key.startswith(prefix) or key <= after:
                continue
            rest = key[len(prefix):]
            entry = prefix + rest.split("/", 1)[0] + "/" if delimiter and "/" in rest else key
            if entry <= after or (entries and entries[-1] == entry):
                continue
            entries.append(entry)
        shown, more = entries[:self.page_keys], len(entries) > self.page_keys
        stat = FileStat(1, 0, "e")
        return Page(files=[(e, stat) for e in shown if not e.endswith("/") or e == prefix],
                    prefixes=[e for e in shown if e.endswith("/") and e != prefix],
                    next_token=shown[-1] if more else None)


def _lister(gateway: _Gateway) -> Lister:
    lister = Lister(None)  # type: ignore[arg-type]
    lister.page = gateway.page  # type: ignore[method-assign]
    return lister


def test_a_small_tree_is_one_request() -> None:
    gateway = _Gateway(["t/a", "t/s/b", "t/s/c"], page_keys=10)
    listings, whole = _lister(gateway).directory("b", "t/", whole=True)
    assert whole and len(gateway.calls) == 1
    assert listings["t/"] == Listing(["s"], {"a": FileStat(1, 0, "e")})
    assert set(listings["t/s/"].files) == {"b", "c"}


def test_a_large_flat_directory_reads_on_from_the_whole_tree_page() -> None:
    names = [f"f{i:02d}" for i in range(8)]
    gateway = _Gateway([f"t/{n}" for n in names])
    listings, whole = _lister(gateway).directory("b", "t/", whole=True)
    assert not whole
    assert list(listings["t/"].files) == names
    assert len(gateway.calls) == 3  # 8 keys, 3 a page: the whole-tree page is the first
    assert gateway.calls[1]["start_after"] == "t/f02"


def test_a_large_tree_is_listed_by_level() -> None:
    gateway = _Gateway(["t/a/1", "t/a/2", "t/a/3", "t/a/4", "t/b", "t/c/5"])
    listings, whole = _lister(gateway).directory("b", "t/", whole=True)
    assert not whole and set(listings) == {"t/"}
    assert listings["t/"].dirs == ["a", "c"] and list(listings["t/"].files) == ["b"]
    gateway.calls.clear()
    _lister(gateway).directory("b", "t/", whole=False)
    assert all(call["delimiter"] for call in gateway.calls)
