"""Bucket operations and listings."""

from __future__ import annotations

from datetime import datetime

from app.domain.checksums import BodyDigests, verify_expected
from app.domain.errors import S3Error
from app.domain.objects import ListPage
from app.s3 import xml
from app.s3.handlers.common import check_encoding, encode_name, expected_digests, int_arg
from app.s3.request import S3Request
from app.s3.response import Response
from app.s3.tokens import decode_token, encode_token
from app.services.gateway import Gateway

OWNER = "<Owner><ID>ferry</ID><DisplayName>ferry</DisplayName></Owner>"


def _bucket(req: S3Request) -> str:
    assert req.bucket is not None
    return req.bucket


async def list_buckets(req: S3Request, gw: Gateway) -> Response:
    buckets = await gw.list_buckets(req.tenant_id)
    inner = OWNER + "<Buckets>" + "".join(
        f"<Bucket>{xml.element('Name', b.name)}{xml.element('CreationDate', xml.iso8601(b.created))}</Bucket>"
        for b in buckets
    ) + "</Buckets>"
    return Response.xml(xml.document("ListAllMyBucketsResult", inner))


async def create_bucket(req: S3Request, gw: Gateway) -> Response:
    body = await req.read_body(64 * 1024)
    location = xml.parse_location_constraint(body)
    await gw.create_bucket(_bucket(req), location, req.tenant_id)
    return Response(200, [("Location", f"/{req.bucket}")])


async def head_bucket(req: S3Request, gw: Gateway) -> Response:
    await gw.head_bucket(_bucket(req))
    return Response(200, [("x-amz-bucket-region", gw.region)])


async def delete_bucket(req: S3Request, gw: Gateway) -> Response:
    await gw.delete_bucket(_bucket(req))
    return Response(204)


async def get_bucket_location(req: S3Request, gw: Gateway) -> Response:
    location = await gw.bucket_location(_bucket(req))
    if location in (None, "", "us-east-1"):
        body = xml.HEADER + f'<LocationConstraint xmlns="{xml.NS}"/>'
    else:
        body = xml.HEADER + f'<LocationConstraint xmlns="{xml.NS}">{xml.text(location)}</LocationConstraint>'
    return Response.xml(body.encode())


async def get_bucket_versioning(req: S3Request, gw: Gateway) -> Response:
    await gw.head_bucket(_bucket(req))
    return Response.xml(xml.HEADER.encode() + f'<VersioningConfiguration xmlns="{xml.NS}"/>'.encode())


def _contents(page: ListPage, encoding: str | None, *, owner: bool) -> str:
    """``<Contents>`` entries; ``owner`` adds each one's ``<Owner>`` (ListObjects v1 always,
    v2 with ``fetch-owner=true``, as S3 does). One f-string per entry, each timestamp formatted
    once per page (a page's keys often share their second): the generic ``xml.element`` calls
    were a quarter of the gateway's CPU for a 1,000-key page (py-spy, issue 30)."""
    owned = OWNER if owner else ""
    stamps: dict[datetime, str] = {}
    out = []
    for c in page.contents:
        stamp = stamps.get(c.last_modified)
        if stamp is None:
            stamp = stamps[c.last_modified] = xml.iso8601(c.last_modified)
        out.append(f"<Contents><Key>{xml.text(encode_name(c.key, encoding))}</Key><LastModified>{stamp}"
                   f"</LastModified><ETag>&quot;{xml.text(c.etag)}&quot;</ETag><Size>{c.size}</Size>{owned}"
                   f"<StorageClass>{xml.text(c.storage_class)}</StorageClass></Contents>")
    return "".join(out)


def _prefixes(page: ListPage, encoding: str | None) -> str:
    return "".join(f"<CommonPrefixes>{xml.element('Prefix', encode_name(p, encoding))}</CommonPrefixes>"
                   for p in page.common_prefixes)


def _listing_args(req: S3Request) -> tuple[str, str | None, int, str | None]:
    encoding = check_encoding(req)
    prefix = req.query.get("prefix", "")
    delimiter = req.query.get("delimiter") or None
    max_keys = int_arg(req, "max-keys", 1000)
    return prefix, delimiter, max_keys, encoding


async def list_objects_v2(req: S3Request, gw: Gateway) -> Response:
    prefix, delimiter, max_keys, encoding = _listing_args(req)
    sent_token = req.query.get("continuation-token")  # echoed as sent, an empty one too (as S3 does)
    token = sent_token or None  # an empty token asks for the first page
    start_after = req.query.get("start-after")
    marker = start_after
    if token is not None:
        marker = decode_token(token)
        if start_after and start_after > marker:
            marker = start_after
    page = await gw.list_objects(_bucket(req), prefix, delimiter, marker or None, max_keys)
    parts = [
        xml.element("Name", req.bucket),
        xml.element("Prefix", encode_name(prefix, encoding)),
    ]
    if delimiter:
        parts.append(xml.element("Delimiter", encode_name(delimiter, encoding)))
    parts += [
        xml.element("MaxKeys", max_keys),
        xml.element("EncodingType", encoding),
        xml.element("KeyCount", len(page.contents) + len(page.common_prefixes)),
        xml.element("IsTruncated", "true" if page.is_truncated else "false"),
        xml.element("ContinuationToken", sent_token),
        xml.element("StartAfter", encode_name(start_after, encoding) if start_after else None),
    ]
    if page.is_truncated and page.next_marker:
        parts.append(xml.element("NextContinuationToken", encode_token(page.next_marker)))
    parts += [_contents(page, encoding, owner=req.query.get("fetch-owner") == "true"), _prefixes(page, encoding)]
    return Response.xml(xml.document("ListBucketResult", parts))


