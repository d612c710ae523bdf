"""The remote durable bucket, over boto3. Blocking calls: the services run them in threads.

Remote failures become ``S3Error`` values: the remote's own S3 error passes through with its
code and status (a missing key is ``NoSuchKey`` whoever says it); an unreachable remote, or one
that answers a 5xx other than SlowDown, is a ``503 ServiceUnavailable`` that says so. Header
values are kept as latin-1 strings end to end so that arbitrary bytes (UTF-8 metadata included) cross the gateway unchanged.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, BinaryIO

import boto3
import botocore.exceptions
import urllib3
from botocore.config import Config
from botocore.handlers import validate_ascii_metadata

from app import metrics
from app.adapters.circuit import CircuitBreaker
from app.adapters.remote_get import LeanGetter, client_error, meta_from_headers, streaming_body
from app.domain.checksums import ALGORITHMS
from app.domain.errors import ERROR_TABLE, S3Error
from app.domain.objects import (
    BucketInfo,
    ListPage,
    ObjectMeta,
    ObjectSummary,
    PartAttributes,
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


@dataclass(frozen=True)
class RemoteConfig:
    endpoint: str | None
    region: str
    access_key: str | None
    secret_key: str | None
    addressing_style: str = "path"
    max_connections: int = 64
    connect_timeout: float = 5.0
    read_timeout: float = 10.0
    verify_tls: bool = True
    max_attempts: int = 2
    deadline: float = 15.0
    circuit_failures: int = 1
    circuit_cooldown: float = 5.0


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
        raise S3Error(code, message, **fields) from exc
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
            params[param] = wire_str(value)
    if metadata:
        params["Metadata"] = {name: wire_str(value) for name, value in metadata.items()}
    return params


def wire_str(value: str) -> str:
    """The str botocore puts on the wire as the client's original bytes.

    Header values arrive as latin-1 strings of the raw bytes; botocore encodes header strings
    as UTF-8, so raw UTF-8 (what clients send for non-ASCII metadata) must be handed over
    decoded, or it reaches the remote double-encoded. Other bytes are passed as they are.
    """
    if value.isascii():
        return value
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return value


class RemoteStore:
    """One boto3 client (thread-safe) per remote; connection pool sized for parallel transfers."""

    def __init__(self, cfg: RemoteConfig) -> None:
        self.cfg = cfg
        config = Config(
            region_name=cfg.region,
            signature_version="s3v4",
            s3={"addressing_style": cfg.addressing_style},
            max_pool_connections=cfg.max_connections,
            connect_timeout=cfg.connect_timeout,
            read_timeout=cfg.read_timeout,
            retries={"total_max_attempts": cfg.max_attempts, "mode": "standard"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            tcp_keepalive=True,
        )
        session = boto3.session.Session()
        self.client = session.client(
            "s3",
            endpoint_url=cfg.endpoint,
            aws_access_key_id=cfg.access_key,
            aws_secret_access_key=cfg.secret_key,
            config=config,
            verify=cfg.verify_tls,
        )
        self._register_expires_passthrough()
        metrics.instrument_boto_client(self.client)  # latency and errors by operation
        self.circuit = CircuitBreaker(cfg.endpoint or "aws", cfg.circuit_failures, cfg.circuit_cooldown)
        self.circuit.instrument(self.client)
        self.lean = LeanGetter(self.client, cfg.addressing_style, cfg.max_attempts, cfg.deadline, self.circuit)
        self._conditional: dict[str, bool] = {}  # bucket -> conditional writes honoured

    def _register_expires_passthrough(self) -> None:
        """Let callers set a raw ``Expires`` header string (boto3 only accepts datetimes)."""

        def pop_extra(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
            extra = params.pop("FerryExtraHeaders", None)
            if extra:
                context["ferry_extra_headers"] = extra

        def add_headers(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
            extra = context.get("ferry_extra_headers")
            if extra:
                params["headers"].update(extra)

        events = self.client.meta.events
        # Metadata arrives as latin-1 strings of the client's raw bytes (UTF-8 included): they
        # must reach the remote unchanged, so boto3's ASCII-only check is lifted.
        for op in ("PutObject", "CopyObject", "CreateMultipartUpload"):
            events.unregister(f"before-parameter-build.s3.{op}", validate_ascii_metadata)
        events.register("provide-client-params.s3.*", pop_extra)
        events.register("before-call.s3.*", add_headers)

    # ---- buckets -----------------------------------------------------------------------------
    def list_buckets(self) -> list[BucketInfo]:
        with translate_errors():
            resp = self.client.list_buckets()
        return [BucketInfo(b["Name"], b["CreationDate"]) for b in resp.get("Buckets", [])]

    def create_bucket(self, bucket: str, location: str | None) -> None:
        kwargs: dict[str, Any] = {"Bucket": bucket}
        if location and location != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": location}
        with translate_errors(bucket):
            self.client.create_bucket(**kwargs)

    def head_bucket(self, bucket: str) -> None:
        with translate_errors(bucket):
            self.client.head_bucket(Bucket=bucket)

    def delete_bucket(self, bucket: str) -> None:
        with translate_errors(bucket):
            self.client.delete_bucket(Bucket=bucket)

    def bucket_location(self, bucket: str) -> str | None:
        with translate_errors(bucket):
            resp = self.client.get_bucket_location(Bucket=bucket)
        return resp.get("LocationConstraint") or None

    # ---- listing -----------------------------------------------------------------------------
    def list_objects(self, bucket: str, prefix: str, delimiter: str | None, start_after: str | None,
                     max_keys: int) -> ListPage:
        kwargs: dict[str, Any] = {"Bucket": bucket, "MaxKeys": max_keys, "Prefix": prefix}
        if delimiter:
            kwargs["Delimiter"] = delimiter
        if start_after:
            kwargs["StartAfter"] = start_after
        with translate_errors(bucket):
            resp = self.client.list_objects_v2(**kwargs)
        contents = [
            ObjectSummary(o["Key"], int(o.get("Size", 0)), str(o.get("ETag", "")).strip('"'),
                          o["LastModified"], o.get("StorageClass", "STANDARD"))
            for o in resp.get("Contents", [])
        ]
        prefixes = [p["Prefix"] for p in resp.get("CommonPrefixes", [])]
        truncated = bool(resp.get("IsTruncated"))
        last = max([c.key for c in contents] + prefixes) if (contents or prefixes) else None
        return ListPage(contents, prefixes, truncated, last if truncated else None)

    def list_object_versions(self, bucket: str, prefix: str, delimiter: str | None, key_marker: str | None,
                             max_keys: int) -> ListPage:
        kwargs: dict[str, Any] = {"Bucket": bucket, "MaxKeys": max_keys, "Prefix": prefix}
        if delimiter:
            kwargs["Delimiter"] = delimiter
        if key_marker:
            kwargs["KeyMarker"] = key_marker
        with translate_errors(bucket):
            resp = self.client.list_object_versions(**kwargs)
        items = [
            ObjectSummary(v["Key"], int(v.get("Size", 0)), str(v.get("ETag", "")).strip('"'),
                          v["LastModified"], v.get("StorageClass", "STANDARD"),
                          v.get("VersionId") or "null", bool(v.get("IsLatest", True)))
            for v in resp.get("Versions", [])
        ]
        items += [
            ObjectSummary(d["Key"], 0, "", d["LastModified"], "STANDARD", d.get("VersionId") or "null",
                          bool(d.get("IsLatest", True)), True)
            for d in resp.get("DeleteMarkers", [])
        ]
        items.sort(key=lambda s: s.key)
        prefixes = [p["Prefix"] for p in resp.get("CommonPrefixes", [])]
        truncated = bool(resp.get("IsTruncated"))
        return ListPage(items, prefixes, truncated, resp.get("NextKeyMarker") if truncated else None)

    # ---- objects -----------------------------------------------------------------------------
    def head_object(self, bucket: str, key: str, if_none_match: str | None = None) -> ObjectMeta:
        """The object's metadata; with ``if_none_match`` an unchanged object raises NotModified."""
        kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key, "ChecksumMode": "ENABLED"}
        if if_none_match:
            kwargs["IfNoneMatch"] = f'"{if_none_match}"'
        try:
            with translate_errors(bucket, key):
                resp = self.client.head_object(**kwargs)
        except S3Error as err:
            if err.code == "NoSuchKey":
                # A HEAD 404 has no body to say which is missing: NoSuchBucket if the bucket is.
                self.head_bucket(bucket)
            raise
        return _meta_from_response(key, resp)

    def object_parts(self, bucket: str, key: str) -> tuple[str, list[PartAttributes]] | None:
        """(ETag, parts) of a multipart object from the remote's GetObjectAttributes, every page;
        None when the remote does not implement it (the answer then lists no parts)."""
        parts: list[PartAttributes] = []
        marker = 0
        etag = ""
        while True:
            try:
                with translate_errors(bucket, key):
                    resp = self.client.get_object_attributes(
                        Bucket=bucket, Key=key, ObjectAttributes=["ETag", "ObjectParts"], MaxParts=1000,
                        PartNumberMarker=marker)
            except S3Error as err:
                if err.code in ("NotImplemented", "InvalidArgument", "InvalidRequest"):
                    return None
                raise
            etag = str(resp.get("ETag", "")).strip('"')
            page = resp.get("ObjectParts") or {}
            for part in page.get("Parts", []):
                checksums = {alg: part[f"Checksum{alg}"] for alg in ALGORITHMS if part.get(f"Checksum{alg}")}
                parts.append(PartAttributes(int(part["PartNumber"]), int(part["Size"]), checksums))
            if not page.get("IsTruncated") or not page.get("NextPartNumberMarker"):
                return etag, parts
            marker = int(page["NextPartNumberMarker"])

    def get_object(self, bucket: str, key: str, byte_range: str | None = None,
                   if_match: str | None = None) -> tuple[ObjectMeta, BinaryIO]:
        url = self.lean.request_url(bucket, key)
        if url is None:
            return self._get_object_boto(bucket, key, byte_range, if_match)
        # Stored checksums in the answer (the entry point decides whether to relay them).
        headers = {"x-amz-checksum-mode": "ENABLED"}
        if byte_range:
            headers["Range"] = byte_range
        if if_match:
            headers["If-Match"] = if_match if if_match.startswith('"') else f'"{if_match}"'
        with translate_errors(bucket, key):
            response = self.lean.get(url, headers)
            if response.status_code >= 300:
                raise client_error(response)
        return meta_from_headers(key, response.headers), streaming_body(response)  # type: ignore[return-value]

    def _get_object_boto(self, bucket: str, key: str, byte_range: str | None,
                         if_match: str | None) -> tuple[ObjectMeta, BinaryIO]:
        kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key}
        if byte_range:
            kwargs["Range"] = byte_range
        if if_match:
            kwargs["IfMatch"] = if_match if if_match.startswith('"') else f'"{if_match}"'
        # Stored checksums in the answer (the entry point decides whether to relay them); as a
        # header, not ChecksumMode, so botocore does not validate: the client does, end to end.
        kwargs["FerryExtraHeaders"] = {"x-amz-checksum-mode": "ENABLED"}
        with translate_errors(bucket, key):
            resp = self.client.get_object(**kwargs)
        return _meta_from_response(key, resp), resp["Body"]

    def put_object(self, bucket: str, key: str, body: BinaryIO, size: int, content_md5: str,
                   content_headers: dict[str, str], metadata: dict[str, str],
                   checksums: dict[str, str], *, if_match: str | None = None,
                   if_none_match: str | None = None) -> str:
        """PutObject; ``if_match`` (an ETag) or ``if_none_match`` ('*') make it conditional."""
        kwargs = object_params(content_headers, metadata)
        kwargs.update(Bucket=bucket, Key=key, Body=body, ContentLength=size, ContentMD5=content_md5)
        if if_match:
            kwargs["IfMatch"] = f'"{if_match}"'
        if if_none_match:
            kwargs["IfNoneMatch"] = if_none_match
        for alg, value in checksums.items():
            kwargs[_CHECKSUM_PARAM[alg]] = value
        if "expires" in content_headers:
            kwargs["FerryExtraHeaders"] = {"Expires": wire_str(content_headers["expires"])}
        with translate_errors(bucket, key):
            resp = self.client.put_object(**kwargs)
        return str(resp.get("ETag", "")).strip('"')

    def copy_object(self, bucket: str, key: str, src_bucket: str, src_key: str, replace: bool,
                    content_headers: dict[str, str], metadata: dict[str, str]) -> tuple[str, datetime]:
        kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key,
                                  "CopySource": {"Bucket": src_bucket, "Key": src_key}}
        if replace:
            kwargs.update(object_params(content_headers, metadata))
            kwargs["MetadataDirective"] = "REPLACE"
            if "expires" in content_headers:
                kwargs["FerryExtraHeaders"] = {"Expires": wire_str(content_headers["expires"])}
        with translate_errors(src_bucket, src_key):
            resp = self.client.copy_object(**kwargs)
        result = resp.get("CopyObjectResult", {})
        return str(result.get("ETag", "")).strip('"'), result.get("LastModified") or datetime.now(UTC)

    def delete_object(self, bucket: str, key: str, if_match: str | None = None) -> None:
        kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key}
        if if_match:
            kwargs["IfMatch"] = f'"{if_match}"'
        with translate_errors(bucket, key):
            self.client.delete_object(**kwargs)

    def delete_objects(self, bucket: str, keys: list[str]) -> dict[str, tuple[str, str]]:
        """DeleteObjects in pages of 1000; returns the keys the remote refused: key -> (code, message)."""
        failures: dict[str, tuple[str, str]] = {}
        for start in range(0, len(keys), 1000):
            page = [{"Key": k} for k in keys[start:start + 1000]]
            with translate_errors(bucket):
                resp = self.client.delete_objects(Bucket=bucket, Delete={"Objects": page, "Quiet": True})
            for err in resp.get("Errors", []):
                failures[str(err.get("Key"))] = (str(err.get("Code") or "InternalError"), str(err.get("Message") or ""))
        return failures

    def current_etag(self, bucket: str, key: str) -> str | None:
        """The object's ETag now, None when there is none (the expectation of a fenced write)."""
        try:
            with translate_errors(bucket, key):
                resp = self.client.head_object(Bucket=bucket, Key=key)
        except S3Error as err:
            if err.code == "NoSuchKey":
                return None
            raise
        return str(resp.get("ETag", "")).strip('"')

    def conditional_writes(self, bucket: str) -> bool:
        """Whether the remote honours If-Match on PutObject and DeleteObject, probed once per
        bucket: a remote that ignored the header would let a fenced write through unfenced.

        The probes are conditional writes to a key that does not exist (``.ferry-probe/<id>``),
        which a remote that honours them refuses; only one that ignores them stores anything,
        and that object is deleted at once."""
        known = self._conditional.get(bucket)
        if known is None:
            known = self._probe_conditional(bucket, f".ferry-probe/{uuid.uuid4().hex}")
            self._conditional[bucket] = known
        return known

    def _probe_conditional(self, bucket: str, probe: str) -> bool:
        bogus = "0" * 32
        for attempt in (self._probe_put, self._probe_delete):
            try:
                attempt(bucket, probe, bogus)
            except S3Error as err:
                if err.status >= 500 and err.code != "NotImplemented":
                    raise  # an outage says nothing: ask again next time
                if err.code not in ("PreconditionFailed", "NoSuchKey"):
                    return False  # e.g. NotImplemented: no conditional writes on this remote
            else:
                return False  # the condition was ignored
        return True

    def _probe_put(self, bucket: str, probe: str, bogus: str) -> None:
        self.put_object(bucket, probe, io.BytesIO(b""), 0, "1B2M2Y8AsgTpgAmY7PhCfg==", {}, {}, {}, if_match=bogus)
        self.delete_object(bucket, probe)  # it was stored: take it away again

    def _probe_delete(self, bucket: str, probe: str, bogus: str) -> None:
        self.delete_object(bucket, probe, if_match=bogus)

    # ---- multipart (destage of a locally assembled upload) -------------------------------------
    def create_multipart(self, bucket: str, key: str, content_headers: dict[str, str],
                         metadata: dict[str, str], checksum_algorithm: str | None,
                         checksum_type: str | None = None) -> str:
        kwargs = object_params(content_headers, metadata)
        kwargs.update(Bucket=bucket, Key=key)
        if checksum_algorithm:
            kwargs["ChecksumAlgorithm"] = checksum_algorithm
            if checksum_type:  # the remote then keeps the same kind of checksum Complete answered
                kwargs["ChecksumType"] = checksum_type
        if "expires" in content_headers:
            kwargs["FerryExtraHeaders"] = {"Expires": wire_str(content_headers["expires"])}
        with translate_errors(bucket, key):
            return str(self.client.create_multipart_upload(**kwargs)["UploadId"])

    def upload_part(self, bucket: str, key: str, upload_id: str, number: int, body: BinaryIO, size: int,
                    content_md5: str, checksums: dict[str, str]) -> str:
        kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key, "UploadId": upload_id, "PartNumber": number,
                                  "Body": body, "ContentLength": size, "ContentMD5": content_md5}
        for alg, value in checksums.items():
            kwargs[_CHECKSUM_PARAM[alg]] = value
        with translate_errors(bucket, key):
            return str(self.client.upload_part(**kwargs)["ETag"]).strip('"')

    def complete_multipart(self, bucket: str, key: str, upload_id: str,
                           parts: list[tuple[int, str, dict[str, str]]]) -> str:
        items = []
        for number, etag, checksums in parts:
            item: dict[str, Any] = {"PartNumber": number, "ETag": f'"{etag}"'}
            for alg, value in checksums.items():
                item[_CHECKSUM_PARAM[alg]] = value
            items.append(item)
        with translate_errors(bucket, key):
            resp = self.client.complete_multipart_upload(
                Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": items}
            )
        return str(resp.get("ETag", "")).strip('"')

    def list_parts(self, bucket: str, key: str, upload_id: str) -> dict[int, str]:
        """Part number -> ETag of the parts the remote holds for an upload."""
        parts: dict[int, str] = {}
        marker = 0
        while True:
            with translate_errors(bucket, key):
                resp = self.client.list_parts(Bucket=bucket, Key=key, UploadId=upload_id, PartNumberMarker=marker)
            for part in resp.get("Parts", []):
                parts[int(part["PartNumber"])] = str(part.get("ETag", "")).strip('"')
            if not resp.get("IsTruncated"):
                return parts
            marker = int(resp.get("NextPartNumberMarker") or max(parts, default=0))

    def list_multipart(self, bucket: str) -> list[tuple[str, str, datetime]]:
        """Every multipart upload in progress on the remote bucket: (key, upload id, initiated)."""
        out: list[tuple[str, str, datetime]] = []
        kwargs: dict[str, Any] = {"Bucket": bucket}
        while True:
            with translate_errors(bucket):
                resp = self.client.list_multipart_uploads(**kwargs)
            out += [(u["Key"], u["UploadId"], u["Initiated"]) for u in resp.get("Uploads", [])]
            if not resp.get("IsTruncated") or not resp.get("NextKeyMarker"):
                return out
            kwargs.update(KeyMarker=resp["NextKeyMarker"], UploadIdMarker=resp.get("NextUploadIdMarker", ""))

    def abort_multipart(self, bucket: str, key: str, upload_id: str) -> None:
        with translate_errors(bucket, key), contextlib.suppress(S3Error):
            self.client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
