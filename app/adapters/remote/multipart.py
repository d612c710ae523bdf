"""The remote's multipart operations: the destage of a locally assembled upload (a part of
``RemoteStore``)."""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Any, BinaryIO

from app.adapters.remote.put import LeanPutter
from app.adapters.remote.wire import _CHECKSUM_PARAM, object_params, translate_errors
from app.domain.errors import S3Error


class MultipartOps:
    """``putter`` sends UploadPart as a raw signed request where it applies (``put.py``)."""

    def __init__(self, client: Any, putter: LeanPutter | None = None) -> None:
        self.client = client
        self.putter = putter

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
            kwargs["FerryExtraHeaders"] = {"Expires": content_headers["expires"]}
        with translate_errors(bucket, key):
            return str(self.client.create_multipart_upload(**kwargs)["UploadId"])

    def upload_part(self, bucket: str, key: str, upload_id: str, number: int, body: BinaryIO, size: int,
                    content_md5: str, checksums: dict[str, str]) -> str:
        url = self.putter.part_url(bucket, key, upload_id, number) if self.putter is not None else None
        if url is not None and self.putter is not None:
            headers = {"Content-MD5": content_md5}
            for alg, value in checksums.items():
                headers[f"x-amz-checksum-{alg.lower()}"] = value
            with translate_errors(bucket, key):
                answer = self.putter.put("UploadPart", url, headers, body, size)
                if answer.status >= 300:
                    raise answer.client_error("UploadPart")
            return answer.headers.get("etag", "").strip('"')
        return self._upload_part_boto(bucket, key, upload_id, number, body, size, content_md5, checksums)

    def _upload_part_boto(self, bucket: str, key: str, upload_id: str, number: int, body: BinaryIO, size: int,
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
        """Best effort: an upload the remote does not abort now (gone already, or the remote
        down) is an orphan that the remote-uploads chore removes later, never a failure of the
        caller. ``suppress`` is outside ``translate_errors``: what it suppresses is the S3Error
        that boto3's failure becomes (inside, a boto3 failure would pass it by)."""
        with contextlib.suppress(S3Error), translate_errors(bucket, key):
            self.client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)

