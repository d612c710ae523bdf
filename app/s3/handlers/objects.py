"""Object operations: GET/HEAD with ranges and conditions, PUT, COPY, DELETE."""

from __future__ import annotations

from collections.abc import Callable

from app.domain.conditions import NO_CONDITIONS, Conditions, WriteConditions, check_conditions
from app.domain.errors import S3Error
from app.domain.objects import ObjectMeta
from app.domain.ranges import RangeRequest, parse_range
from app.s3 import xml
from app.s3.handlers.common import (
    content_headers,
    expected_digests,
    parse_copy_source,
    user_metadata,
)
from app.s3.request import S3Request
from app.s3.response import (
    Response,
    checksum_headers,
    object_checksum_headers,
    object_headers,
    response_overrides,
    with_overrides,
)
from app.services.gateway import Gateway
from app.services.reads.part_spans import part_bounds


def _target(req: S3Request) -> tuple[str, str]:
    assert req.bucket is not None and req.key is not None
    return req.bucket, req.key


def _check_version(req: S3Request) -> None:
    """Unversioned buckets: ``versionId=null`` names the current object (rclone sends it)."""
    version = req.query.get("versionId")
    if version is not None and version != "null":
        raise S3Error("NoSuchVersion", Key=req.key or "", VersionId=version)


def _request_conditions(req: S3Request) -> Conditions:
    """The shared NO_CONDITIONS when none is sent (building a frozen dataclass costs a hit ~2 us)."""
    h = req.headers
    if_match, if_none_match = h.get("if-match"), h.get("if-none-match")
    modified, unmodified = h.get("if-modified-since"), h.get("if-unmodified-since")
    if if_match is None and if_none_match is None and modified is None and unmodified is None:
        return NO_CONDITIONS
    return Conditions(if_match, if_none_match, modified, unmodified)


def _conditions(req: S3Request, meta: ObjectMeta) -> None:
    _request_conditions(req).check(meta.etag, meta.last_modified)


def _part_number(req: S3Request) -> int | None:
    """GET/HEAD ``partNumber``: 1..10000, and not together with a Range (S3's answers)."""
    raw = req.query.get("partNumber")
    if raw is None:
        return None
    if not raw.isdigit() or not 1 <= int(raw) <= 10000:
        raise S3Error("InvalidArgument", "Part number must be an integer between 1 and 10000, inclusive",
                      ArgumentName="partNumber", ArgumentValue=raw)
    if req.header("range"):
        raise S3Error("InvalidRequest", "Cannot specify both Range header and partNumber query parameter")
    return int(raw)


async def _part_span(gw: Gateway, req: S3Request, meta: ObjectMeta, part: int) -> tuple[RangeRequest | None, int]:
    """(the bytes of part ``part``, the object's part count); None: all of an empty single-part
    object. A multipart object's parts are those GetObjectAttributes lists (journal or remote)."""
    if "-" not in meta.etag:
        if part != 1:
            raise S3Error("InvalidPartNumber", "The requested partnumber is not satisfiable")
        return (RangeRequest.span(0, meta.size - 1) if meta.size else None), 1
    bucket, key = _target(req)
    found = await gw.object_attributes(bucket, key, req.tenant_id)
    if found.parts is None or found.meta.etag != meta.etag:
        raise S3Error("NotImplemented", "GET/HEAD by partNumber of this multipart object is not implemented "
                      "by Ferry: its remote does not list its parts.")
    first, last = part_bounds(found.parts, part)
    return RangeRequest.span(first, last), len(found.parts)


def _set_parts_count(headers: list[tuple[str, str]], count: int) -> None:
    headers[:] = [(name, value) for name, value in headers if name != "x-amz-mp-parts-count"]
    headers.append(("x-amz-mp-parts-count", str(count)))


async def head_object(req: S3Request, gw: Gateway) -> Response:
    _check_version(req)
    overrides = response_overrides(req.query)
    bucket, key = _target(req)
    meta = await gw.head_object(bucket, key, req.tenant_id)
    _conditions(req, meta)
    headers = object_headers(meta)
    part, count = _part_number(req), 1
    if part is not None:
        span, count = await _part_span(gw, req, meta, part)
        _set_parts_count(headers, count)
        if span is None:
            return Response(200, with_overrides(overrides, headers), b"", meta.size)
        rng = span.resolve(meta.size)
        assert rng is not None
        headers.append(("Content-Range", rng.content_range))
        return Response(206, with_overrides(overrides, headers), b"", rng.length)
    rng = parse_range(req.header("range"), meta.size)
    if rng is not None:
        headers.append(("Content-Range", rng.content_range))
        return Response(206, with_overrides(overrides, headers), b"", rng.length)
    if req.header("x-amz-checksum-mode", "").upper() == "ENABLED":
        headers += object_checksum_headers(meta.checksums)
    return Response(200, with_overrides(overrides, headers), b"", meta.size)


