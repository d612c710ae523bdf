"""Listings in S3's byte order over a remote that lists otherwise (issue 25).

SeaweedFS lists its filer tree depth first ('/' below every character: ``r/a/b`` before ``r/a!``);
the gateway must answer S3's UTF-8 byte order, every key exactly once across pages, with
Marker (v1), ContinuationToken and StartAfter (v2), with and without a delimiter.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.gateway import GatewayProcess

KEYS = ["r/a-c", "r/a.d", "r/a/b", "r/a/z/y", "r/a0", "r/a!", "r/b/c", "r/b-", "r/b.txt", "r/c",
        "r/a", "r/ab/x", "r/a-/x", "r/a.e/f", "r/ü", "r/日本/x", "r/a b", "r/~", "q", "y/", "y/z"]


def expected(prefix: str, delimiter: str | None, after: str = "") -> list[str]:
    """What S3 lists: keys and common prefixes in byte order (code point order is UTF-8's)."""
    out: list[str] = []
    for key in sorted(KEYS):
        rest = key[len(prefix):]
        if not key.startswith(prefix):
            continue
        name = prefix + rest[: rest.index(delimiter) + len(delimiter)] if delimiter and delimiter in rest else key
        if name > after and (not out or out[-1] != name):
            out.append(name)
    return out


def names(page: dict[str, Any]) -> list[str]:
    return sorted([o["Key"] for o in page.get("Contents", [])] + [p["Prefix"] for p in page.get("CommonPrefixes", [])])


def every_page_v2(s3: Any, bucket: str, **kwargs: Any) -> list[str]:
    listed: list[str] = []
    token = None
    for _ in range(100):
        page = s3.list_objects_v2(Bucket=bucket, **kwargs, **({"ContinuationToken": token} if token else {}))
        assert page["KeyCount"] == len(names(page)) <= kwargs["MaxKeys"]
        if page["IsTruncated"]:
            assert page["KeyCount"] == kwargs["MaxKeys"], "a truncated page is full"
        listed += names(page)
        if not page["IsTruncated"]:
            return listed
        token = page["NextContinuationToken"]
    raise AssertionError("more than 100 pages")


def every_page_v1(s3: Any, bucket: str, **kwargs: Any) -> list[str]:
    listed: list[str] = []
    marker = ""
    for _ in range(100):
        page = s3.list_objects(Bucket=bucket, Marker=marker, **kwargs)
        listed += names(page)
        if not page["IsTruncated"]:
            return listed
        marker = page.get("NextMarker") or names(page)[-1]
    raise AssertionError("more than 100 pages")


@pytest.fixture(scope="module")
def ordered(gateway: GatewayProcess, module_bucket: str) -> str:
    client = gateway.client()
    for key in KEYS:
        client.put_object(Bucket=module_bucket, Key=key, Body=b"" if key.endswith("/") else key.encode())
    gateway.flush(module_bucket)
    return module_bucket


@pytest.mark.parametrize("max_keys", [1, 2, 1000])
@pytest.mark.parametrize("prefix,delimiter", [("", None), ("r/", None), ("r/", "/"), ("", "/"), ("r/a", "/"),
                                              ("r/", "-"), ("r/a", None)])
def test_pages_are_in_byte_order_and_complete(gateway: GatewayProcess, ordered: str, max_keys: int,
                                             prefix: str, delimiter: str | None) -> None:
    s3 = gateway.client()
    args: dict[str, Any] = {"Prefix": prefix, "MaxKeys": max_keys, **({"Delimiter": delimiter} if delimiter else {})}
    assert every_page_v2(s3, ordered, **args) == expected(prefix, delimiter)
    assert every_page_v1(s3, ordered, **args) == expected(prefix, delimiter)


@pytest.mark.parametrize("after", ["r/a", "r/a!", "r/a-c", "r/a/", "r/a/b", "r/a.d", "r/b/", "r/", "q"])
@pytest.mark.parametrize("delimiter", [None, "/"])
def test_start_after_resumes_in_byte_order(gateway: GatewayProcess, ordered: str, after: str,
                                           delimiter: str | None) -> None:
    s3 = gateway.client()
    args: dict[str, Any] = {"MaxKeys": 2, "StartAfter": after, **({"Delimiter": delimiter} if delimiter else {})}
    assert every_page_v2(s3, ordered, **args) == expected("", delimiter, after)


def test_the_paginator_lists_a_big_directory_and_its_neighbours(gateway: GatewayProcess, module_bucket: str) -> None:
    """The issue's 1,204 keys: ``logs/app/NNNN.log`` sorts after ``logs/app-2024.tar`` and ``logs/app.txt``."""
    s3 = gateway.client()
    keys = [f"logs/app/{i:04d}.log" for i in range(1200)] + ["logs/app-2024.tar", "logs/app.txt", "logs/a", "logs/b"]
    for key in keys:
        s3.put_object(Bucket=module_bucket, Key=key, Body=b"x")
    gateway.flush(module_bucket)
    listed = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=module_bucket, Prefix="logs/")
              for o in page.get("Contents", [])]
    assert listed == sorted(keys)
