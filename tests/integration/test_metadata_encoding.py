"""User metadata outside ASCII, through a real ``ferry serve`` in front of SeaweedFS.

HTTP header values are bytes; clients (boto3 through http.client) send a ``str`` value as
ISO-8859-1 and read one back the same way, and sign the value's UTF-8 in the canonical request.
What the client wrote must come back as it reads it, from the buffer, from the cache and from
the remote, the same as SeaweedFS alone answers."""

from __future__ import annotations

import uuid
from typing import Any

from botocore.handlers import validate_ascii_metadata

from app.adapters.remote import rawsig
from tests.support.gateway import GatewayProcess, admin_call, remote_client
from tests.support.seaweed import SeaweedServer


def latin1_client(client: Any) -> Any:
    """boto3 refuses non-ASCII metadata up front; other SDKs (and curl) send it as Latin-1."""
    client.meta.events.unregister("before-parameter-build.s3.PutObject", validate_ascii_metadata)
    client.meta.events.unregister("before-parameter-build.s3.CopyObject", validate_ascii_metadata)
    client.meta.events.unregister("before-parameter-build.s3.CreateMultipartUpload", validate_ascii_metadata)
    return client


def raw_latin1(client: Any) -> Any:
    """A client that sends header strings as their Latin-1 bytes and signs those bytes (curl,
    Go's SDK and SeaweedFS's own verifier work on the bytes), built from Ferry's remote hooks."""
    rawsig.install(client)
    return latin1_client(client)


LATIN1 = {"name": "café crème", "sign": "¡¿ÄÖÜßñ°±µ", "plain": "ascii only"}


def test_boto3_non_ascii_metadata_answers_what_the_remote_alone_answers(
        gateway: GatewayProcess, seaweed: SeaweedServer, bucket: str) -> None:
    """boto3 (with its ASCII check lifted) sends a str value as UTF-8 and reads header bytes as
    Latin-1: SeaweedFS alone hands back the mojibake of what was written; Ferry must answer the
    same, buffered and destaged."""
    key = f"meta/{uuid.uuid4().hex}"
    s3 = latin1_client(gateway.client())
    direct = latin1_client(remote_client(seaweed))
    direct.put_object(Bucket=bucket, Key=key + "-direct", Body=b"x", Metadata=LATIN1)
    reference = direct.head_object(Bucket=bucket, Key=key + "-direct")["Metadata"]
    assert reference["name"] == "café crème".encode().decode("latin-1")
    s3.put_object(Bucket=bucket, Key=key, Body=b"x", Metadata=LATIN1)
    assert s3.head_object(Bucket=bucket, Key=key)["Metadata"] == reference
    gateway.flush(bucket, timeout=60)
    admin_call(gateway, "POST", "/admin/cache/evict", {"bucket": bucket, "prefix": key})
    assert direct.head_object(Bucket=bucket, Key=key)["Metadata"] == reference
    got = s3.get_object(Bucket=bucket, Key=key)
    got["Body"].read()
    assert got["Metadata"] == reference


def test_latin1_bytes_come_back_as_they_were_sent(gateway: GatewayProcess, seaweed: SeaweedServer,
                                                 bucket: str) -> None:
    """A client that puts Latin-1 bytes on the wire (signed as SigV4 says: over the bytes) reads
    the same bytes back while the write is buffered and after its destage, through Ferry and on
    the remote, and so does a copy made with the metadata replaced."""
    key = f"meta/{uuid.uuid4().hex}"
    s3 = raw_latin1(gateway.client())
    direct = raw_latin1(remote_client(seaweed))
    direct.put_object(Bucket=bucket, Key=key + "-direct", Body=b"x", Metadata=LATIN1)
    assert direct.head_object(Bucket=bucket, Key=key + "-direct")["Metadata"] == LATIN1  # the reference
    s3.put_object(Bucket=bucket, Key=key, Body=b"x", Metadata=LATIN1)
    assert s3.head_object(Bucket=bucket, Key=key)["Metadata"] == LATIN1
    s3.copy_object(Bucket=bucket, Key=key + "-copy", CopySource={"Bucket": bucket, "Key": key},
                   MetadataDirective="REPLACE", Metadata={"copied": "naïve"})
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key + "-mpu", Metadata=LATIN1)
    part = s3.upload_part(Bucket=bucket, Key=key + "-mpu", UploadId=upload["UploadId"], PartNumber=1, Body=b"p")
    s3.complete_multipart_upload(Bucket=bucket, Key=key + "-mpu", UploadId=upload["UploadId"],
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    gateway.flush(bucket, timeout=60)
    admin_call(gateway, "POST", "/admin/cache/evict", {"bucket": bucket, "prefix": "meta/"})
    for name, want in ((key, LATIN1), (key + "-copy", {"copied": "naïve"}), (key + "-mpu", LATIN1)):
        assert direct.head_object(Bucket=bucket, Key=name)["Metadata"] == want, name
        assert s3.head_object(Bucket=bucket, Key=name)["Metadata"] == want, name
        got = s3.get_object(Bucket=bucket, Key=name)
        got["Body"].read()
        assert got["Metadata"] == want, name