async def get_object(req: S3Request, gw: Gateway) -> Response:
    _check_version(req)
    overrides = response_overrides(req.query)
    bucket, key = _target(req)
    conditions = _request_conditions(req)
    wanted = RangeRequest.from_header(req.header("range"))
    part, count = _part_number(req), 1
    if part is not None:
        span, count = await _part_span(gw, req, await gw.head_object(bucket, key, req.tenant_id), part)
        wanted = span or wanted
    # The service judges the conditions, once, on whatever answers (app/services/reads/service.py).
    read = await gw.get_object(bucket, key, wanted, req.tenant_id, conditions=conditions, file_ranges=req.zero_copy)
    headers = object_headers(read.meta)
    if part is not None:
        _set_parts_count(headers, count)
    # Bytes already read (a small hit) go out as one body message, not through a stream.
    body = read.data if read.data is not None else read.stream
    if read.byte_range is not None:
        headers.append(("Content-Range", read.byte_range.content_range))
        return Response(206, with_overrides(overrides, headers), body, read.byte_range.length, read.files)
    if req.header("x-amz-checksum-mode", "").upper() == "ENABLED":
        headers += object_checksum_headers(read.meta.checksums)
    return Response(200, with_overrides(overrides, headers), body, read.meta.size, read.files)


async def put_object(req: S3Request, gw: Gateway) -> Response:
    bucket, key = _target(req)
    body = req.body()
    if body.declared_size is None and body.declared_raw is None and "chunked" not in req.header(
            "transfer-encoding", "").lower():
        raise S3Error("MissingContentLength")
    result = await gw.put_object(bucket, key, body, content_headers(req), user_metadata(req),
                                 expected_digests(req, body.declared_size), write_conditions(req),
                                 tenant_id=req.tenant_id)
    headers = [("ETag", f'"{result.etag}"')] + checksum_headers(result.checksums)
    return Response(200, headers)


def write_conditions(req: S3Request) -> WriteConditions:
    """If-Match / If-None-Match of a write, judged against the key's newest version."""
    h = req.headers
    return WriteConditions.parse(h.get("if-match"), h.get("if-none-match"), h.get("amz-sdk-invocation-id"))


def _source_conditions(req: S3Request, header: str) -> Callable[[ObjectMeta], None]:
    """A copy's or rename's conditions on its source (``x-amz-copy-source-if-*``,
    ``x-amz-rename-source-if-*``), judged against the source once it is read."""
    h = req.headers

    def check(meta: ObjectMeta) -> None:
        check_conditions(meta.etag, meta.last_modified, h.get(f"{header}-if-match"),
                         h.get(f"{header}-if-none-match"), h.get(f"{header}-if-modified-since"),
                         h.get(f"{header}-if-unmodified-since"), copy_source=True)

    return check


async def copy_object(req: S3Request, gw: Gateway) -> Response:
    bucket, key = _target(req)
    src_bucket, src_key = parse_copy_source(req.headers["x-amz-copy-source"])
    directive = req.header("x-amz-metadata-directive", "COPY").upper()
    if directive not in ("COPY", "REPLACE"):
        raise S3Error("InvalidArgument", "Unknown metadata directive.", ArgumentName="x-amz-metadata-directive")
    etag, modified = await gw.copy_object(bucket, key, src_bucket, src_key, directive == "REPLACE",
                                          content_headers(req), user_metadata(req), _source_conditions(req, "x-amz-copy-source"),
                                          write_conditions(req), tenant_id=req.tenant_id)
    body = xml.document("CopyObjectResult", [xml.element("LastModified", xml.iso8601(modified)),
                                             xml.element("ETag", f'"{etag}"')])
    return Response.xml(body)


async def rename_object(req: S3Request, gw: Gateway) -> Response:
    """RenameObject (``PUT /b/k?renameObject``, source ``x-amz-rename-source: /b/old``): within
    one bucket, atomic for every reader (services/writes/service.py)."""
    bucket, key = _target(req)
    source = req.header("x-amz-rename-source", "")
    if not source:
        raise S3Error("InvalidArgument", "x-amz-rename-source is required", ArgumentName="x-amz-rename-source")
    if not source.lstrip("/").startswith(f"{bucket}/"):
        source = f"/{bucket}/{source.lstrip('/')}"  # any other value is a key of the target's bucket
    _, src_key = parse_copy_source(source)
    await gw.rename_object(bucket, key, src_key, _source_conditions(req, "x-amz-rename-source"), write_conditions(req),
                           tenant_id=req.tenant_id)
    return Response(200)


async def delete_object(req: S3Request, gw: Gateway) -> Response:
    _check_version(req)
    bucket, key = _target(req)
    await gw.delete_object(bucket, key, tenant_id=req.tenant_id)
    return Response(204)
