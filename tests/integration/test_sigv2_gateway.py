"""SigV2 through a real ``ferry serve`` in front of SeaweedFS: botocore's SigV2 header signer
(``signature_version="s3"``), its SigV2 presigner, and the AWS CLI's ``aws s3 presign`` with the
CLI's own defaults (no ``signature_version`` set), which is what users paste into a browser."""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.support.clients import make_client
from tests.support.gateway import GatewayProcess, remote_client


def v2_client(gateway: GatewayProcess, **kw: Any) -> Any:
    return gateway.client(signature_version="s3", **kw)


def fetch(url: str, method: str = "GET", data: bytes | None = None,
          headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, method=method, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_sigv2_header_auth_roundtrip(gateway: GatewayProcess, seaweed: Any, bucket: str) -> None:
    s3 = v2_client(gateway)
    body = os.urandom(70_000)
    key = f"v2/{uuid.uuid4().hex} a+b é"
    put = s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/x-test",
                        Metadata={"origin": "sigv2"})
    assert put["ETag"].strip('"') == hashlib.md5(body).hexdigest()
    got = s3.get_object(Bucket=bucket, Key=key)
    assert got["Body"].read() == body and got["Metadata"] == {"origin": "sigv2"}
    assert s3.get_object(Bucket=bucket, Key=key, Range="bytes=10-19")["Body"].read() == body[10:20]
    assert s3.head_object(Bucket=bucket, Key=key)["ContentLength"] == len(body)
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="v2/")["Contents"]]
    assert key in listed

    upload = s3.create_multipart_upload(Bucket=bucket, Key=key + ".mp")["UploadId"]
    part = s3.upload_part(Bucket=bucket, Key=key + ".mp", UploadId=upload, PartNumber=1, Body=body)
    s3.complete_multipart_upload(Bucket=bucket, Key=key + ".mp", UploadId=upload,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    assert s3.get_object(Bucket=bucket, Key=key + ".mp")["Body"].read() == body

    s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": key}, {"Key": key + ".mp"}]})
    gateway.flush(bucket)
    remaining = remote_client(seaweed).list_objects_v2(Bucket=bucket, Prefix="v2/").get("Contents", [])
    assert [o["Key"] for o in remaining] == []


def test_sigv2_wrong_secret_and_unknown_key_are_refused(gateway: GatewayProcess, bucket: str) -> None:
    for client, code in ((v2_client(gateway, secret_key="not-the-secret"), "SignatureDoesNotMatch"),
                         (v2_client(gateway, access_key="NOSUCHKEY000000"), "InvalidAccessKeyId")):
        with pytest.raises(ClientError) as info:
            client.put_object(Bucket=bucket, Key="v2/refused", Body=b"x")
        assert info.value.response["Error"]["Code"] == code
        assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    with pytest.raises(ClientError) as info:
        v2_client(gateway).head_object(Bucket=bucket, Key="v2/refused")
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_sigv2_presigned_get_and_put(gateway: GatewayProcess, bucket: str) -> None:
    s3 = v2_client(gateway)
    key = f"v2/presigned {uuid.uuid4().hex}+x"
    body = os.urandom(5000)
    put_url = s3.generate_presigned_url("put_object", ExpiresIn=300, Params={
        "Bucket": bucket, "Key": key, "ContentType": "application/x-ferry"})
    assert "AWSAccessKeyId=" in put_url and "X-Amz-" not in put_url
    # The signed Content-Type must be the one sent (urllib's default form type is not).
    assert fetch(put_url, "PUT", body)[0] == 403
    assert fetch(put_url, "PUT", body, {"Content-Type": "application/x-ferry"})[0] == 200
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=300)
    assert fetch(url) == (200, body)
    status, error = fetch(url.replace("Signature=", "Signature=A"))
    assert status == 403 and b"<Code>SignatureDoesNotMatch</Code>" in error
    expired = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=-10)
    status, error = fetch(expired)
    assert status == 403 and b"Request has expired" in error


def test_aws_cli_presign_with_its_defaults(gateway: GatewayProcess, bucket: str, tmp_path: Path) -> None:
    """``aws s3 presign`` as a user runs it: the CLI's default signer for presigned URLs."""
    cli = make_client("aws", gateway, tmp_path)
    config = Path(cli.env["AWS_CONFIG_FILE"])
    config.write_text("[default]\nregion = us-east-1\noutput = json\ns3 =\n  addressing_style = path\n")
    key = f"v2/cli {uuid.uuid4().hex}.bin"
    body = os.urandom(3000)
    gateway.client().put_object(Bucket=bucket, Key=key, Body=body)
    url = cli.presign(bucket, key)
    assert url is not None and "AWSAccessKeyId=" in url  # the CLI's default presigner is SigV2
    assert fetch(url) == (200, body), url
