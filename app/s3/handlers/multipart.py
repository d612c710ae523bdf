"""Multipart uploads: parts are held locally until Complete."""

from __future__ import annotations

from app.domain.crc_combine import checksum_type, type_of
from app.domain.errors import S3Error
from app.s3 import xml
from app.s3.handlers.common import (
    check_encoding,
    content_headers,
    encode_name,
    expected_digests,
    int_arg,
    parse_copy_source,
    user_metadata,
)
from app.s3.handlers.objects import _source_conditions, write_conditions
from app.s3.request import S3Request
from app.s3.response import Response, checksum_headers
from app.services.gateway import Gateway

OWNER = "<ID>ferry</ID><DisplayName>ferry</DisplayName>"


def _target(req: S3Request) -> tuple[str, str]:
    assert req.bucket is not None and req.key is not None
    return req.bucket, req.key


def _part_number(req: S3Request) -> int:
    raw = req.query.get("partNumber", "")
    try:
        return int(raw)
    except ValueError as exc:
        raise S3Error("InvalidArgument", "Part number must be an integer between 1 and 10000, inclusive",
                      ArgumentName="partNumber", ArgumentValue=raw) from exc


async def create_upload(req: S3Request, gw: Gateway) -> Response:
    bucket, key = _target(req)
    algorithm = req.header("x-amz-checksum-algorithm")
    algorithm = algorithm.upper() if algorithm else None
    kind = checksum_type(algorithm, req.header("x-amz-checksum-type"))
    info = await gw.create_upload(bucket, key, req.tenant_id, content_headers(req), user_metadata(req),
                                  algorithm, kind)
    body = xml.document("InitiateMultipartUploadResult", [
        xml.element("Bucket", bucket), xml.element("Key", key), xml.element("UploadId", info.upload_id)])
    headers = [("x-amz-checksum-algorithm", algorithm), ("x-amz-checksum-type", kind or "")] if algorithm else []
    response = Response.xml(body)
    response.headers += headers
    return response


async def upload_part(req: S3Request, gw: Gateway) -> Response:
    bucket, key = _target(req)
    body = req.body()
    if body.declared_size is None and body.declared_raw is None and "chunked" not in req.header(
            "transfer-encoding", "").lower():
        raise S3Error("MissingContentLength")
    result = await gw.upload_part(bucket, key, req.query["uploadId"], _part_number(req), body,
                                  expected_digests(req, body.declared_size))
    return Response(200, [("ETag", f'"{result.etag}"')] + checksum_headers(result.checksums))


async def upload_part_copy(req: S3Request, gw: Gateway) -> Response:
    bucket, key = _target(req)
    src_bucket, src_key = parse_copy_source(req.headers["x-amz-copy-source"])
    etag, modified = await gw.upload_part_copy(bucket, key, req.query["uploadId"], _part_number(req),
                                               src_bucket, src_key, req.header("x-amz-copy-source-range"),
                                               _source_conditions(req, "x-amz-copy-source"))
    body = xml.document("CopyPartResult", [xml.element("LastModified", xml.iso8601(modified)),
                                           xml.element("ETag", f'"{etag}"')])
    return Response.xml(body)


async def complete_upload(req: S3Request, gw: Gateway) -> Response:
    bucket, key = _target(req)
    conditions = write_conditions(req)
    parts = xml.parse_complete_multipart(await req.read_body(4 * 1024 * 1024))
    etag, checksums = await gw.complete_upload_result(bucket, key, req.query["uploadId"], parts, conditions)
    items = [xml.element("Location", f"/{bucket}/{key}"), xml.element("Bucket", bucket),
             xml.element("Key", key), xml.element("ETag", f'"{etag}"')]
    for alg, value in checksums.items():
        items.append(xml.element(f"Checksum{alg}", value))
    if checksums:
        items.append(xml.element("ChecksumType", type_of(next(iter(checksums.values())))))
    return Response.xml(xml.document("CompleteMultipartUploadResult", items))


async def abort_upload(req: S3Request, gw: Gateway) -> Response:
    bucket, key = _target(req)
    await gw.abort_upload(bucket, key, req.query["uploadId"])
    return Response(204)


async def list_parts(req: S3Request, gw: Gateway) -> Response:
    bucket, key = _target(req)
    marker = int_arg(req, "part-number-marker", 0, 0, 10_000)
    max_parts = int_arg(req, "max-parts", 1000)
    info, parts, truncated = await gw.list_parts(bucket, key, req.query["uploadId"], marker, max_parts)
    items = [
        xml.element("Bucket", bucket), xml.element("Key", key), xml.element("UploadId", info.upload_id),
        f"<Initiator>{OWNER}</Initiator><Owner>{OWNER}</Owner>",
        xml.element("StorageClass", "STANDARD"),
        xml.element("PartNumberMarker", marker),
        xml.element("NextPartNumberMarker", parts[-1].part_number if parts else marker),
        xml.element("MaxParts", max_parts),
        xml.element("IsTruncated", "true" if truncated else "false"),
    ]
    if info.checksum_algorithm:
        items.append(xml.element("ChecksumAlgorithm", info.checksum_algorithm))
    if info.checksum_type:
        items.append(xml.element("ChecksumType", info.checksum_type))
    for part in parts:
        items.append(
            "<Part>" + xml.element("PartNumber", part.part_number)
            + xml.element("LastModified", xml.iso8601(part.last_modified))
            + xml.element("ETag", f'"{part.etag}"') + xml.element("Size", part.size)
            + "".join(xml.element(f"Checksum{alg}", v) for alg, v in part.checksums.items())
            + "</Part>")
    return Response.xml(xml.document("ListPartsResult", items))


async def list_uploads(req: S3Request, gw: Gateway) -> Response:
    assert req.bucket is not None
    encoding = check_encoding(req)
    prefix = req.query.get("prefix", "")
    key_marker = req.query.get("key-marker") or None
    max_uploads = int_arg(req, "max-uploads", 1000)
    uploads, truncated = await gw.list_uploads(req.bucket, prefix, key_marker, max_uploads)
    items = [
        xml.element("Bucket", req.bucket),
        xml.element("KeyMarker", encode_name(key_marker or "", encoding)),
        xml.element("UploadIdMarker", req.query.get("upload-id-marker", "")),
        xml.element("Prefix", encode_name(prefix, encoding)),
        xml.element("MaxUploads", max_uploads),
        xml.element("EncodingType", encoding),
        xml.element("IsTruncated", "true" if truncated else "false"),
    ]
    if truncated and uploads:
        items.append(xml.element("NextKeyMarker", encode_name(uploads[-1].key, encoding)))
        items.append(xml.element("NextUploadIdMarker", uploads[-1].upload_id))
    for up in uploads:
        items.append(
            "<Upload>" + xml.element("Key", encode_name(up.key, encoding))
            + xml.element("UploadId", up.upload_id)
            + f"<Initiator>{OWNER}</Initiator><Owner>{OWNER}</Owner>"
            + xml.element("StorageClass", "STANDARD")
            + xml.element("Initiated", xml.iso8601(up.initiated)) + "</Upload>")
    return Response.xml(xml.document("ListMultipartUploadsResult", items))
