"""End-to-end: boto3 -> ferry serve -> SeaweedFS, over HTTP and HTTPS."""

from __future__ import annotations

import hashlib
import os
from typing import Any


def test_put_get_roundtrip(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="a/b.txt", Body=b"hello", ContentType="text/plain",
                  Metadata={"k": "v"})
    got = s3.get_object(Bucket=bucket, Key="a/b.txt")
    assert got["Body"].read() == b"hello"
    assert got["ContentType"] == "text/plain"
    assert got["Metadata"] == {"k": "v"}
    assert got["ETag"] == f'"{hashlib.md5(b"hello").hexdigest()}"'


def test_multipart_upload_file(s3: Any, bucket: str, tmp_path: Any) -> None:
    data = os.urandom(12 * 1024 * 1024)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    s3.upload_file(str(src), bucket, "big.bin")
    dst = tmp_path / "dst.bin"
    s3.download_file(bucket, "big.bin", str(dst))
    assert hashlib.sha256(dst.read_bytes()).digest() == hashlib.sha256(data).digest()
