"""Fuzzing the parsers not covered by test_parsers.py / test_chunked.py: conditional headers, key
and bucket-name validation, the units parser, checksum headers, and SigV4/SigV2 verification of
arbitrary Authorization headers and presigned queries.

The contract everywhere: a value, or the one ``S3Error`` S3 would answer (ValueError for the
settings' units parser), never another exception (which would be a 500). Quick by default (CI);
``FERRY_FUZZ_EXAMPLES=20000`` runs deeper. Results go to ``$FERRY_RELIABILITY_OUT/fuzz.jsonl``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.domain import units
from app.domain.checksums import ALGORITHMS, BodyDigests, checksum_header_algorithms, verify_expected
from app.domain.conditions import Conditions
from app.domain.errors import S3Error
from app.domain.names import validate_bucket_name, validate_key
from app.s3.sigv2 import SigV2Verifier
from app.s3.sigv4 import RequestParts, SigV4Verifier
from tests.support.reliability import Tally

pytestmark = pytest.mark.reliability

EXAMPLES = int(os.environ.get("FERRY_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TALLIES: dict[str, Tally] = {}


@pytest.fixture(scope="module", autouse=True)
def _write_tallies() -> Iterator[None]:
    yield
    for tally in TALLIES.values():
        tally.write()


def tried(parser: str, fn: Callable[[], Any], *allowed: type[BaseException]) -> Any:
    """Run one parser call; count it; any exception other than ``allowed`` fails the test."""
    tally = TALLIES.setdefault(parser, Tally("fuzz", parser))
    try:
        result = fn()
    except allowed:
        tally.op(expected=True, what=parser)
        return None
    except Exception as exc:
        tally.op(expected=False, what=f"{parser}: {type(exc).__name__}: {exc}")
        raise
    tally.op(expected=True, what=parser)
    return result


header_text = st.text(st.characters(min_codepoint=0, max_codepoint=0x2FF), max_size=80)
etag_lists = st.lists(st.one_of(st.just("*"), st.from_regex(r'W?/?"?[0-9a-f]{0,32}"?', fullmatch=True)),
                      max_size=4).map(", ".join)
dates = st.one_of(header_text, st.datetimes(timezones=st.just(UTC)).map(
    lambda d: d.strftime("%a, %d %b %Y %H:%M:%S GMT")))


@FUZZ
@given(st.one_of(st.none(), etag_lists, header_text), st.one_of(st.none(), etag_lists, header_text),
       st.one_of(st.none(), dates), st.one_of(st.none(), dates))
def test_conditional_headers(if_match: str | None, if_none_match: str | None, ims: str | None,
                             ius: str | None) -> None:
    conditions = Conditions(if_match, if_none_match, ims, ius)
    ok = tried("conditional-headers", lambda: conditions.check('"' + "a" * 32 + '"', datetime(2024, 5, 1, tzinfo=UTC)),
               S3Error)
    assert ok is None


@FUZZ
@given(st.text(max_size=1100))
def test_key_validation(key: str) -> None:
    tried("key-validation", lambda: validate_key(key), S3Error)


@FUZZ
@given(st.one_of(st.text(max_size=70), st.from_regex(r"[a-z0-9.\-]{1,70}", fullmatch=True)))
def test_bucket_name_validation(name: str) -> None:
    tried("bucket-name-validation", lambda: validate_bucket_name(name), S3Error)


@FUZZ
@given(st.one_of(st.text(max_size=30), st.from_regex(r"\s*\d{1,30}(\.\d{0,5})?\s*([kmgtpKMGTP]?i?[bB]?)\s*",
                                                      fullmatch=True)))
def test_units_sizes(text: str) -> None:
    value = tried("units", lambda: units.parse_size(text), ValueError)
    assert value is None or value >= 0


@FUZZ
@given(st.one_of(st.text(max_size=30), st.from_regex(r"\d{1,20}(\.\d{0,5})?(ms|s|m|h|d)?", fullmatch=True)))
def test_units_durations(text: str) -> None:
    value = tried("units", lambda: units.parse_duration(text), ValueError)
    assert value is None or value >= 0


@FUZZ
@given(st.dictionaries(st.sampled_from([f"x-amz-checksum-{a.lower()}" for a in ALGORITHMS] + ["content-md5"]),
                       st.one_of(header_text, st.binary(max_size=40).map(lambda b: __import__("base64")
                                                                      .b64encode(b).decode())), max_size=3),
       st.binary(max_size=200))
def test_checksum_headers(headers: dict[str, str], body: bytes) -> None:
    expected = checksum_header_algorithms(headers)
    digests = BodyDigests(expected)
    digests.update(body)
    tried("checksum-headers", lambda: verify_expected(digests, headers.get("content-md5"), expected), S3Error)


SECRET = "fuzz-secret"
NOW = time.time()
AMZ_DATE = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(NOW))
auth_parts = st.lists(st.one_of(
    st.just(f"Credential=AKID/{AMZ_DATE[:8]}/us-east-1/s3/aws4_request"), st.just("SignedHeaders=host;x-amz-date"),
    st.just("Signature=" + "0" * 64), header_text), max_size=5)


@FUZZ
@given(st.sampled_from(["AWS4-HMAC-SHA256", "AWS", "AWS4-ECDSA-P256-SHA256", "", "Bearer"]), auth_parts,
       st.one_of(st.just(AMZ_DATE), header_text), st.one_of(st.just("UNSIGNED-PAYLOAD"), header_text),
       st.binary(max_size=60))
def test_sigv4_header_verification(scheme: str, parts: list[str], amz_date: str, payload: str, path: bytes) -> None:
    verifier = SigV4Verifier(lambda ak: SECRET if ak == "AKID" else None, clock=lambda: NOW)
    headers = [(b"authorization", f"{scheme} {', '.join(parts)}".encode("utf-8", "surrogatepass")),
               (b"x-amz-date", amz_date.encode("utf-8", "surrogatepass")), (b"host", b"h"),
               (b"x-amz-content-sha256", payload.encode("utf-8", "surrogatepass"))]
    req = RequestParts("GET", b"/" + path, b"", headers)
    tried("sigv4-canonicalisation", lambda: verifier.verify(req), S3Error)


presign_names = st.sampled_from(["X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
                                 "X-Amz-SignedHeaders", "X-Amz-Signature", "x-amz-content-sha256", "other"])


@FUZZ
@given(st.lists(st.tuples(presign_names, st.one_of(header_text, st.just("AWS4-HMAC-SHA256"), st.just(AMZ_DATE),
                                                   st.just("-1"), st.just("9" * 50))), max_size=8),
       st.binary(max_size=40))
def test_sigv4_presigned_verification(params: list[tuple[str, str]], path: bytes) -> None:
    from urllib.parse import quote
    verifier = SigV4Verifier(lambda ak: SECRET, clock=lambda: NOW)
    query = "&".join(f"{n}={quote(v, safe='')}" for n, v in params).encode()
    req = RequestParts("GET", b"/" + path, query, [(b"host", b"h")])
    tried("sigv4-canonicalisation", lambda: verifier.verify(req), S3Error)


@FUZZ
@given(st.one_of(header_text.map(lambda t: "AWS " + t), st.just("AWS AKID:c2ln"), header_text),
       st.one_of(st.none(), header_text), st.binary(max_size=40), st.binary(max_size=60))
def test_sigv2_verification(auth: str, date: str | None, path: bytes, query: bytes) -> None:
    verifier = SigV2Verifier(lambda ak: SECRET, clock=lambda: NOW)
    headers = [(b"authorization", auth.encode("utf-8", "surrogatepass")), (b"host", b"h")]
    if date is not None:
        headers.append((b"date", date.encode("utf-8", "surrogatepass")))
    req = RequestParts("GET", b"/" + path, query, headers)
    tried("sigv2-canonicalisation", lambda: verifier.verify(req), S3Error)
