"""Helpers shared by handlers: request headers to object attributes, integer arguments."""

from __future__ import annotations

from urllib.parse import quote, unquote_plus

from app.domain.checksums import ALGORITHMS
from app.domain.errors import S3Error
from app.domain.objects import CONTENT_HEADERS
from app.s3.request import S3Request
from app.services.gateway import ExpectedDigests

MAX_METADATA_BYTES = 2048


def content_headers(req: S3Request) -> dict[str, str]:
    headers = {name: req.headers[name] for name in CONTENT_HEADERS if name in req.headers}
    if "content-encoding" in headers:
        # aws-chunked is transfer framing (removed by the decoder), never part of the object.
        # The other codings are kept as the client wrote them (spacing included).
        codings = headers["content-encoding"].split(",")
        kept = ",".join(c for c in codings if c.strip().lower() != "aws-chunked").strip()
        if kept:
            headers["content-encoding"] = kept
        else:
            del headers["content-encoding"]
    # S3's default, stated explicitly: a remote that sniffs types (SeaweedFS does) must store the
    # same Content-Type the gateway served while the object was buffered.
    headers.setdefault("content-type", "binary/octet-stream")
    return headers


def user_metadata(req: S3Request) -> dict[str, str]:
    meta = {k[len("x-amz-meta-"):]: v for k, v in req.headers.items() if k.startswith("x-amz-meta-")}
    if sum(len(k) + len(v) for k, v in meta.items()) > MAX_METADATA_BYTES:
        raise S3Error("MetadataTooLarge", MaxSizeAllowed=str(MAX_METADATA_BYTES))
    return meta


def expected_digests(req: S3Request, declared_size: int | None) -> ExpectedDigests:
    """Content-MD5 and x-amz-checksum-* headers, plus algorithms announced for trailers."""
    headers = req.headers
    checksums = {alg: headers[f"x-amz-checksum-{alg.lower()}"] for alg in ALGORITHMS
                 if f"x-amz-checksum-{alg.lower()}" in headers}
    algorithms = set(checksums)
    sdk_alg = headers.get("x-amz-sdk-checksum-algorithm") or headers.get("x-amz-checksum-algorithm")
    if sdk_alg:
        if sdk_alg.upper() not in ALGORITHMS:
            raise S3Error("InvalidRequest", f"Checksum algorithm {sdk_alg} is not supported")
        algorithms.add(sdk_alg.upper())
    for name in (headers.get("x-amz-trailer") or "").split(","):
        name = name.strip().lower()
        if name.startswith("x-amz-checksum-"):
            alg = name[len("x-amz-checksum-"):].upper()
            if alg not in ALGORITHMS:
                raise S3Error("InvalidRequest", f"Checksum algorithm {alg} is not supported")
            algorithms.add(alg)
    return ExpectedDigests(headers.get("content-md5"), checksums, algorithms, declared_size)


def int_arg(req: S3Request, name: str, default: int, lo: int = 0, hi: int = 1000) -> int:
    return int_arg_value(req.query.get(name), name, default, lo, hi)


def int_arg_value(raw: str | None, name: str, default: int, lo: int = 0, hi: int = 1000) -> int:
    """An integer argument (query parameter or header), S3's errors for bad ones, capped at ``hi``."""
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise S3Error("InvalidArgument", f"Provided {name} not an integer or within integer range",
                      ArgumentName=name, ArgumentValue=raw) from exc
    if value < lo:
        raise S3Error("InvalidArgument", f"Argument {name} must be an integer between {lo} and 2147483647",
                      ArgumentName=name, ArgumentValue=raw)
    return min(value, hi)


def parse_copy_source(value: str) -> tuple[str, str]:
    """``x-amz-copy-source``: ``[/]bucket/key[?versionId=...]``, URL-encoded."""
    source, _, query = value.partition("?")
    if query:
        params = dict(p.partition("=")[::2] for p in query.split("&"))
        if params.get("versionId", "null") != "null":
            raise S3Error("NoSuchVersion")
    # Form-decoded like S3 (and MinIO, SeaweedFS): '+' is a space (s5cmd, Go's QueryEscape, send
    # it so); SDKs send a literal plus as %2B.
    decoded = unquote_plus(source)
    if decoded.startswith("/"):
        decoded = decoded[1:]
    bucket, _, key = decoded.partition("/")
    if not bucket or not key:
        raise S3Error("InvalidArgument", "Invalid copy source object key", ArgumentName="x-amz-copy-source")
    return bucket, key


def encode_name(value: str, encoding: str | None) -> str:
    """``encoding-type=url``: percent-encode keys so any byte survives XML."""
    return quote(value, safe="/") if encoding == "url" else value


def check_encoding(req: S3Request) -> str | None:
    encoding = req.query.get("encoding-type")
    if encoding not in (None, "url"):
        raise S3Error("InvalidArgument", "Invalid Encoding Method specified in Request",
                      ArgumentName="encoding-type", ArgumentValue=encoding or "")
    return encoding
