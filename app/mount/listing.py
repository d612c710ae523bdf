"""Listing pages for the mount, read lean, and a directory tree's listings from one page.

The mount lists through the gateway's ListObjectsV2 like any S3 client, but not through boto3:
botocore's parser (dateutil for every LastModified) cost the mount 1.8 CPU s per 10,000 keys,
more than the rest of an ``ls -l`` (measured). A page here is a presigned GET on the mount's
kept-alive connection pool, parsed by ElementTree (C) and ``datetime.fromisoformat``.

A directory is first listed *whole* (no delimiter, one page): when every key under it fits in
that page, it gives the listing of the directory and of every directory below it at once, so
``find`` and ``grep -r`` over a tree of small directories cost one request, not one per
directory. When it does not fit, the directory is listed level by level as before (and the page
already read is its first page when it held only the directory's own files).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import unquote

from app.mount.objects import FileStat, GatewayObjects, Listing, ObjectError, error_code

PAGE_KEYS = 1000  # S3's largest page


@dataclass(slots=True)
class Page:
    """One ListObjectsV2 page: keys with their stats, common prefixes, where to read on."""

    files: list[tuple[str, FileStat]] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    next_token: str | None = None


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def parse_page(document: bytes) -> Page:
    """A ListObjectsV2 answer (asked with ``encoding-type=url``: keys arrive percent-encoded, so
    no key can break the XML)."""
    try:
        root = ET.fromstring(document)
    except ET.ParseError as exc:
        raise ObjectError("MalformedListing", str(exc)) from exc
    encoded = any(_local(e.tag) == "EncodingType" and (e.text or "") == "url" for e in root)
    decode = unquote if encoded else (lambda text: text)
    page = Page()
    truncated = False
    for element in root:
        tag = _local(element.tag)
        if tag == "Contents":
            values = {_local(e.tag): e.text or "" for e in element}
            modified = datetime.fromisoformat(values["LastModified"])
            page.files.append((decode(values["Key"]), FileStat(int(values.get("Size") or 0),
                                                               int(modified.timestamp() * 1e9),
                                                               values.get("ETag", "").strip('"'))))
        elif tag == "CommonPrefixes":
            page.prefixes.extend(decode(e.text or "") for e in element if _local(e.tag) == "Prefix")
        elif tag == "IsTruncated":
            truncated = (element.text or "").strip().lower() == "true"
        elif tag == "NextContinuationToken":
            page.next_token = element.text or None
    if not truncated:
        page.next_token = None
    elif page.next_token is None:
        raise ObjectError("MalformedListing", "a truncated page without a continuation token")
    return page


def add_level(listing: Listing, prefix: str, page: Page) -> None:
    """A delimiter page's entries one level under ``prefix`` (its own folder marker is none)."""
    listing.dirs.extend(p[len(prefix):-1] for p in page.prefixes)
    for key, found in page.files:
        name = key[len(prefix):]
        if name:
            listing.files[name] = found


def only_own_files(prefix: str, page: Page) -> bool:
    """Whether a whole-tree page holds nothing below the directory's own level: then it is also
    the first page of the directory's level listing."""
    return not page.prefixes and all("/" not in key[len(prefix):] for key, _ in page.files)


def tree(prefix: str, page: Page) -> dict[str, Listing]:
    """Every directory's listing under ``prefix`` (itself included, keyed by its prefix) from a
    complete whole-tree page: a key ``prefix/a/b/c`` makes ``a`` a directory of ``prefix``,
    ``b`` one of ``prefix/a/`` and ``c`` a file of ``prefix/a/b/``, as a delimiter listing of
    each would. A folder marker (``a/b/``) makes its directory and is no file of it."""
    listings: dict[str, Listing] = {prefix: Listing([], {})}
    for key, found in page.files:
        level = prefix
        rest = key[len(prefix):]
        while "/" in rest:
            name, rest = rest.split("/", 1)
            below = f"{level}{name}/"
            if below not in listings:
                listings[below] = Listing([], {})
                listings[level].dirs.append(name)
            level = below
        if rest:
            listings[level].files[rest] = found
    return listings


class Lister:
    """ListObjectsV2 pages from the gateway, as presigned GETs on the mount's connection pool."""

    def __init__(self, objects: GatewayObjects) -> None:
        self.objects = objects

    def page(self, bucket: str, prefix: str, *, delimiter: bool, token: str | None = None,
             start_after: str | None = None) -> Page:
        params = {"Bucket": bucket, "Prefix": prefix, "EncodingType": "url", "MaxKeys": PAGE_KEYS}
        if delimiter:
            params["Delimiter"] = "/"
        if token:
            params["ContinuationToken"] = token
        elif start_after:
            params["StartAfter"] = start_after
        url = self.objects.client.generate_presigned_url("list_objects_v2", Params=params, ExpiresIn=300)
        resp = self.objects.pool.request("GET", url, retries=self.objects.retries())
        if resp.status != 200:
            raise ObjectError(error_code(resp.data) or str(resp.status), f"LIST {bucket}/{prefix}")
        return parse_page(resp.data)

    def level(self, bucket: str, prefix: str, after: Page | None = None) -> Listing:
        """Every entry one level under ``prefix`` (delimiter '/'), page by page; ``after``: a
        whole-tree page of only the directory's own files, read on from its last key."""
        listing = Listing([], {})
        token, start_after = None, None
        if after is not None:
            add_level(listing, prefix, after)
            start_after = after.files[-1][0] if after.files else None
        while True:
            page = self.page(bucket, prefix, delimiter=True, token=token, start_after=start_after)
            add_level(listing, prefix, page)
            if page.next_token is None:
                return listing
            token = page.next_token

    def directory(self, bucket: str, prefix: str, *, whole: bool) -> tuple[dict[str, Listing], bool]:
        """The listing of ``prefix`` (and, when ``whole`` and the tree fits one page, of every
        directory under it), keyed by prefix; and whether the tree fitted (worth asking again)."""
        if whole:
            page = self.page(bucket, prefix, delimiter=False)
            if page.next_token is None:
                return tree(prefix, page), True
            return {prefix: self.level(bucket, prefix, page if only_own_files(prefix, page) else None)}, False
        return {prefix: self.level(bucket, prefix)}, False
