"""Which S3 features does the installed SeaweedFS support?  Run it and read the table:

    .venv/bin/python tests/support/seaweed_probe.py [--json]

It starts a fresh ``SeaweedServer`` (AWS-like settings: no auto-create of buckets, no recursive
delete of non-empty buckets), runs one small check per feature that an S3 gateway test suite
relies on, prints ``feature | result | detail`` and stops the server. Results: ``yes`` (behaves
like AWS S3), ``differs`` (works, but not as AWS does; the detail says how), ``no`` (missing or
broken), ``error`` (the check itself failed).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import json
import os
import sys
import time
import zlib
from collections.abc import Callable
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``tests.support`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from tests.support.seaweed import SeaweedServer

MiB = 1024 * 1024
Result = tuple[str, str]


def _code(e: ClientError) -> str:
    err = e.response.get("Error", {})
    return f"{err.get('Code')} (HTTP {e.response.get('ResponseMetadata', {}).get('HTTPStatusCode')})"


def _crc32_b64(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def _md5_of_md5s(parts: list[bytes]) -> str:
    digests = b"".join(hashlib.md5(p).digest() for p in parts)
    return f'"{hashlib.md5(digests).hexdigest()}-{len(parts)}"'


class Probe:
    def __init__(self, server: SeaweedServer) -> None:
        self.server = server
        self.s3 = server.client()
        self.bucket = "probe-bucket"
        self.s3.create_bucket(Bucket=self.bucket)
        self.sent_headers: dict[str, str] = {}
        self.s3.meta.events.register("before-send.s3.*", self._record_headers)

    def _record_headers(self, request: Any, **_: Any) -> None:
        self.sent_headers = {
            k.lower(): (v.decode() if isinstance(v, bytes) else v) for k, v in request.headers.items()
        }

    # A raw SigV4 request, for what boto3 cannot send: headers listed in ``unsigned`` are added
    # after signing (SigV4 only covers SignedHeaders), so their values may be any bytes.
    def raw(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        unsigned: dict[str, bytes] | None = None,
        body: bytes = b"",
        payload_hash: str | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        url = self.server.endpoint + path
        hdrs = {"Host": f"127.0.0.1:{self.server.s3_port}", **(headers or {})}
        req = AWSRequest(method=method, url=url, data=body, headers=hdrs)
        if payload_hash == "STREAMING-UNSIGNED-PAYLOAD-TRAILER":
            req.context["checksum"] = {"request_algorithm": {"in": "trailer"}}
        creds = Credentials(self.server.access_key, self.server.secret_key)
        S3SigV4Auth(creds, "s3", self.server.region).add_auth(req)
        conn = http.client.HTTPConnection("127.0.0.1", self.server.s3_port, timeout=30)
        try:
            conn.putrequest(method, path, skip_accept_encoding=True, skip_host=True)
            for k, v in req.headers.items():
                conn.putheader(k, v.encode() if isinstance(v, str) else v)
            for k, bv in (unsigned or {}).items():
                conn.putheader(k, bv)
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            resp = conn.getresponse()
            data = resp.read()
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
            return resp.status, hdrs, data
        finally:
            conn.close()

    # ------------------------------------------------------------------ checks

    def multipart(self) -> Result:
        key = "mpu/object"
        parts = [os.urandom(5 * MiB), os.urandom(1 * MiB + 7)]
        up = self.s3.create_multipart_upload(Bucket=self.bucket, Key=key)
        uid = up["UploadId"]
        done = []
        for i, p in enumerate(parts, 1):
            r = self.s3.upload_part(Bucket=self.bucket, Key=key, UploadId=uid, PartNumber=i, Body=p)
            done.append({"PartNumber": i, "ETag": r["ETag"]})
        listed = self.s3.list_parts(Bucket=self.bucket, Key=key, UploadId=uid)["Parts"]
        r = self.s3.complete_multipart_upload(
            Bucket=self.bucket, Key=key, UploadId=uid, MultipartUpload={"Parts": done}
        )
        want = _md5_of_md5s(parts)
        head = self.s3.head_object(Bucket=self.bucket, Key=key)
        got = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        ok_body = got == b"".join(parts)
        part1 = self.s3.head_object(Bucket=self.bucket, Key=key, PartNumber=1)
        detail = (
            f"complete ETag {r['ETag']} {'==' if r['ETag'] == want else '!='} md5-of-md5s {want}; "
            f"HEAD ETag {'same' if head['ETag'] == r['ETag'] else head['ETag']}; "
            f"body {'ok' if ok_body else 'CORRUPT'}; ListParts {len(listed)} parts; "
            f"HEAD partNumber=1: {part1.get('ContentLength')} bytes, PartsCount={part1.get('PartsCount')}"
        )
        ok = r["ETag"] == want and head["ETag"] == want and ok_body
        return ("yes" if ok else "differs"), detail

    def multipart_errors(self) -> Result:
        key = "mpu/errors"
        uid = self.s3.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"]
        self.s3.upload_part(Bucket=self.bucket, Key=key, UploadId=uid, PartNumber=1, Body=b"a" * 100)
        r2 = self.s3.upload_part(Bucket=self.bucket, Key=key, UploadId=uid, PartNumber=2, Body=b"b")
        out = []
        try:  # part 1 below 5 MiB and not the last part -> EntityTooSmall on AWS
            p1 = self.s3.list_parts(Bucket=self.bucket, Key=key, UploadId=uid)["Parts"][0]["ETag"]
            self.s3.complete_multipart_upload(
                Bucket=self.bucket,
                Key=key,
                UploadId=uid,
                MultipartUpload={
                    "Parts": [{"PartNumber": 1, "ETag": p1}, {"PartNumber": 2, "ETag": r2["ETag"]}]
                },
            )
            out.append("small non-last part: ACCEPTED (AWS: EntityTooSmall)")
        except ClientError as e:
            out.append(f"small non-last part: {_code(e)}")
        uid = self.s3.create_multipart_upload(Bucket=self.bucket, Key=key + "2")["UploadId"]
        self.s3.upload_part(Bucket=self.bucket, Key=key + "2", UploadId=uid, PartNumber=1, Body=b"x")
        try:
            self.s3.complete_multipart_upload(
                Bucket=self.bucket,
                Key=key + "2",
                UploadId=uid,
                MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": '"00000000000000000000000000000000"'}]},
            )
            out.append("wrong part ETag: ACCEPTED (AWS: InvalidPart)")
        except ClientError as e:
            out.append(f"wrong part ETag: {_code(e)}")
        ups = self.s3.list_multipart_uploads(Bucket=self.bucket).get("Uploads", [])
        out.append(f"ListMultipartUploads: {len(ups)} open")
        self.s3.abort_multipart_upload(Bucket=self.bucket, Key=key + "2", UploadId=uid)
        try:
            self.s3.list_parts(Bucket=self.bucket, Key=key + "2", UploadId=uid)
            out.append("ListParts after abort: still listed")
        except ClientError as e:
            out.append(f"ListParts after abort: {_code(e)}")
        good = ("EntityTooSmall" in out[0]) and ("InvalidPart" in out[1]) and ("NoSuchUpload" in out[-1])
        return ("yes" if good else "differs"), "; ".join(out)

    def copy_replace(self) -> Result:
        self.s3.put_object(
            Bucket=self.bucket,
            Key="copy/src",
            Body=b"copy me",
            ContentType="text/plain",
            Metadata={"a": "1"},
        )
        r = self.s3.copy_object(
            Bucket=self.bucket,
            Key="copy/dst",
            CopySource={"Bucket": self.bucket, "Key": "copy/src"},
            MetadataDirective="REPLACE",
            Metadata={"b": "2"},
            ContentType="application/x-new",
        )
        h = self.s3.head_object(Bucket=self.bucket, Key="copy/dst")
        self.s3.copy_object(
            Bucket=self.bucket,
            Key="copy/dst2",
            CopySource={"Bucket": self.bucket, "Key": "copy/src"},
        )
        h2 = self.s3.head_object(Bucket=self.bucket, Key="copy/dst2")
        try:  # copy onto itself without REPLACE: AWS rejects with InvalidRequest
            self.s3.copy_object(
                Bucket=self.bucket, Key="copy/src", CopySource={"Bucket": self.bucket, "Key": "copy/src"}
            )
            self_copy = "self-copy w/o REPLACE: accepted (AWS: InvalidRequest)"
        except ClientError as e:
            self_copy = f"self-copy w/o REPLACE: {_code(e)}"
        quoted = r["CopyObjectResult"]["ETag"].startswith('"')
        ok = (
            h["Metadata"] == {"b": "2"}
            and h["ContentType"] == "application/x-new"
            and h2["Metadata"] == {"a": "1"}
            and h2["ContentType"] == "text/plain"
        )
        return ("yes" if ok else "differs"), (
            f"REPLACE -> meta {h['Metadata']} type {h['ContentType']}; COPY -> meta {h2['Metadata']} "
            f"type {h2['ContentType']}; CopyObjectResult.ETag {r['CopyObjectResult']['ETag']} "
            f"({'quoted' if quoted else 'NOT quoted; AWS quotes it'}); "
            f"{self_copy}"
        )

    def upload_part_copy(self) -> Result:
        src = os.urandom(6 * MiB)
        self.s3.put_object(Bucket=self.bucket, Key="upc/src", Body=src)
        key = "upc/dst"
        uid = self.s3.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"]
        r1 = self.s3.upload_part_copy(
            Bucket=self.bucket,
            Key=key,
            UploadId=uid,
            PartNumber=1,
            CopySource={"Bucket": self.bucket, "Key": "upc/src"},
            CopySourceRange=f"bytes=0-{5 * MiB - 1}",
        )
        r2 = self.s3.upload_part_copy(
            Bucket=self.bucket,
            Key=key,
            UploadId=uid,
            PartNumber=2,
            CopySource={"Bucket": self.bucket, "Key": "upc/src"},
        )
        parts = [
            {"PartNumber": 1, "ETag": r1["CopyPartResult"]["ETag"]},
            {"PartNumber": 2, "ETag": r2["CopyPartResult"]["ETag"]},
        ]
        r = self.s3.complete_multipart_upload(
            Bucket=self.bucket, Key=key, UploadId=uid, MultipartUpload={"Parts": parts}
        )
        body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        want_body = src[: 5 * MiB] + src
        want_etag = _md5_of_md5s([src[: 5 * MiB], src])
        ok = body == want_body
        p1 = r1["CopyPartResult"]["ETag"].strip('"')
        same = r2["CopyPartResult"]["ETag"] == r1["CopyPartResult"]["ETag"]
        return ("yes" if ok and r["ETag"] == want_etag else ("differs" if ok else "no")), (
            f"ranged + whole-object part copy, body {'ok' if ok else 'WRONG'}; part ETag {p1} "
            f"{'==' if p1 == hashlib.md5(src[: 5 * MiB]).hexdigest() else '!='} md5 of the copied bytes, "
            f"part 2 ETag {'same as part 1' if same else 'differs'}; final ETag {r['ETag']} "
            f"{'==' if r['ETag'] == want_etag else '!='} md5-of-md5s of the part bytes"
        )

    def list_v2(self) -> Result:
        keys = ["l2/a", "l2/b/1", "l2/b/2", "l2/c", "l2/d/x", "l2/e"]
        for k in keys:
            self.s3.put_object(Bucket=self.bucket, Key=k, Body=b"x")
        r = self.s3.list_objects_v2(Bucket=self.bucket, Prefix="l2/", Delimiter="/")
        contents = [c["Key"] for c in r.get("Contents", [])]
        prefixes = [p["Prefix"] for p in r.get("CommonPrefixes", [])]
        ok_delim = contents == ["l2/a", "l2/c", "l2/e"] and prefixes == ["l2/b/", "l2/d/"]
        r = self.s3.list_objects_v2(Bucket=self.bucket, Prefix="l2/", StartAfter="l2/b/1")
        after = [c["Key"] for c in r.get("Contents", [])]
        ok_after = after == ["l2/b/2", "l2/c", "l2/d/x", "l2/e"]
        pages, token, seen = 0, None, []
        while True:
            kw: dict[str, Any] = {"Bucket": self.bucket, "Prefix": "l2/", "MaxKeys": 2}
            if token:
                kw["ContinuationToken"] = token
            r = self.s3.list_objects_v2(**kw)
            pages += 1
            seen += [c["Key"] for c in r.get("Contents", [])]
            if not r.get("IsTruncated"):
                break
            token = r["NextContinuationToken"]
            if pages > 10:
                break
        ok_pages = seen == keys and pages == 3
        # delimiter + paging: a page boundary inside a common prefix
        pseen, token, ppages = [], None, 0
        while ppages < 10:
            kw = {"Bucket": self.bucket, "Prefix": "l2/", "Delimiter": "/", "MaxKeys": 2}
            if token:
                kw["ContinuationToken"] = token
            r = self.s3.list_objects_v2(**kw)
            ppages += 1
            pseen += [c["Key"] for c in r.get("Contents", [])] + [
                p["Prefix"] for p in r.get("CommonPrefixes", [])
            ]
            if not r.get("IsTruncated"):
                break
            token = r["NextContinuationToken"]
        ok_ppages = sorted(pseen) == ["l2/a", "l2/b/", "l2/c", "l2/d/", "l2/e"]
        r = self.s3.list_objects_v2(Bucket=self.bucket, Prefix="l2/", FetchOwner=True, MaxKeys=1)
        c0 = r["Contents"][0]
        fields = ",".join(k for k in ("ETag", "Size", "LastModified", "StorageClass", "Owner") if k in c0)
        ok = ok_delim and ok_after and ok_pages and ok_ppages
        return ("yes" if ok else "differs"), (
            f"delimiter {'ok' if ok_delim else (contents, prefixes)}; start-after "
            f"{'ok' if ok_after else after}; continuation {'ok' if ok_pages else (pages, seen)} "
            f"({pages} pages of 2); delimiter+paging {'ok' if ok_ppages else pseen}; "
            f"KeyCount={r.get('KeyCount')}; entry fields {fields}"
        )

    def list_v1(self) -> Result:
        r = self.s3.list_objects(Bucket=self.bucket, Prefix="l2/", Marker="l2/b/2")
        got = [c["Key"] for c in r.get("Contents", [])]
        ok_marker = got == ["l2/c", "l2/d/x", "l2/e"]
        r = self.s3.list_objects(Bucket=self.bucket, Prefix="l2/", Delimiter="/", MaxKeys=2)
        nm = r.get("NextMarker")
        r2 = self.s3.list_objects(Bucket=self.bucket, Prefix="l2/", MaxKeys=2)
        nm2 = r2.get("NextMarker")
        seen, marker = [], ""
        for _ in range(10):
            r3 = self.s3.list_objects(Bucket=self.bucket, Prefix="l2/", MaxKeys=2, Marker=marker)
            ks = [c["Key"] for c in r3.get("Contents", [])]
            seen += ks
            if not r3.get("IsTruncated"):
                break
            marker = r3.get("NextMarker") or ks[-1]
        ok_pages = seen == ["l2/a", "l2/b/1", "l2/b/2", "l2/c", "l2/d/x", "l2/e"]
        ok = ok_marker and ok_pages
        return ("yes" if ok else "differs"), (
            f"marker {'ok' if ok_marker else got}; paging by marker {'ok' if ok_pages else seen}; "
            f"NextMarker with delimiter={nm!r} (AWS: set), without delimiter={nm2!r} (AWS: absent)"
        )

    def list_versions_unversioned(self) -> Result:
        st = self.s3.get_bucket_versioning(Bucket=self.bucket).get("Status")
        r = self.s3.list_object_versions(Bucket=self.bucket, Prefix="l2/")
        vs = r.get("Versions", [])
        ids = sorted({v.get("VersionId") for v in vs})
        latest = all(v.get("IsLatest") for v in vs)
        h = self.s3.head_object(Bucket=self.bucket, Key="l2/a")
        ok = len(vs) == 6 and ids == ["null"] and latest
        return ("yes" if ok else "differs"), (
            f"versioning status {st!r}; {len(vs)} versions, VersionIds {ids}, all IsLatest={latest}; "
            f"HEAD x-amz-version-id={h.get('VersionId')!r} (AWS: absent)"
        )

    def delete_objects(self) -> Result:
        for k in ("del/1", "del/2"):
            self.s3.put_object(Bucket=self.bucket, Key=k, Body=b"x")
        r = self.s3.delete_objects(
            Bucket=self.bucket,
            Delete={"Objects": [{"Key": "del/1"}, {"Key": "del/2"}, {"Key": "del/missing"}]},
        )
        deleted = sorted(d["Key"] for d in r.get("Deleted", []))
        errors = r.get("Errors", [])
        left = self.s3.list_objects_v2(Bucket=self.bucket, Prefix="del/").get("KeyCount")
        rq = self.s3.delete_objects(Bucket=self.bucket, Delete={"Objects": [{"Key": "del/x"}], "Quiet": True})
        ok = deleted == ["del/1", "del/2", "del/missing"] and not errors and left == 0
        md5_hdr = "content-md5" in self.sent_headers or any(
            h.startswith("x-amz-checksum") for h in self.sent_headers
        )
        try:
            self.s3.delete_object(Bucket=self.bucket, Key="del/never-existed")
            single = "DeleteObject of a missing key: 204"
        except ClientError as e:
            single = f"DeleteObject of a missing key: {_code(e)}"
        return ("yes" if ok else "differs"), (
            f"Deleted {deleted} (missing key reported as deleted, like AWS), Errors {errors}; "
            f"left {left}; Quiet -> Deleted={len(rq.get('Deleted', []))}; boto3 sent an integrity "
            f"header: {md5_hdr}; {single}"
        )

    def metadata_non_ascii(self) -> Result:
        out = []
        value = "héllo wörld ✓ 日本"
        try:
            self.s3.put_object(Bucket=self.bucket, Key="meta/boto3", Body=b"x", Metadata={"name": value})
            got = self.s3.head_object(Bucket=self.bucket, Key="meta/boto3")["Metadata"].get("name")
            out.append(f"boto3 str value -> {got!r}")
        except Exception as e:
            out.append(f"boto3 refuses non-ASCII metadata client-side ({type(e).__name__})")
        # raw UTF-8 bytes in a signed header (SigV4 requires every x-amz-* header to be signed)
        st, _, body = self.raw(
            "PUT", f"/{self.bucket}/meta/raw", headers={"x-amz-meta-name": value}, body=b"x"
        )
        utf8_verbatim = False
        if st == 200:
            _, hdrs, _ = self.raw("HEAD", f"/{self.bucket}/meta/raw")
            raw_back = hdrs.get("x-amz-meta-name", "")
            with contextlib.suppress(UnicodeError):  # http.client decodes header bytes as latin-1
                utf8_verbatim = raw_back.encode("latin-1").decode("utf-8") == value
            out.append(
                "raw UTF-8 header -> stored; GET/HEAD return "
                + (
                    "the same raw UTF-8 bytes (AWS: RFC 2047 =?UTF-8?B?..?=)"
                    if utf8_verbatim
                    else repr(raw_back)
                )
            )
        else:
            out.append(f"raw UTF-8 header -> HTTP {st} {body[:120]!r}")
        st, _, _ = self.raw(
            "PUT", f"/{self.bucket}/meta/unsigned", unsigned={"x-amz-meta-name": b"v"}, body=b"x"
        )
        out.append(f"unsigned x-amz-meta header -> HTTP {st} (AWS: 403 too)")
        # RFC 2047 encoded (what AWS returns for non-ASCII values)
        enc = "=?UTF-8?B?" + base64.b64encode(value.encode()).decode() + "?="
        self.s3.put_object(Bucket=self.bucket, Key="meta/rfc2047", Body=b"x", Metadata={"name": enc})
        got = self.s3.head_object(Bucket=self.bucket, Key="meta/rfc2047")["Metadata"].get("name")
        out.append(f"RFC 2047 value -> {'kept verbatim' if got == enc else repr(got)}")
        self.raw("PUT", f"/{self.bucket}/meta/case", headers={"X-Amz-Meta-MixedCase": "v"}, body=b"x")
        h = self.s3.head_object(Bucket=self.bucket, Key="meta/case")["Metadata"]
        out.append(f"X-Amz-Meta-MixedCase -> {list(h)}")
        return ("differs" if utf8_verbatim else "no"), "; ".join(out)

    def header_roundtrip(self) -> Result:
        want = {
            "ContentDisposition": 'attachment; filename="report.txt"',
            "CacheControl": "max-age=3600, must-revalidate",
            "ContentEncoding": "gzip",
            "ContentLanguage": "de-DE",
            "ContentType": "application/x-ferry-test",
        }
        body = b"\x1f\x8b not really gzip"
        self.s3.put_object(Bucket=self.bucket, Key="hdr/obj", Body=body, Expires=time.time() + 86400, **want)
        h = self.s3.head_object(Bucket=self.bucket, Key="hdr/obj")
        g = self.s3.get_object(Bucket=self.bucket, Key="hdr/obj")
        gbody = g["Body"].read()
        bad = {k: (v, h.get(k)) for k, v in want.items() if h.get(k) != v}
        gbad = {k: (v, g.get(k)) for k, v in want.items() if g.get(k) != v}
        exp = h.get("Expires") or h.get("ExpiresString")
        # response-* overrides on GET
        o = self.s3.get_object(
            Bucket=self.bucket,
            Key="hdr/obj",
            ResponseContentType="text/x-over",
            ResponseCacheControl="no-cache",
            ResponseContentDisposition="inline",
        )
        ok_over = (o["ContentType"], o["CacheControl"], o["ContentDisposition"]) == (
            "text/x-over",
            "no-cache",
            "inline",
        )
        o["Body"].read()
        ok = not bad and not gbad and gbody == body
        return ("yes" if ok and ok_over else "differs"), (
            f"HEAD mismatches {bad or 'none'}; GET mismatches {gbad or 'none'}; body "
            f"{'unchanged (not decoded)' if gbody == body else 'CHANGED'}; "
            f"Expires {'kept' if exp else 'LOST'}; "
            f"response-* overrides {'ok' if ok_over else 'ignored'}"
        )

    def checksum_crc32(self) -> Result:
        data = b"checksum me " * 1000
        good = _crc32_b64(data)
        out = []
        r = self.s3.put_object(Bucket=self.bucket, Key="ck/header", Body=data, ChecksumCRC32=good)
        sent = self.sent_headers.get("x-amz-checksum-crc32")
        out.append(f"header form accepted (returned {r.get('ChecksumCRC32')!r})")
        h = self.s3.head_object(Bucket=self.bucket, Key="ck/header", ChecksumMode="ENABLED")
        out.append(f"HEAD ChecksumMode=ENABLED -> {h.get('ChecksumCRC32')!r}")
        try:
            self.s3.put_object(
                Bucket=self.bucket, Key="ck/bad", Body=data, ChecksumCRC32=_crc32_b64(b"other")
            )
            out.append("WRONG value: ACCEPTED")
            bad_ok = False
        except ClientError as e:
            out.append(f"wrong value -> {_code(e)}")
            bad_ok = True
        # boto3's default (flexible checksums, 1.36+): over http it sends the header form
        self.s3.put_object(Bucket=self.bucket, Key="ck/default", Body=data)
        dflt = sorted(k for k in self.sent_headers if k.startswith("x-amz-checksum") or k == "content-md5")
        out.append(f"boto3 default PUT over http sends {dflt}")
        # aws-chunked with a trailing checksum (what boto3 sends over https)
        chunked = (
            f"{len(data):x}\r\n".encode()
            + data
            + b"\r\n0\r\n"
            + f"x-amz-checksum-crc32:{good}\r\n\r\n".encode()
        )
        st, _, body = self.raw(
            "PUT",
            f"/{self.bucket}/ck/trailer",
            headers={
                "Content-Encoding": "aws-chunked",
                "x-amz-decoded-content-length": str(len(data)),
                "x-amz-trailer": "x-amz-checksum-crc32",
            },
            body=chunked,
            payload_hash="STREAMING-UNSIGNED-PAYLOAD-TRAILER",
        )
        if st == 200:
            back = self.s3.get_object(Bucket=self.bucket, Key="ck/trailer")["Body"].read()
            out.append(f"aws-chunked trailer -> 200, body {'ok' if back == data else 'WRONG'}")
        else:
            out.append(f"aws-chunked trailer -> HTTP {st} {body[:100]!r}")
        # multipart with CRC32 part checksums
        try:
            up = self.s3.create_multipart_upload(Bucket=self.bucket, Key="ck/mpu", ChecksumAlgorithm="CRC32")
            p = self.s3.upload_part(
                Bucket=self.bucket,
                Key="ck/mpu",
                UploadId=up["UploadId"],
                PartNumber=1,
                Body=data,
                ChecksumCRC32=good,
            )
            c = self.s3.complete_multipart_upload(
                Bucket=self.bucket,
                Key="ck/mpu",
                UploadId=up["UploadId"],
                MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": p["ETag"], "ChecksumCRC32": good}]},
            )
            out.append(f"multipart CRC32: complete ok, ChecksumCRC32={c.get('ChecksumCRC32')!r}")
        except ClientError as e:
            out.append(f"multipart CRC32: {_code(e)}")
        return ("yes" if sent == good and bad_ok else "differs"), "; ".join(out)

    def bucket_location(self) -> Result:
        r = self.s3.get_bucket_location(Bucket=self.bucket)
        return "yes", f"LocationConstraint={r.get('LocationConstraint')!r} (AWS us-east-1: None)"

    def create_existing(self) -> Result:
        try:
            self.s3.create_bucket(Bucket=self.bucket)
            return (
                "differs",
                "200 OK (AWS us-east-1 legacy behaviour; other regions: BucketAlreadyOwnedByYou)",
            )
        except ClientError as e:
            c = _code(e)
            return ("yes" if "BucketAlreadyOwnedByYou" in c or "BucketAlreadyExists" in c else "differs"), c

    def delete_nonempty(self) -> Result:
        b = "probe-nonempty"
        self.s3.create_bucket(Bucket=b)
        self.s3.put_object(Bucket=b, Key="k", Body=b"x")
        try:
            self.s3.delete_bucket(Bucket=b)
            res = "differs", "deleted with its objects"
        except ClientError as e:
            c = _code(e)
            res = ("yes" if "BucketNotEmpty" in c else "differs"), c
        try:
            self.s3.delete_bucket(Bucket="probe-missing-bucket")
            missing = "missing bucket: 204"
        except ClientError as e:
            missing = f"missing bucket: {_code(e)}"
        note = "with -s3.allowDeleteBucketNotEmpty=false; weed mini's default is true"
        return res[0], f"{res[1]} ({note}); {missing}"

    def missing_things(self) -> Result:
        out = []
        try:
            self.s3.put_object(Bucket="probe-no-such-bucket", Key="k", Body=b"x")
            out.append("PUT into missing bucket: ACCEPTED")
        except ClientError as e:
            out.append(f"PUT into missing bucket: {_code(e)}")
        try:
            self.s3.get_object(Bucket=self.bucket, Key="no/such/key")
        except ClientError as e:
            out.append(f"GET missing key: {_code(e)}")
        try:
            self.s3.head_object(Bucket=self.bucket, Key="no/such/key")
        except ClientError as e:
            out.append(f"HEAD missing key: {_code(e)}")
        try:
            self.s3.head_bucket(Bucket="probe-no-such-bucket")
        except ClientError as e:
            out.append(f"HEAD missing bucket: {_code(e)}")
        good = all(x in " ".join(out) for x in ("NoSuchBucket", "NoSuchKey", "404"))
        return ("yes" if good else "differs"), "; ".join(out)

    def range_and_conditions(self) -> Result:
        data = bytes(range(256)) * 40
        r = self.s3.put_object(Bucket=self.bucket, Key="rng/obj", Body=data)
        etag = r["ETag"]
        out = []
        g = self.s3.get_object(Bucket=self.bucket, Key="rng/obj", Range="bytes=100-199")
        ok_r = g["Body"].read() == data[100:200] and g["ContentRange"] == f"bytes 100-199/{len(data)}"
        out.append(f"Range 100-199 {'ok' if ok_r else 'WRONG'}")
        g = self.s3.get_object(Bucket=self.bucket, Key="rng/obj", Range="bytes=-10")
        ok_s = g["Body"].read() == data[-10:]
        out.append(f"suffix range {'ok' if ok_s else 'WRONG'}")
        try:
            self.s3.get_object(Bucket=self.bucket, Key="rng/obj", Range=f"bytes={len(data) + 5}-")
            out.append("unsatisfiable range: 200")
        except ClientError as e:
            out.append(f"unsatisfiable range: {_code(e)}")
        for name, kw in (
            ("If-None-Match=etag", {"IfNoneMatch": etag}),
            ("If-Match=other", {"IfMatch": '"x"'}),
        ):
            try:
                self.s3.get_object(Bucket=self.bucket, Key="rng/obj", **kw)["Body"].read()
                out.append(f"{name}: 200")
            except ClientError as e:
                out.append(f"{name}: HTTP {e.response['ResponseMetadata']['HTTPStatusCode']}")
        try:  # conditional write (AWS since 2024)
            self.s3.put_object(Bucket=self.bucket, Key="rng/obj", Body=b"x", IfNoneMatch="*")
            out.append("PUT If-None-Match=* on existing key: ACCEPTED")
        except ClientError as e:
            out.append(f"PUT If-None-Match=* on existing: {_code(e)}")
        good = ok_r and ok_s and "InvalidRange" in out[2] and "304" in out[3] and "412" in out[4]
        return ("yes" if good else "differs"), "; ".join(out)

    def presigned(self) -> Result:
        import urllib.request

        url = self.s3.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": "rng/obj"}, ExpiresIn=300
        )
        with urllib.request.urlopen(url, timeout=10) as r:
            ok_get = r.status == 200
        url = self.s3.generate_presigned_url(
            "put_object", Params={"Bucket": self.bucket, "Key": "pre/put"}, ExpiresIn=300
        )
        req = urllib.request.Request(url, data=b"presigned", method="PUT")
        with urllib.request.urlopen(req, timeout=10) as r:
            ok_put = r.status == 200
        return ("yes" if ok_get and ok_put else "no"), f"presigned GET {ok_get}, PUT {ok_put}"

    def tagging(self) -> Result:
        self.s3.put_object(Bucket=self.bucket, Key="tag/obj", Body=b"x", Tagging="a=1&b=2")
        t = self.s3.get_object_tagging(Bucket=self.bucket, Key="tag/obj")["TagSet"]
        return ("yes" if len(t) == 2 else "differs"), f"TagSet {t}"


CHECKS: list[tuple[str, Callable[[Probe], Result]]] = [
    ("Multipart upload (ETag form)", Probe.multipart),
    ("Multipart error cases", Probe.multipart_errors),
    ("CopyObject MetadataDirective=REPLACE", Probe.copy_replace),
    ("UploadPartCopy (+range)", Probe.upload_part_copy),
    ("ListObjectsV2 delimiter/start-after/continuation", Probe.list_v2),
    ("ListObjects v1 marker", Probe.list_v1),
    ("ListObjectVersions (unversioned)", Probe.list_versions_unversioned),
    ("DeleteObjects", Probe.delete_objects),
    ("User metadata, non-ASCII values", Probe.metadata_non_ascii),
    ("Content-Disposition/Cache-Control/Content-Encoding", Probe.header_roundtrip),
    ("x-amz-checksum-crc32", Probe.checksum_crc32),
    ("GetBucketLocation", Probe.bucket_location),
    ("CreateBucket on existing bucket", Probe.create_existing),
    ("DeleteBucket non-empty", Probe.delete_nonempty),
    ("Missing bucket/key errors", Probe.missing_things),
    ("Range + conditional requests", Probe.range_and_conditions),
    ("Presigned URLs", Probe.presigned),
    ("Object tagging", Probe.tagging),
]


def run(server: SeaweedServer) -> list[dict[str, str]]:
    probe = Probe(server)
    rows = []
    for name, fn in CHECKS:
        try:
            status, detail = fn(probe)
        except ClientError as e:
            status, detail = "error", _code(e) + " " + str(e)[:200]
        except Exception as e:
            status, detail = "error", f"{type(e).__name__}: {e}"[:300]
        rows.append({"feature": name, "result": status, "detail": detail})
    return rows


def main() -> int:
    import subprocess

    from tests.support.seaweed import find_weed

    version = subprocess.run([find_weed(), "version"], capture_output=True, text=True).stdout.strip()
    version = next((ln for ln in version.splitlines() if ln.startswith("version")), version)
    with SeaweedServer() as server:
        rows = run(server)
        startup = server.startup_seconds
    if "--json" in sys.argv:
        print(json.dumps({"weed": version, "startup_seconds": startup, "rows": rows}, indent=2))
        return 0
    print(f"SeaweedFS: {version} (weed mini, started in {startup:.2f} s)\n")
    w = max(len(r["feature"]) for r in rows)
    print(f"| {'feature'.ljust(w)} | result     | detail")
    print(f"|-{'-' * w}-|------------|-------")
    for r in rows:
        print(f"| {r['feature'].ljust(w)} | {r['result'].ljust(10)} | {r['detail']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
