"""Property tests for the request parsers: Range, continuation tokens, XML bodies, targets and queries.

Every parser here sees raw client input; the contract is that it either returns a value or raises
the one ``S3Error`` S3 would answer with, never another exception (which would be a 500).
"""

from __future__ import annotations

import base64
import binascii
import xml.etree.ElementTree as ET
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app.domain.errors import S3Error
from app.domain.ranges import ByteRange, RangeRequest, honoured_range_header, parse_range
from app.s3 import xml
from app.s3.request import parse_query, split_target
from app.s3.tokens import decode_token, encode_token

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
sizes = st.integers(min_value=0, max_value=10**12)
digits = st.one_of(st.just(""), st.integers(min_value=0, max_value=10**15).map(str),
                   st.text("0123456789", min_size=1, max_size=40))
blank = st.sampled_from(["", " ", "  ", "\t"])


@st.composite
def range_headers(draw: st.DrawFn) -> str:
    """Mostly well-formed single ranges with optional blanks, plus arbitrary junk."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.text(max_size=40))
    unit = draw(st.sampled_from(["bytes", "bytes", "Bytes", "items", "bytes "]))
    return (draw(blank) + unit + draw(blank) + "=" + draw(blank) + draw(digits) + draw(blank) + "-"
            + draw(blank) + draw(digits) + draw(blank) + draw(st.sampled_from(["", "", ",0-1", ", 5-"])))


def _outcome(header: str | None, size: int) -> ByteRange | str | None:
    try:
        return parse_range(header, size)
    except S3Error as err:
        return err.code


# ---------------------------------------------------------------------------------- Range


@PROPERTY
@given(range_headers(), sizes)
@example("bytes=" + "9" * 5000 + "-", 10)
@example("bytes=-" + "9" * 5000, 10)
@example("bytes=0-" + "9" * 5000, 10)
@example("bytes=\u0661-\u0662", 10)  # Arabic-Indic digits are not HTTP digits
def test_parse_range_is_inside_the_object_or_invalid_range(header: str, size: int) -> None:
    try:
        rng = parse_range(header, size)
    except S3Error as err:
        assert err.code == "InvalidRange"
        assert err.status == 416
        return
    if rng is None:
        return
    assert 0 <= rng.first <= rng.last < size
    assert rng.size == size
    assert rng.length == rng.last - rng.first + 1
    assert rng.content_range == f"bytes {rng.first}-{rng.last}/{size}"


@PROPERTY
@given(st.integers(1, 10**9), st.integers(0, 10**9))
def test_suffix_range_is_the_last_n_bytes(n: int, size: int) -> None:
    rng = parse_range(f"bytes=-{n}", size)
    if size == 0:
        assert rng is None
        return
    assert rng is not None
    assert (rng.first, rng.last) == (max(0, size - n), size - 1)
    assert rng.length == min(n, size)


def test_zero_suffix_is_unsatisfiable() -> None:
    with pytest.raises(S3Error) as info:
        parse_range("bytes=-0", 10)
    assert info.value.code == "InvalidRange"


@PROPERTY
@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(1, 10**6))
def test_closed_range_semantics(first: int, last: int, size: int) -> None:
    outcome = _outcome(f"bytes={first}-{last}", size)
    if last < first:
        assert outcome is None  # syntactically invalid: ignored, whole object
    elif first >= size:
        assert outcome == "InvalidRange"
    else:
        assert outcome == ByteRange(first, min(last, size - 1), size)


@pytest.mark.parametrize("header", ["", "bytes", "bytes=", "bytes=-", "bytes=a-b", "bytes=1-2,3-4",
                                    "bytes=5-2", "items=0-1", "bytes=0x1-2", "bytes=+1-2", "bytes=-+1",
                                    "bytes=1--2"])
def test_invalid_syntax_means_whole_object(header: str) -> None:
    assert parse_range(header, 100) is None
    assert honoured_range_header(header) is None


@PROPERTY
@given(range_headers(), sizes)
@example("bytes=" + "9" * 5000 + "-", 10)
@example("bytes=0007-0009", 10)
@example("bytes=-0", 10)
def test_honoured_range_header_is_consistent_with_parse_range(header: str, size: int) -> None:
    """The gateway forwards ``honoured_range_header`` to the remote and then applies
    ``parse_range`` to it: both must describe exactly what ``parse_range`` does with the original."""
    honoured = honoured_range_header(header)
    if honoured is None:
        assert _outcome(header, size) is None
        return
    assert honoured.isascii() and honoured.startswith("bytes=")
    assert len(honoured) < 60  # never a 5000-digit header to the remote
    assert honoured_range_header(honoured) == honoured  # a fixed point
    assert _outcome(honoured, size) == _outcome(header, size)


@PROPERTY
@given(range_headers(), sizes)
@example("bytes=-0", 10)
@example("bytes=0-", 0)
def test_the_range_a_get_carries_down_is_the_edges_parse(header: str, size: int) -> None:
    """One parse of a Range for every reader of it: the header forwarded to the remote or a
    peer, the first byte a discovery fetches, and the bytes served all come from the
    ``RangeRequest`` the edge built, and agree with ``parse_range`` of the client's header."""
    wanted = RangeRequest.from_header(header)
    assert wanted.header == honoured_range_header(header)
    assert RangeRequest.from_header(wanted.header) == wanted  # forwarding it loses nothing
    outcome = _outcome(header, size)
    try:
        resolved: ByteRange | str | None = wanted.resolve(size)
    except S3Error as err:
        resolved = err.code
    assert resolved == outcome
    if isinstance(outcome, ByteRange) and wanted.first_byte is not None:
        assert wanted.first_byte == outcome.first  # a discovery starts at the block served first
    if wanted.spec is None:
        assert wanted.first_byte == 0 and outcome is None