async def list_objects_v1(req: S3Request, gw: Gateway) -> Response:
    prefix, delimiter, max_keys, encoding = _listing_args(req)
    marker = req.query.get("marker") or None
    page = await gw.list_objects(_bucket(req), prefix, delimiter, marker, max_keys)
    parts = [
        xml.element("Name", req.bucket),
        xml.element("Prefix", encode_name(prefix, encoding)),
        xml.element("Marker", encode_name(marker or "", encoding)),
        xml.element("MaxKeys", max_keys),
    ]
    if delimiter:
        parts.append(xml.element("Delimiter", encode_name(delimiter, encoding)))
    parts += [
        xml.element("EncodingType", encoding),
        xml.element("IsTruncated", "true" if page.is_truncated else "false"),
    ]
    if page.is_truncated and page.next_marker:
        parts.append(xml.element("NextMarker", encode_name(page.next_marker, encoding)))
    parts += [_contents(page, encoding, owner=True), _prefixes(page, encoding)]
    return Response.xml(xml.document("ListBucketResult", parts))


async def list_object_versions(req: S3Request, gw: Gateway) -> Response:
    prefix, delimiter, max_keys, encoding = _listing_args(req)
    key_marker = req.query.get("key-marker") or None
    page = await gw.list_versions(_bucket(req), prefix, delimiter, key_marker, max_keys)
    parts = [
        xml.element("Name", req.bucket),
        xml.element("Prefix", encode_name(prefix, encoding)),
        xml.element("KeyMarker", encode_name(key_marker or "", encoding)),
        xml.element("VersionIdMarker", req.query.get("version-id-marker", "")),
        xml.element("MaxKeys", max_keys),
    ]
    if delimiter:
        parts.append(xml.element("Delimiter", encode_name(delimiter, encoding)))
    parts += [
        xml.element("EncodingType", encoding),
        xml.element("IsTruncated", "true" if page.is_truncated else "false"),
    ]
    if page.is_truncated and page.next_marker:
        parts.append(xml.element("NextKeyMarker", encode_name(page.next_marker, encoding)))
        parts.append(xml.element("NextVersionIdMarker", "null"))
    for item in page.contents:
        tag = "DeleteMarker" if item.is_delete_marker else "Version"
        parts.append(
            f"<{tag}>"
            + xml.element("Key", encode_name(item.key, encoding))
            + xml.element("VersionId", item.version_id or "null")
            + xml.element("IsLatest", "true" if item.is_latest else "false")
            + xml.element("LastModified", xml.iso8601(item.last_modified))
            + ("" if item.is_delete_marker else xml.element("ETag", f'"{item.etag}"')
               + xml.element("Size", item.size) + xml.element("StorageClass", item.storage_class))
            + OWNER
            + f"</{tag}>"
        )
    parts.append(_prefixes(page, encoding))
    return Response.xml(xml.document("ListVersionsResult", parts))


def _check_integrity(req: S3Request, body: bytes) -> None:
    """S3 requires DeleteObjects to carry Content-MD5 or (since its default integrity
    protections) an x-amz-checksum-* header or trailer, and checks the one given."""
    expected = expected_digests(req, len(body))
    if expected.content_md5 is None and not expected.algorithms:
        raise S3Error("InvalidRequest", "Missing required header for this request: Content-MD5")
    digests = BodyDigests(expected.algorithms)
    digests.update(body)
    verify_expected(digests, expected.content_md5, expected.checksums)


async def delete_objects(req: S3Request, gw: Gateway) -> Response:
    body = await req.read_body(2 * 1024 * 1024)
    _check_integrity(req, body)
    keys, quiet = xml.parse_delete(body)
    plain: list[str] = []
    failures: dict[str, tuple[str, str]] = {}
    for key, version in keys:
        if version not in (None, "null"):
            failures[key] = ("NoSuchVersion", "The specified version does not exist.")
        else:
            plain.append(key)
    failures.update(await gw.delete_objects(_bucket(req), plain, tenant_id=req.tenant_id))
    parts = []
    for key, version in keys:
        if key in failures:
            code, message = failures[key]
            parts.append("<Error>" + xml.element("Key", key) + xml.element("Code", code)
                         + xml.element("Message", message) + "</Error>")
        elif not quiet:
            parts.append("<Deleted>" + xml.element("Key", key)
                         + (xml.element("VersionId", version) if version else "") + "</Deleted>")
    return Response.xml(xml.document("DeleteResult", parts))


async def not_implemented(req: S3Request, gw: Gateway) -> Response:
    raise S3Error("NotImplemented", "This operation is not implemented by Ferry.")
