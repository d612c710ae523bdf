"""S3 XML: rendering responses and parsing the few request bodies S3 defines.

Rendering builds strings directly (fast, predictable namespaces); parsing uses the stdlib
expat parser, whose entity-expansion limits (expat >= 2.4) defuse billion-laughs bodies.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from datetime import UTC, datetime
from urllib.parse import quote
from xml.sax.saxutils import escape

from app.domain.errors import S3Error

NS = "http://s3.amazonaws.com/doc/2006-03-01/"
HEADER = '<?xml version="1.0" encoding="UTF-8"?>\n'


def iso8601(when: datetime) -> str:
    """S3's timestamp form: millisecond precision, Z suffix."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    when = when.astimezone(UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


_NEEDS_ESCAPE = re.compile('[&<>"\x00-\x08\x0b\x0c\x0e-\x1f\r]')


def text(value: object) -> str:
    """Escape text for XML; characters XML 1.0 cannot carry become numeric references."""
    raw = str(value)
    if _NEEDS_ESCAPE.search(raw) is None:  # most text: nothing to escape (one C scan)
        return raw
    out = escape(raw, {'"': "&quot;"})
    if any(ord(c) < 0x20 and c not in "\t\n\r" for c in out):
        out = "".join(f"&#x{ord(c):X};" if ord(c) < 0x20 and c not in "\t\n\r" else c for c in out)
    if "\r" in out:
        out = out.replace("\r", "&#13;")
    return out


def element(name: str, value: object | None) -> str:
    if value is None:
        return ""
    return f"<{name}>{text(value)}</{name}>"


def document(root: str, inner: Iterable[str] | str) -> bytes:
    body = inner if isinstance(inner, str) else "".join(inner)
    return (HEADER + f'<{root} xmlns="{NS}">' + body + f"</{root}>").encode()


def _xml_safe(value: object) -> str:
    """Percent-encode what XML 1.0 cannot carry even as a reference (NUL, C0 controls, lone
    surrogates): an error document must always parse, whatever key the request named."""
    raw = str(value)
    if not _XML_ILLEGAL.search(raw):
        return raw
    return _XML_ILLEGAL.sub(lambda m: quote(m.group(0).encode("utf-8", "surrogatepass"), safe=""), raw)


_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def error_document(code: str, message: str, resource: str | None, request_id: str,
                   fields: dict[str, str]) -> bytes:
    parts = [element("Code", code), element("Message", message)]
    parts += [element(k, _xml_safe(v)) for k, v in fields.items()]
    if resource:
        parts.append(element("Resource", _xml_safe(resource)))
    parts.append(element("RequestId", request_id))
    parts.append(element("HostId", request_id))
    return (HEADER + "<Error>" + "".join(parts) + "</Error>").encode()


def parse(body: bytes) -> ET.Element:
    """Parse a request body; any malformation is S3's MalformedXML, never a 500."""
    if not body.strip():
        raise S3Error("MalformedXML")
    if b"<!DOCTYPE" in body or b"<!ENTITY" in body:
        raise S3Error("MalformedXML", "DTDs are not allowed")
    # The byte check above misses other encodings (a UTF-16 body): the parser refuses any DTD.
    parser = ET.XMLParser(target=_NoDoctypeBuilder())
    try:
        parser.feed(body)
        root = parser.close()
    except (ET.ParseError, ValueError) as exc:
        raise S3Error("MalformedXML") from exc
    return root


class _NoDoctypeBuilder(ET.TreeBuilder):
    def doctype(self, *_: object) -> None:  # called by the parser at the DTD, before any content
        raise ValueError("DTDs are not allowed")


def local(tag: str) -> str:
    """Tag name without its namespace (clients send with and without the S3 namespace)."""
    return tag.rsplit("}", 1)[-1]


def children(node: ET.Element, name: str) -> list[ET.Element]:
    return [c for c in node if local(c.tag) == name]


def child_text(node: ET.Element, name: str) -> str | None:
    for c in node:
        if local(c.tag) == name:
            return c.text or ""
    return None


def parse_complete_multipart(body: bytes) -> list[tuple[int, str, dict[str, str]]]:
    """(part number, etag without quotes, checksums) in the order given."""
    root = parse(body)
    if local(root.tag) != "CompleteMultipartUpload":
        raise S3Error("MalformedXML")
    parts: list[tuple[int, str, dict[str, str]]] = []
    for part in children(root, "Part"):
        number_text = child_text(part, "PartNumber")
        etag = child_text(part, "ETag")
        if number_text is None or etag is None:
            raise S3Error("MalformedXML")
        try:
            number = int(number_text)
        except ValueError as exc:
            raise S3Error("MalformedXML") from exc
        checksums = {}
        for alg in ("CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"):
            value = child_text(part, "Checksum" + alg)
            if value:
                checksums[alg] = value
        parts.append((number, etag.strip().strip('"'), checksums))
    if not parts:
        raise S3Error("MalformedXML", "The XML you provided was not well-formed or did not validate "
                      "against our published schema: no parts")
    return parts


def parse_delete(body: bytes) -> tuple[list[tuple[str, str | None]], bool]:
    """Keys (with optional version id) and the Quiet flag of a DeleteObjects body."""
    root = parse(body)
    if local(root.tag) != "Delete":
        raise S3Error("MalformedXML")
    quiet = (child_text(root, "Quiet") or "").strip().lower() == "true"
    keys: list[tuple[str, str | None]] = []
    for obj in children(root, "Object"):
        key = child_text(obj, "Key")
        if key is None:
            raise S3Error("MalformedXML")
        keys.append((key, child_text(obj, "VersionId")))
    if not keys or len(keys) > 1000:
        raise S3Error("MalformedXML")
    return keys, quiet


def parse_location_constraint(body: bytes) -> str | None:
    if not body.strip():
        return None
    root = parse(body)
    if local(root.tag) != "CreateBucketConfiguration":
        raise S3Error("MalformedXML")
    value = child_text(root, "LocationConstraint")
    return value or None
