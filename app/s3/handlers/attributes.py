"""GetObjectAttributes: ETag, Checksum, ObjectParts (paginated), StorageClass, ObjectSize."""

from __future__ import annotations

from app.domain.errors import S3Error
from app.domain.objects import ObjectAttributes, PartAttributes
from app.s3 import xml
from app.s3.handlers.common import int_arg_value
from app.s3.handlers.objects import _check_version, _target
from app.s3.request import S3Request
from app.s3.response import Response, http_date
from app.services.gateway import Gateway

ATTRIBUTES = ("ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize")
MAX_PARTS = 1000


def requested_attributes(req: S3Request) -> set[str]:
    raw = req.header("x-amz-object-attributes") or ""
    names = {name.strip() for name in raw.split(",") if name.strip()}
    if not names:
        raise S3Error("InvalidRequest", "The x-amz-object-attributes header specifying the attributes to be "
                      "retrieved is either missing or empty")
    unknown = names.difference(ATTRIBUTES)
    if unknown:
        raise S3Error("InvalidArgument", "Invalid attribute name specified.", ArgumentName="x-amz-object-attributes",
                      ArgumentValue=sorted(unknown)[0])
    return names


async def get_object_attributes(req: S3Request, gw: Gateway) -> Response:
    _check_version(req)
    names = requested_attributes(req)
    max_parts = int_arg_value(req.header("x-amz-max-parts"), "x-amz-max-parts", MAX_PARTS, hi=MAX_PARTS)
    marker = int_arg_value(req.header("x-amz-part-number-marker"), "x-amz-part-number-marker", 0, hi=10_000)
    bucket, key = _target(req)
    found = await gw.object_attributes(bucket, key, req.tenant_id)
    meta = found.meta
    parts = [
        xml.element("ETag", meta.etag) if "ETag" in names else "",
        _checksum(found) if "Checksum" in names else "",
        _parts(found.parts, marker, max_parts) if "ObjectParts" in names and found.parts is not None else "",
        xml.element("StorageClass", meta.storage_class) if "StorageClass" in names else "",
        xml.element("ObjectSize", meta.size) if "ObjectSize" in names else "",
    ]
    response = Response.xml(xml.document("GetObjectAttributesResponse", parts))
    response.headers.append(("Last-Modified", http_date(meta)))
    return response


def _checksum(found: ObjectAttributes) -> str:
    values = found.meta.checksums
    if not values:
        return ""
    inner = "".join(xml.element(f"Checksum{alg}", value) for alg, value in sorted(values.items()))
    composite = any("-" in value for value in values.values())
    return f"<Checksum>{inner}{xml.element('ChecksumType', 'COMPOSITE' if composite else 'FULL_OBJECT')}</Checksum>"


def _parts(parts: list[PartAttributes], marker: int, max_parts: int) -> str:
    after = [p for p in parts if p.number > marker]
    page = after[:max_parts]
    truncated = len(after) > len(page)
    body = "".join(
        "<Part>"
        + "".join(xml.element(f"Checksum{alg}", value) for alg, value in sorted(p.checksums.items()))
        + xml.element("PartNumber", p.number)
        + xml.element("Size", p.size)
        + "</Part>"
        for p in page
    )
    return ("<ObjectParts>" + xml.element("PartsCount", len(parts)) + xml.element("PartNumberMarker", marker)
            + xml.element("NextPartNumberMarker", page[-1].number if page else marker)
            + xml.element("MaxParts", max_parts) + xml.element("IsTruncated", "true" if truncated else "false")
            + body + "</ObjectParts>")
