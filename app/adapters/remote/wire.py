"""What crosses the wire to the remote: boto3 failures as S3 errors, content headers and
metadata as boto3 parameters, header strings as the client's bytes, bodies as they arrive."""

from __future__ import annotations

import contextlib
import http.client
from collections.abc import Iterator
from typing import Any

import botocore.exceptions
import urllib3

from app.adapters.remote.get import meta_from_headers
from app.domain.errors import ERROR_TABLE, S3Error
from app.domain.objects import (
    ObjectMeta,
)

_CONTENT_PARAM = {
    "content-type": "ContentType",
    "content-encoding": "ContentEncoding",
    "content-disposition": "ContentDisposition",
    "content-language": "ContentLanguage",
    "cache-control": "CacheControl",
    "expires": "Expires",
}
_CHECKSUM_PARAM = {alg: "Checksum" + alg for alg in ("CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256")}


@contextlib.contextmanager
def translate_errors(bucket: str | None = None, key: str | None = None) -> Iterator[None]:
    """Map boto3 failures to S3 errors a client understands."""
    try:
        yield
    except botocore.exceptions.ClientError as exc:
        err = exc.response.get("Error", {})
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 500))
        code = str(err.get("Code") or status)
        message = err.get("Message") or None
        if code.isdigit() or code == "NotFound":
            message = None  # an HTTP reason phrase (body-less answer), not the remote's words
        if code in ("404", "NotFound"):
            code = "NoSuchKey" if key else "NoSuchBucket"
        elif code == "403":
            code = "AccessDenied"
        elif code == "412":
            code = "PreconditionFailed"
        elif code == "304":
            code = "NotModified"
        elif code == "400" and code not in ERROR_TABLE:
            code = "InvalidRequest"
        fields = {}
        if key and code == "NoSuchKey":
            fields["Key"] = key
        if bucket and code == "NoSuchBucket":
            fields["BucketName"] = bucket
        if status >= 500 and code not in ("SlowDown", "NotImplemented"):
            # The remote failed (InternalError, a body-less 5xx of a proxy in the way, a code of
            # its own): for the client the gateway's remote is unavailable for now, a 503 with
            # Retry-After, never a 500 that reads as the gateway's own fault (issue 15).
            said = "" if code.isdigit() else f" {code}"
            raise S3Error("ServiceUnavailable", f"The remote region answered HTTP {status}{said}.") from exc
        if code not in ERROR_TABLE:
            # A remote-specific code still travels, with the remote's status.
            raise S3Error(code, str(err.get("Message") or code), status=status) from exc
        raise S3Error(code, message, extra=fields) from exc
    except (botocore.exceptions.EndpointConnectionError, botocore.exceptions.ConnectionClosedError,
            botocore.exceptions.ReadTimeoutError, botocore.exceptions.ConnectTimeoutError) as exc:
        raise S3Error("ServiceUnavailable", f"The remote region is unreachable: {exc}") from exc
    except botocore.exceptions.BotoCoreError as exc:
        raise S3Error("ServiceUnavailable", f"Remote request failed: {exc}") from exc


_TRUNCATED = (botocore.exceptions.IncompleteReadError, urllib3.exceptions.IncompleteRead, http.client.IncompleteRead)


def body_failure(exc: BaseException) -> str:
    """Why a remote body failed, for ``metrics.remote_body_failed``: ``truncated`` (it ended before
    its Content-Length) or ``network`` (reset, timeout)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, _TRUNCATED) or any(isinstance(arg, _TRUNCATED) for arg in seen.args):
            return "truncated"
        seen = seen.__cause__ or seen.__context__
    return "network"


def read_available(body: Any, amt: int) -> bytes:
    """Up to ``amt`` bytes of a response body, returning as soon as some have arrived.

    botocore's ``read(amt)`` waits for all ``amt`` bytes: on a long-haul link in slow start that
    holds the first bytes of a miss back for several round trips. Ours forward what has come."""
    raw = getattr(body, "_raw_stream", None)
    read1 = getattr(raw, "read1", None)
    if read1 is not None:
        try:
            chunk = bytes(read1(amt))
            if hasattr(body, "_amount_read"):  # botocore checks the total against Content-Length
                body._amount_read += len(chunk)
            return chunk
        except (urllib3.exceptions.ProtocolError, urllib3.exceptions.ReadTimeoutError, OSError) as exc:
            raise S3Error("ServiceUnavailable", f"The remote stream failed: {exc}") from exc
    return bytes(body.read(amt))


def _meta_from_response(key: str, resp: dict[str, Any]) -> ObjectMeta:
    """Metadata from the raw headers botocore kept (the same parse as the lean GET's)."""
    return meta_from_headers(key, resp.get("ResponseMetadata", {}).get("HTTPHeaders", {}))


def object_params(meta_headers: dict[str, str], metadata: dict[str, str]) -> dict[str, Any]:
    """boto3 keyword arguments carrying content headers and user metadata."""
    params: dict[str, Any] = {}
    for name, value in meta_headers.items():
        param = _CONTENT_PARAM.get(name)
        if param == "Expires":
            # boto3 wants a datetime; pass the original string through the header instead.
            continue
        if param:
            params[param] = value
    if metadata:
        params["Metadata"] = dict(metadata)  # latin-1 strings of raw bytes: see rawsig.py
    return params
