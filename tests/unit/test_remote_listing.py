"""The lean ListObjectsV2 (app/adapters/remote/listing.py): its query is the one botocore signs
and sends, and its parser makes of any answer what botocore's parse made of it (the oracle here:
botocore's own rest-xml parser and its ``encoding-type=url`` decoding), on the plain shape every
S3 store writes and on others (comments, CDATA, namespace prefixes, pretty-printing, character
references)."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote_plus, unquote_plus
from xml.sax.saxutils import escape

import botocore.session
import pytest
from botocore import parsers
from botocore.model import OperationModel

from app.adapters.remote.client import fast_timestamp
from app.adapters.remote.listing import MalformedListing, list_query, parse_list_v2, url_decoded
from app.domain.objects import ListPage, ObjectSummary

_SESSION = botocore.session.get_session()
_MODEL: OperationModel = _SESSION.get_service_model("s3").operation_model("ListObjectsV2")
NS = "http://s3.amazonaws.com/doc/2006-03-01/"


def botocore_page(document: bytes) -> ListPage:
    """What ``BucketOps._list_boto`` made of the same answer."""
    parser = parsers.create_parser("rest-xml")
    parser._timestamp_parser = fast_timestamp
    resp: dict[str, Any] = parser.parse({"body": document, "headers": {}, "status_code": 200}, _MODEL.output_shape)
    if resp.get("EncodingType") == "url":  # botocore's decode_list_object_v2 (it asked for url encoding)
        for item in resp.get("Contents", []):
            item["Key"] = unquote_plus(item["Key"])
        for item in resp.get("CommonPrefixes", []):
            item["Prefix"] = unquote_plus(item["Prefix"])
    contents = [ObjectSummary(o["Key"], int(o.get("Size", 0)), str(o.get("ETag", "")).strip('"'), o["LastModified"],
                              o.get("StorageClass", "STANDARD")) for o in resp.get("Contents", [])]
    prefixes = [p["Prefix"] for p in resp.get("CommonPrefixes", [])]
    truncated = bool(resp.get("IsTruncated"))
    last = max([c.key for c in contents] + prefixes) if (contents or prefixes) else None
    return ListPage(contents, prefixes, truncated, last if truncated else None)


KEYS = ["a", "a b", "a+b", "x&y<z>'\"", "ü日本", "new\nline", "tab\tx", "%41", "q?x=1&y", "t~", "😀/x",
        "last-\U0010fffd", "dir/", "dir/sub/f", " ", "a%2Fb", "\u2028", "]]>", "e\u0301"]


def document(keys: list[str], prefixes: list[str], *, encoded: bool = True, truncated: bool = False,
             style: str = "plain", etag_ref: str = "&#34;") -> bytes:
    """A ListObjectsV2 answer as SeaweedFS writes it (``plain``), or in a shape only a full XML
    parser reads."""
    enc = (lambda v: quote_plus(v, safe="/")) if encoded else escape
    sep = "\n  " if style == "pretty" else ""
    items = []
    for i, key in enumerate(keys):
        etag = f"{etag_ref}{i:032x}{etag_ref}"
        when = f"2026-12-06T04:12:{i % 60:02d}{'.123' if i % 3 else ''}Z"
        key_text = enc(key)
        if style == "cdata" and i % 2:
            key_text = f"<![CDATA[{key_text}]]>" if "]]>" not in key_text else key_text
        parts = [f"<Key>{key_text}</Key>", f"<ETag>{etag}</ETag>", f"<Size>{i * 7}</Size>",
                 f"<LastModified>{when}</LastModified>"]
        if i % 4:
            parts.append("<StorageClass>STANDARD_IA</StorageClass>" if i % 5 == 0 else "<StorageClass>STANDARD</StorageClass>")
        if i % 6 == 1:
            parts.append("<Owner><ID>o</ID><DisplayName>d</DisplayName></Owner><ChecksumAlgorithm>CRC32</ChecksumAlgorithm>")
        if style == "comment" and i == 1:
            parts.insert(1, "<!-- a comment -->")
        items.append(f"<Contents>{sep.join(parts)}</Contents>")
    common = [f"<CommonPrefixes><Prefix>{enc(p)}</Prefix></CommonPrefixes>" for p in prefixes]
    head = [f"<Name>b</Name><Prefix>{enc('p r&e')}</Prefix><MaxKeys>1000</MaxKeys>",
            f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>"]
    tail = [f"<NextContinuationToken>{enc('tok en')}</NextContinuationToken>" if truncated else "",
            "<EncodingType>url</EncodingType>" if encoded else "", f"<KeyCount>{len(keys) + len(prefixes)}</KeyCount>"]
    body = sep.join(head + items + common + tail)
    if style == "prefixed":
        body = body.replace("<", "<s3:").replace("<s3:/", "</s3:")
        return (f'<?xml version="1.0" encoding="UTF-8"?>\n<s3:ListBucketResult xmlns:s3="{NS}">{body}'
                f"</s3:ListBucketResult>").encode()
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="{NS}">{sep}{body}{sep}</ListBucketResult>'.encode()


@pytest.mark.parametrize("style", ["plain", "pretty", "comment", "cdata", "prefixed"])
@pytest.mark.parametrize("encoded", [True, False])
@pytest.mark.parametrize("truncated", [True, False])
def test_a_page_reads_as_botocore_read_it(style: str, encoded: bool, truncated: bool) -> None:
    doc = document(KEYS, ["dir/", "p q/", "x+y/", "ü/"], encoded=encoded, truncated=truncated, style=style)
    assert parse_list_v2(doc) == botocore_page(doc)


@pytest.mark.parametrize("ref", ["&#34;", "&quot;", "&#x22;", '"'])
def test_references_in_text_resolve(ref: str) -> None:
    doc = document(["k"], [], etag_ref=ref)
    assert parse_list_v2(doc) == botocore_page(doc)
    assert parse_list_v2(doc).contents[0].etag == "0" * 32


def test_generated_pages_read_as_botocore_read_them() -> None:
    rng = random.Random(30)
    alphabet = "ab/ +%&<>'\"~.-_é日😀\t\n\r\x01\x7f\u2028\ufffd\U0010fffd"
    for _ in range(200):
        keys = sorted({"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))) for _ in range(rng.randint(0, 30))})
        encoded = rng.random() < 0.8
        if not encoded:  # XML 1.0 cannot carry control characters: such a remote must encode
            keys = [k for k in keys if not any(c in k for c in "\x01\r")]
        prefixes = sorted({k.split("/")[0] + "/" for k in keys if "/" in k})
        doc = document(keys, prefixes, encoded=encoded, truncated=rng.random() < 0.5,
                       style=rng.choice(["plain", "plain", "pretty", "comment"]))
        assert parse_list_v2(doc) == botocore_page(doc), doc


def test_an_empty_page_and_a_page_of_prefixes() -> None:
    for doc in (document([], []), document([], ["a/", "b/"], truncated=True)):
        assert parse_list_v2(doc) == botocore_page(doc)
    page = parse_list_v2(document([], ["a/", "b/"], truncated=True))
    assert page.common_prefixes == ["a/", "b/"] and page.is_truncated and page.next_marker == "b/"


def test_times_are_utc_datetimes() -> None:
    page = parse_list_v2(document(["k"], []))
    assert page.contents[0].last_modified == datetime(2026, 12, 6, 4, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize("doc", [
    b"", b"<ListBucketResult><Contents>", b"<Error><Code>NoSuchBucket</Code></Error>", b"not xml",
    b'<ListBucketResult xmlns="x"><Contents><Key>k</Key></Contents></ListBucketResult>',
    b'<ListBucketResult xmlns="x"><Contents><Key>k&#0;</Key><LastModified>2026-12-06T04:12:00Z</LastModified>'
    b"</Contents></ListBucketResult>",
    b'<ListBucketResult xmlns="x"><Contents><Key>k&nbsp;</Key><LastModified>2026-12-06T04:12:00Z</LastModified>'
    b"</Contents></ListBucketResult>",
    b'<ListBucketResult xmlns="x"><Contents><Key>\xff</Key><LastModified>2026-12-06T04:12:00Z</LastModified>'
    b"</Contents></ListBucketResult>",
])
def test_what_is_no_listing_is_malformed(doc: bytes) -> None:
    with pytest.raises(MalformedListing):
        parse_list_v2(doc)


@pytest.mark.parametrize("prefix,delimiter,start_after,max_keys", [
    ("", None, None, 1000), ("a b/ü", "/", "x+y~z", 3), ("日本/", "-", "%41&=?", 1), ("", "/", "", 2),
])
def test_the_query_is_the_one_botocore_sends(prefix: str, delimiter: str | None, start_after: str | None,
                                             max_keys: int) -> None:
    """Same parameters, same encoding: the canonical query botocore signs."""
    client = _SESSION.create_client("s3", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s",
                                    endpoint_url="http://127.0.0.1:1")
    params: dict[str, Any] = {"Bucket": "b", "Prefix": prefix, "MaxKeys": max_keys}
    if delimiter:
        params["Delimiter"] = delimiter
    if start_after:
        params["StartAfter"] = start_after
    captured: dict[str, str] = {}

    def capture(request: Any, **_: Any) -> Any:
        captured["url"] = request.url
        raise RuntimeError("captured")

    client.meta.events.register("before-send.s3.ListObjectsV2", capture)
    with pytest.raises(RuntimeError, match="captured"):
        client.list_objects_v2(**params)
    sent = sorted(captured["url"].split("?", 1)[1].split("&"))
    assert sent == sorted(list_query(prefix, delimiter, start_after, max_keys).split("&"))


def test_the_fast_decoding_is_unquote_plus() -> None:
    rng = random.Random(7)
    pieces = ["a", "/", "%2F", "%2f", "+", "%2B", "%20", "%", "%zz", "%C3%BC", "%C3", "~", "é"]
    for _ in range(5000):
        value = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))
        assert url_decoded(value) == unquote_plus(value), value
