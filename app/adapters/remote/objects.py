"""The remote's object operations, and its conditional-write probe (a part of ``RemoteStore``)."""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime
from typing import Any, BinaryIO, cast

from app.adapters.remote.buckets import BucketOps
from app.adapters.remote.get import LeanGetter, client_error, meta_from_headers, streaming_body
from app.adapters.remote.put import LeanPutter, sendable
from app.adapters.remote.wire import (
    _CHECKSUM_PARAM,
    _CONTENT_PARAM,
    _meta_from_response,
    object_params,
    translate_errors,
)
from app.domain.checksums import ALGORITHMS
from app.domain.errors import S3Error
from app.domain.objects import (
    ObjectMeta,
    PartAttributes,
)


def _an_object(meta: ObjectMeta, body: BinaryIO | None = None) -> ObjectMeta:
    """``meta``, unless it is a remote's directory posing as an object: a multipart ETag of 0 parts
    (S3 needs one part at least), which SeaweedFS answers for ``a/`` while only ``a/b`` implies it.
    S3 has no such object, so neither does Ferry: NoSuchKey."""
    if meta.etag.endswith("-0"):
        if body is not None:
            body.close()
        raise S3Error("NoSuchKey", "The specified key does not exist.", Key=meta.key)
    return meta


class ObjectOps:
    """``buckets`` answers which is missing when a HEAD says 404 (a HEAD has no body to tell)."""

    def __init__(self, client: Any, lean: LeanGetter, buckets: BucketOps, putter: LeanPutter | None = None) -> None:
        self.client = client
        self.lean = lean
        self.putter = putter
        self.buckets = buckets
        self._conditional: dict[str, bool] = {}  # bucket -> conditional writes honoured

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
                self.buckets.head_bucket(bucket)
            raise
        return _an_object(_meta_from_response(key, resp))

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
        body = cast(BinaryIO, streaming_body(response))  # a file-like stream: read/close are what callers use
        return _an_object(meta_from_headers(key, response.headers), body), body

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
        return _an_object(_meta_from_response(key, resp), resp["Body"]), resp["Body"]

    def put_object(self, bucket: str, key: str, body: BinaryIO, size: int, content_md5: str,
                   content_headers: dict[str, str], metadata: dict[str, str],
                   checksums: dict[str, str], *, if_match: str | None = None,
                   if_none_match: str | None = None) -> str:
        """PutObject; ``if_match`` (an ETag) or ``if_none_match`` ('*') make it conditional.
        A raw signed request where it applies (``put.py``), else botocore's call."""
        url = self.putter.object_url(bucket, key) if self.putter is not None else None
        if url is not None and self.putter is not None:
            headers = {"Content-MD5": content_md5}
            headers.update({name: value for name, value in content_headers.items() if name in _CONTENT_PARAM})
            headers.update({f"x-amz-meta-{name}": value for name, value in metadata.items()})
            headers.update({f"x-amz-checksum-{alg.lower()}": value for alg, value in checksums.items()})
            if if_match:
                headers["If-Match"] = f'"{if_match}"'
            if if_none_match:
                headers["If-None-Match"] = if_none_match
            if sendable(headers):
                with translate_errors(bucket, key):
                    answer = self.putter.put("PutObject", url, headers, body, size)
                    if answer.status >= 300:
                        raise answer.client_error("PutObject")
                return answer.headers.get("etag", "").strip('"')
        return self._put_object_boto(bucket, key, body, size, content_md5, content_headers, metadata, checksums,
                                     if_match=if_match, if_none_match=if_none_match)

    def _put_object_boto(self, bucket: str, key: str, body: BinaryIO, size: int, content_md5: str,
                         content_headers: dict[str, str], metadata: dict[str, str],
                         checksums: dict[str, str], *, if_match: str | None = None,
                         if_none_match: str | None = None) -> str:
        kwargs = object_params(content_headers, metadata)
        kwargs.update(Bucket=bucket, Key=key, Body=body, ContentLength=size, ContentMD5=content_md5)
        if if_match:
            kwargs["IfMatch"] = f'"{if_match}"'
        if if_none_match:
            kwargs["IfNoneMatch"] = if_none_match
        for alg, value in checksums.items():
            kwargs[_CHECKSUM_PARAM[alg]] = value
        if "expires" in content_headers:
            kwargs["FerryExtraHeaders"] = {"Expires": content_headers["expires"]}
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
                kwargs["FerryExtraHeaders"] = {"Expires": content_headers["expires"]}
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
        etag = str(resp.get("ETag", "")).strip('"')
        # A multipart ETag of 0 parts is no object (S3 needs one part at least): SeaweedFS answers
        # a HEAD of ``a/`` so while ``a/b`` exists (an implicit directory). Nothing to match.
        return None if etag.endswith("-0") else etag

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