# ---------------------------------------------------------------------------------- tokens


@PROPERTY
@given(st.text(max_size=300))
@example("")
@example("dir/\U0010ffff")
@example("a\x00b")
def test_token_round_trip(marker: str) -> None:
    token = encode_token(marker)
    assert token.isascii() and "/" not in token and "+" not in token
    assert decode_token(token) == marker


@PROPERTY
@given(st.one_of(st.text(max_size=80),
                 st.binary(max_size=80).map(lambda b: base64.urlsafe_b64encode(b).decode()),
                 st.binary(max_size=80).map(lambda b: base64.urlsafe_b64encode(b"f1:" + b).decode())))
@example(base64.urlsafe_b64encode(b"f1:\xed\xa0\x80").decode())  # a lone surrogate
@example(base64.urlsafe_b64encode(b"f1:\xff").decode())
@example("f1")
@example("====")
@example("\u00e9")
def test_garbage_tokens_are_invalid_argument_or_a_valid_marker(token: str) -> None:
    try:
        marker = decode_token(token)
    except S3Error as err:
        assert err.code == "InvalidArgument"
        assert err.fields.get("ArgumentName") == "continuation-token"
        return
    # Whatever decodes must be sendable to the remote: strict UTF-8.
    marker.encode("utf-8")


# ---------------------------------------------------------------------------------- XML bodies

XML_PARSERS = [xml.parse_complete_multipart, xml.parse_delete, xml.parse_location_constraint]


def _parse_or_malformed(parser, body: bytes) -> object:  # type: ignore[no-untyped-def]
    try:
        return parser(body)
    except S3Error as err:
        assert err.code == "MalformedXML", err
        assert err.status == 400
        return None


@PROPERTY
@pytest.mark.parametrize("parser", XML_PARSERS, ids=lambda p: p.__name__)
@given(body=st.binary(max_size=300))
def test_arbitrary_bytes_are_a_result_or_malformed_xml(parser, body: bytes) -> None:  # type: ignore[no-untyped-def]
    _parse_or_malformed(parser, body)


xml_fragments = st.sampled_from([
    "<CompleteMultipartUpload>", "</CompleteMultipartUpload>", "<Delete>", "</Delete>", "<Part>", "</Part>",
    "<PartNumber>", "</PartNumber>", "<ETag>", "</ETag>", "<Object>", "</Object>", "<Key>", "</Key>",
    "<Quiet>", "</Quiet>", "<VersionId>", "</VersionId>", "<CreateBucketConfiguration>",
    "</CreateBucketConfiguration>", "<LocationConstraint>", "</LocationConstraint>", "1", "-1", "x",
    "99999999999999999999999", '"etag"', "&amp;", "&#0;", "&#x1;", "&bogus;", "<![CDATA[k]]>", "<!-- c -->",
    '<?xml version="1.0"?>', f'<Delete xmlns="{xml.NS}">', "true", " ", "\x00", "é", "<a/>",
])


@PROPERTY
@pytest.mark.parametrize("parser", XML_PARSERS, ids=lambda p: p.__name__)
@given(parts=st.lists(xml_fragments, max_size=20))
def test_xml_shaped_junk_is_a_result_or_malformed_xml(parser, parts: list[str]) -> None:  # type: ignore[no-untyped-def]
    _parse_or_malformed(parser, "".join(parts).encode("utf-8"))


