"""The remote's bucket operations and listings (a part of ``RemoteStore``)."""

from __future__ import annotations

from typing import Any

from app.adapters.remote.get import LeanGetter, client_error
from app.adapters.remote.listing import (
    OPERATION,
    REDIRECT_CODES,
    REDIRECTS,
    list_query,
    parse_list_v2,
)
from app.adapters.remote.wire import translate_errors
from app.domain.errors import S3Error
from app.domain.objects import (
    BucketInfo,
    ListPage,
    ObjectSummary,
)


class BucketOps:
    """``lean``: listings go as signed GETs parsed without botocore where it can address them
    (``adapters.remote.listing``); botocore answers the rest."""

    def __init__(self, client: Any, lean: LeanGetter | None = None) -> None:
        self.client = client
        self.lean = lean

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
        base = self.lean.bucket_url(bucket) if self.lean is not None else None
        if base is not None:
            page = self._list_lean(base, bucket, prefix, delimiter, start_after, max_keys)
            if page is not None:
                return page
        return self._list_boto(bucket, prefix, delimiter, start_after, max_keys)

    def _list_lean(self, base: str, bucket: str, prefix: str, delimiter: str | None, start_after: str | None,
                   max_keys: int) -> ListPage | None:
        """The page, or None when the remote redirects (botocore's region redirector follows)."""
        assert self.lean is not None
        url = f"{base}?{list_query(prefix, delimiter, start_after, max_keys)}"
        with translate_errors(bucket):
            response, body = self.lean.read(url, {}, OPERATION)
            if response.status_code in REDIRECTS:
                response.raw.close()
                return None
            if response.status_code >= 300:
                error = client_error(response, OPERATION)
                if error.response["Error"]["Code"] in REDIRECT_CODES:
                    return None
                raise error
        try:
            return parse_list_v2(body)
        except ValueError as exc:  # MalformedListing, a bad number or time: as botocore's unparseable answer
            raise S3Error("ServiceUnavailable", f"Remote request failed: a malformed listing ({exc})") from exc

    def _list_boto(self, bucket: str, prefix: str, delimiter: str | None, start_after: str | None,
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

