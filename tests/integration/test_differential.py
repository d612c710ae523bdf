"""Differential test: generated S3 operation sequences against SeaweedFS directly (the reference)
and through Ferry (write-back), every answer compared (status, error code, body bytes, ETag) and
every listing page (keys, common prefixes, IsTruncated, continuation through every page).

Where SeaweedFS differs from AWS S3 itself, the reference is S3's documented behaviour: SeaweedFS
lists depth first, not in byte order, so its listing is read whole and sorted, and the pages S3
would answer are computed from it (``s3_pages``). Ferry's writes are destaged in the background
while the sequence runs (a backlog of buffered rows), and a ``flush`` rule drains it at random.

Keys stress ordering: '/', '!', '-', '.', '0', ' ', unicode, a trailing '/' (an empty folder
marker). Directory names and file names are disjoint: on SeaweedFS a key cannot be both a file
and a directory (``ExistingObjectIsFile``), a remote rule outside this test.

Budget: ``FERRY_DIFF_EXAMPLES`` sequences (default 4, a few seconds each); e.g.
``FERRY_DIFF_EXAMPLES=500`` for a long run.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from botocore.exceptions import ClientError
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from tests.support.gateway import GatewayProcess
from tests.support.seaweed import SeaweedServer

DIRS = ["a", "a-", "a.b", "ü"]
FILES = ["a!", "a-c", "a0", "a b", "b.txt", "日本", "~"]
KEYS = st.builds(lambda dirs, leaf: "/".join(dirs) + ("/" if leaf is None else ("/" if dirs else "") + leaf),
                 st.lists(st.sampled_from(DIRS), min_size=0, max_size=2),
                 st.none() | st.sampled_from(FILES)).filter(lambda k: k not in ("", "/"))
PREFIXES = st.sampled_from(["", "a", "a/", "a-", "a-/", "a.", "ü/", "a/a"])
DELIMITERS = st.sampled_from([None, "/", "-"])
MAX_KEYS = st.sampled_from([1, 2, 1000])
BODIES = st.binary(max_size=64)


def answer(call: Any, **kwargs: Any) -> tuple[int, str | None, Any]:
    """(status, error code, response): what a client can observe of one request."""
    try:
        resp = call(**kwargs)
        return resp["ResponseMetadata"]["HTTPStatusCode"], None, resp
    except ClientError as err:
        return err.response["ResponseMetadata"]["HTTPStatusCode"], err.response["Error"]["Code"], None


def s3_pages(keys: list[str], prefix: str, delimiter: str | None, max_keys: int) -> list[tuple[list[str], list[str], bool]]:
    """The pages S3 answers for these keys: byte order, common prefixes rolled up, full pages."""
    names: list[tuple[str, bool]] = []
    for key in sorted(keys):
        rest = key[len(prefix):]
        if not key.startswith(prefix):
            continue
        if delimiter and delimiter in rest:
            common = prefix + rest[: rest.index(delimiter) + len(delimiter)]
            if not names or names[-1][0] != common:
                names.append((common, True))
        else:
            names.append((key, False))
    pages = []
    for start in range(0, max(len(names), 1), max_keys):
        chunk = names[start:start + max_keys]
        pages.append(([n for n, p in chunk if not p], [n for n, p in chunk if p], start + max_keys < len(names)))
    return pages


def ferry_pages_v2(s3: Any, bucket: str, prefix: str, delimiter: str | None, max_keys: int) -> list[Any]:
    pages: list[Any] = []
    token = None
    args: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": max_keys}
    if delimiter:
        args["Delimiter"] = delimiter
    while len(pages) < 100:
        page = s3.list_objects_v2(**args, **({"ContinuationToken": token} if token else {}))
        pages.append(([o["Key"] for o in page.get("Contents", [])], [p["Prefix"] for p in page.get("CommonPrefixes", [])],
                      page["IsTruncated"]))
        assert page["KeyCount"] == len(pages[-1][0]) + len(pages[-1][1])
        assert ("NextContinuationToken" in page) == page["IsTruncated"]
        if not page["IsTruncated"]:
            return pages
        token = page["NextContinuationToken"]
    raise AssertionError("more than 100 pages")


def ferry_pages_v1(s3: Any, bucket: str, prefix: str, delimiter: str | None, max_keys: int) -> list[Any]:
    pages: list[Any] = []
    marker = ""
    args: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": max_keys}
    if delimiter:
        args["Delimiter"] = delimiter
    while len(pages) < 100:
        page = s3.list_objects(**args, Marker=marker)
        pages.append(([o["Key"] for o in page.get("Contents", [])], [p["Prefix"] for p in page.get("CommonPrefixes", [])],
                      page["IsTruncated"]))
        if not page["IsTruncated"]:
            return pages
        marker = page.get("NextMarker") or (pages[-1][0] + pages[-1][1])[-1]
    raise AssertionError("more than 100 pages")


class Differential(RuleBasedStateMachine):
    gateway: GatewayProcess
    seaweed: SeaweedServer

    @initialize()
    def buckets(self) -> None:
        self.ferry = self.gateway.client()
        self.ref = self.seaweed.client()
        # A fresh bucket on both sides for every sequence: what one sequence leaves behind (an
        # empty directory on SeaweedFS, a row still destaging) must not be the next one's start.
        self.fb = f"f-{uuid.uuid4().hex[:16]}"
        self.ferry.create_bucket(Bucket=self.fb)
        self.rb = self.seaweed.create_bucket(f"r-{uuid.uuid4().hex[:16]}")

    def both(self, op: str, **kwargs: Any) -> tuple[Any, Any]:
        ref = answer(getattr(self.ref, op), Bucket=self.rb, **kwargs)
        if op in ("get_object", "head_object") and kwargs["Key"].endswith("/") and ref[0] == 200 \
                and not self.ref_holds(kwargs["Key"]):
            ref = (404, "NoSuchKey" if op == "get_object" else "404", None)  # S3: a directory is no object
        ferry = answer(getattr(self.ferry, op), Bucket=self.fb, **kwargs)
        assert ferry[:2] == ref[:2], f"{op} {kwargs}: ferry {ferry[:2]} reference {ref[:2]}"
        return ref[2], ferry[2]

    def ref_holds(self, key: str) -> bool:
        """SeaweedFS answers GET/HEAD of ``a/`` for a directory only its keys imply; S3 has no such object."""
        listed = self.ref.list_objects_v2(Bucket=self.rb, Prefix=key, MaxKeys=1000)
        return key in [o["Key"] for o in listed.get("Contents", [])]

    @rule(key=KEYS, body=BODIES)
    def put(self, key: str, body: bytes) -> None:
        ref, ferry = self.both("put_object", Key=key, Body=b"" if key.endswith("/") else body)
        if ref is not None:
            assert ferry["ETag"] == ref["ETag"]

    @rule(key=KEYS)
    def get(self, key: str) -> None:
        ref, ferry = self.both("get_object", Key=key)
        if ref is not None:
            assert (ferry["ETag"], ferry["Body"].read()) == (ref["ETag"], ref["Body"].read())

    @rule(key=KEYS)
    def head(self, key: str) -> None:
        ref, ferry = self.both("head_object", Key=key)
        if ref is not None:
            assert (ferry["ETag"], ferry["ContentLength"]) == (ref["ETag"], ref["ContentLength"])

    @rule(key=KEYS)
    def delete(self, key: str) -> None:
        self.both("delete_object", Key=key)

    @rule(keys=st.lists(KEYS, min_size=1, max_size=4, unique=True))
    def delete_many(self, keys: list[str]) -> None:
        ref, ferry = self.both("delete_objects", Delete={"Objects": [{"Key": k} for k in keys]})
        assert sorted(d["Key"] for d in ferry.get("Deleted", [])) == sorted(d["Key"] for d in ref.get("Deleted", []))
        assert ferry.get("Errors", []) == ref.get("Errors", [])

    @rule(src=KEYS, dst=KEYS)
    def copy(self, src: str, dst: str) -> None:
        if src.endswith("/") or dst.endswith("/") or src == dst:
            return  # folder markers and copies onto themselves: rules of their own, not listings
        ref = answer(self.ref.copy_object, Bucket=self.rb, Key=dst, CopySource={"Bucket": self.rb, "Key": src})
        ferry = answer(self.ferry.copy_object, Bucket=self.fb, Key=dst, CopySource={"Bucket": self.fb, "Key": src})
        assert ferry[:2] == ref[:2]
        if ref[2] is not None:
            assert ferry[2]["CopyObjectResult"]["ETag"] == ref[2]["CopyObjectResult"]["ETag"]

    @rule()
    def flush(self) -> None:
        self.gateway.flush(self.fb)

    @rule(prefix=PREFIXES, delimiter=DELIMITERS, max_keys=MAX_KEYS)
    def list_every_page(self, prefix: str, delimiter: str | None, max_keys: int) -> None:
        listed = self.ref.list_objects_v2(Bucket=self.rb, MaxKeys=1000)
        assert not listed["IsTruncated"]
        expected = s3_pages([o["Key"] for o in listed.get("Contents", [])], prefix, delimiter, max_keys)
        assert ferry_pages_v2(self.ferry, self.fb, prefix, delimiter, max_keys) == expected
        assert ferry_pages_v1(self.ferry, self.fb, prefix, delimiter, max_keys) == expected

    def teardown(self) -> None:
        for client, bucket in ((self.ferry, self.fb), (self.ref, self.rb)):
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                for item in page.get("Contents", []):
                    client.delete_object(Bucket=bucket, Key=item["Key"])
        self.gateway.flush(self.fb)


EXAMPLES = int(os.environ.get("FERRY_DIFF_EXAMPLES", "4"))


def test_ferry_answers_what_s3_would(gateway: GatewayProcess, seaweed: SeaweedServer) -> None:
    Differential.gateway = gateway
    Differential.seaweed = seaweed
    machine = settings(max_examples=EXAMPLES, stateful_step_count=25, deadline=None, derandomize=EXAMPLES <= 4,
                       suppress_health_check=list(HealthCheck))(Differential)
    machine.TestCase().runTest()