etags = st.text(alphabet="0123456789abcdef", min_size=1, max_size=40)
checksum_values = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=",
                          min_size=1, max_size=20)
xml_text = st.text(st.characters(blacklist_categories=["Cs", "Cc"]), max_size=40) | st.sampled_from(
    ["a\tb", "a\nb", "<&>\"'", "  spaced  "])


algorithms = st.sampled_from(["CRC32", "CRC32C", "SHA1", "SHA256", "CRC64NVME"])


@PROPERTY
@given(parts=st.lists(st.tuples(st.integers(-5, 20000), etags, st.booleans(),
                                st.dictionaries(algorithms, checksum_values, max_size=2)),
                      min_size=1, max_size=15),
       namespaced=st.booleans())
def test_complete_multipart_round_trip(parts: list[tuple[int, str, bool, dict[str, str]]],
                                       namespaced: bool) -> None:
    ns = f' xmlns="{xml.NS}"' if namespaced else ""
    body = f"<CompleteMultipartUpload{ns}>" + "".join(
        f"<Part><PartNumber>{n}</PartNumber><ETag>{'&quot;' if quoted else ''}{e}{'&quot;' if quoted else ''}"
        f"</ETag>" + "".join(f"<Checksum{alg}>{v}</Checksum{alg}>" for alg, v in sums.items()) + "</Part>"
        for n, e, quoted, sums in parts) + "</CompleteMultipartUpload>"
    assert xml.parse_complete_multipart(body.encode()) == [(n, e, sums) for n, e, _, sums in parts]


@PROPERTY
@given(objects=st.lists(st.tuples(xml_text.filter(bool), st.none() | st.sampled_from(["null", "v1"])),
                        min_size=1, max_size=20),
       quiet=st.sampled_from([None, "true", "false", "True"]))
def test_delete_round_trip(objects: list[tuple[str, str | None]], quiet: str | None) -> None:
    inner = "".join("<Object>" + xml.element("Key", k) + xml.element("VersionId", v) + "</Object>"
                    for k, v in objects)
    if quiet is not None:
        inner = f"<Quiet>{quiet}</Quiet>" + inner
    keys, is_quiet = xml.parse_delete(xml.document("Delete", inner))
    assert keys == objects
    assert is_quiet == (quiet is not None and quiet.lower() == "true")


def test_delete_over_1000_keys_is_malformed() -> None:
    body = xml.document("Delete", "".join(f"<Object><Key>k{i}</Key></Object>" for i in range(1001)))
    with pytest.raises(S3Error) as info:
        xml.parse_delete(body)
    assert info.value.code == "MalformedXML"


@PROPERTY
@given(location=st.none() | st.sampled_from(["", "us-east-1", "eu-west-1", "EU", "weird value"]))
def test_location_constraint_round_trip(location: str | None) -> None:
    body = xml.document("CreateBucketConfiguration", xml.element("LocationConstraint", location))
    assert xml.parse_location_constraint(body) == (location or None)
    assert xml.parse_location_constraint(b"") is None
    assert xml.parse_location_constraint(b"  \n") is None


BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<ROOT><Object><Key>&lol9;</Key></Object></ROOT>"""

HOSTILE_BODIES = {
    "billion-laughs": BILLION_LAUGHS,
    "external-entity": b'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
                       b"<ROOT><Object><Key>&xxe;</Key></Object></ROOT>",
    "parameter-entity": b'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY % p SYSTEM "http://127.0.0.1:1/x"> %p;]>'
                        b"<ROOT/>",
    "lowercase-doctype": b'<?xml version="1.0"?><!doctype r [<!ENTITY a "b">]><ROOT/>',
    "utf16-doctype": '<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE r [<!ENTITY a "b">]><ROOT>&a;</ROOT>'
                     .encode("utf-16"),
    "undefined-entity": b"<ROOT><Object><Key>&undefined;</Key></Object></ROOT>",
}


@pytest.mark.parametrize("root", ["Delete", "CompleteMultipartUpload", "CreateBucketConfiguration"])
@pytest.mark.parametrize("name", sorted(HOSTILE_BODIES))
def test_entity_bodies_are_rejected(root: str, name: str) -> None:
    body = HOSTILE_BODIES[name].replace(b"ROOT", root.encode())
    if name == "utf16-doctype":
        body = HOSTILE_BODIES[name].decode("utf-16").replace("ROOT", root).encode("utf-16")
    parser = {"Delete": xml.parse_delete, "CompleteMultipartUpload": xml.parse_complete_multipart,
              "CreateBucketConfiguration": xml.parse_location_constraint}[root]
    with pytest.raises(S3Error) as info:
        parser(body)
    assert info.value.code == "MalformedXML"


@PROPERTY
@given(value=st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\ufffe\uffff"),
                     max_size=60).filter(lambda v: not any(ord(c) < 0x20 and c not in "\t\n\r" for c in v)))
@example(value="a\tb\nc\r\nd<&>\"'\x7f\u0085\u2028")
def test_rendered_text_round_trips_through_an_xml_parser(value: str) -> None:
    root = ET.fromstring(xml.document("R", xml.element("K", value)))
    assert root.findtext(f"{{{xml.NS}}}K") == value


@PROPERTY
@given(resource=st.text(max_size=60), field=st.text(max_size=30))
@example(resource="/b/a\x00b\x01\ud800", field="\uffff")
def test_error_documents_always_parse(resource: str, field: str) -> None:
    doc = xml.error_document("NoSuchKey", "m", resource, "RID", {"Key": field})
    root = ET.fromstring(doc)
    assert root.findtext("Code") == "NoSuchKey"


# ---------------------------------------------------------------------------------- targets and queries


@PROPERTY
@given(raw=st.binary(max_size=200), host=st.text(max_size=40),
       domain=st.none() | st.sampled_from(["s3.ferry.test", "localhost", "x"]))
@example(raw=b"/%ff/x", host="", domain=None)
@example(raw=b"no-slash", host="", domain=None)
@example(raw=b"/b/%00", host="[::1]:9000", domain="s3.ferry.test")
@example(raw=b"/k", host="b.s3.ferry.test:443", domain="s3.ferry.test")
def test_split_target_never_raises_anything_but_s3_error(raw: bytes, host: str, domain: str | None) -> None:
    try:
        bucket, key = split_target(raw, host, domain)
    except S3Error as err:
        assert err.code == "InvalidURI"
        assert err.status == 400
        return
    assert bucket is None or isinstance(bucket, str)
    assert key is None or (isinstance(key, str) and key)


@PROPERTY
@given(bucket=st.from_regex(r"[a-z0-9][a-z0-9.-]{1,20}[a-z0-9]", fullmatch=True),
       key=st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=60))
def test_split_target_path_style_round_trip(bucket: str, key: str) -> None:
    raw = f"/{bucket}/{quote(key, safe='/')}".encode("ascii")
    assert split_target(raw, "127.0.0.1:9000", None) == (bucket, key)
    assert split_target(raw, "127.0.0.1:9000", "s3.ferry.test") == (bucket, key)


@PROPERTY
@given(bucket=st.from_regex(r"[a-z0-9][a-z0-9-]{1,20}[a-z0-9]", fullmatch=True),
       key=st.text(st.characters(blacklist_categories=["Cs"]), max_size=60),
       port=st.sampled_from(["", ":9000"]), upper=st.booleans())
def test_split_target_virtual_hosted_round_trip(bucket: str, key: str, port: str, upper: bool) -> None:
    host = f"{bucket}.s3.ferry.test{port}"
    raw = ("/" + quote(key, safe="/")).encode("ascii")
    got = split_target(raw, host.upper() if upper else host, "s3.ferry.test")
    assert got == (bucket, key or None)


@PROPERTY
@given(raw=st.binary(max_size=200))
@example(raw=b"%ff=1")
@example(raw=b"a=%ff")
@example(raw=b"=&&=&a")
@example(raw=b"%zz=%")
def test_parse_query_never_raises_anything_but_s3_error(raw: bytes) -> None:
    try:
        out = parse_query(raw)
    except S3Error as err:
        assert err.code == "InvalidArgument"
        return
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in out.items())


@PROPERTY
@given(params=st.dictionaries(st.text(min_size=1, max_size=20).filter(lambda s: s.strip()),
                              st.text(max_size=30), max_size=8))
def test_parse_query_round_trip_of_sdk_encoding(params: dict[str, str]) -> None:
    """SDKs percent-encode every reserved character (a space as %20, a plus as %2B)."""
    raw = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in params.items()).encode("ascii")
    assert parse_query(raw) == params


def test_parse_query_first_value_wins_and_blank_values_are_kept() -> None:
    assert parse_query(b"uploads&prefix=a&prefix=b&delimiter=") == {
        "uploads": "", "prefix": "a", "delimiter": ""}


def test_token_is_url_safe_base64() -> None:
    token = encode_token("a/b c")
    assert binascii.a2b_base64(token.replace("-", "+").replace("_", "/") + "=" * (-len(token) % 4))
