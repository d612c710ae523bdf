"""Authentication and tenancy negatives through a real ``ferry serve`` (write-back) and SeaweedFS:
each refused write gets the S3 error real S3 answers, and leaves no trace: no object through the
gateway or on the remote, no journal row, no blob or staging file in the data directory.

Every case tries to PUT its own key; the last test flushes and looks for any of them everywhere.
"""

from __future__ import annotations

import hashlib
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import requests

from tests.integration.test_s3_auth_payloads import _streaming_put, send, signed_headers, signed_request
from tests.support.gateway import ACCESS_KEY, ADMIN_TOKEN, SECRET_KEY, GatewayProcess
from tests.support.reliability import Tally

pytestmark = pytest.mark.reliability

BODY = b"must never be stored " * 100
TRIED: list[str] = []  # keys the refused requests aimed at


@pytest.fixture(scope="module")
def gw(seaweed: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(seaweed, tmp_path_factory.mktemp("sec-auth")) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def admin(gw: GatewayProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gw.endpoint, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def bucket(gw: GatewayProcess) -> str:
    name = f"sec-{uuid.uuid4().hex[:12]}"
    gw.client().create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="module")
def tally() -> Iterator[Tally]:
    t = Tally("security", "auth-negatives")
    yield t
    t.write()


def code_of(body: bytes) -> str | None:
    try:
        return ET.fromstring(body).findtext("Code")
    except ET.ParseError:
        return None


def target(bucket: str, case: str) -> tuple[str, str]:
    key = f"victim-{case}-{uuid.uuid4().hex[:6]}"
    TRIED.append(key)
    return key, f"/{bucket}/{key}"


def check(tally: Tally, case: str, status: int, body: bytes, want: tuple[int, str]) -> None:
    got = (status, code_of(body))
    tally.op(expected=got == want, what=f"{case}: got {got}, want {want}")
    assert got == want, body[:500]


def new_tenant(admin: httpx.Client) -> tuple[str, str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    assert admin.post("/admin/tenants", json={"name": name}).status_code == 201
    created = admin.post(f"/admin/tenants/{name}/keys").json()
    return created["access_key"], created["secret_key"]


def test_wrong_secret(gw: GatewayProcess, bucket: str, tally: Tally) -> None:
    _, path = target(bucket, "wrong-secret")
    status, _, body = signed_request(gw, "PUT", path, BODY, secret=SECRET_KEY + "x")
    check(tally, "SigV4 wrong secret", status, body, (403, "SignatureDoesNotMatch"))


def test_header_altered_after_signing(gw: GatewayProcess, bucket: str, tally: Tally) -> None:
    _, path = target(bucket, "altered-header")
    headers = signed_headers(gw, "PUT", path, {"Content-Length": str(len(BODY)), "x-amz-meta-owner": "alice"}, BODY)
    headers["x-amz-meta-owner"] = "mallory"
    status, _, body = send(gw, "PUT", path, headers, BODY)
    check(tally, "SigV4 signed header altered", status, body, (403, "SignatureDoesNotMatch"))


def test_body_altered_under_a_signed_payload(gw: GatewayProcess, bucket: str, tally: Tally) -> None:
    _, path = target(bucket, "altered-body")
    headers = signed_headers(gw, "PUT", path, {"Content-Length": str(len(BODY))}, BODY)
    tampered = b"X" + BODY[1:]
    status, _, body = send(gw, "PUT", path, headers, tampered)
    check(tally, "SigV4 body altered under its hash", status, body, (400, "XAmzContentSHA256Mismatch"))


def test_presigned_url_replayed_after_expiry(gw: GatewayProcess, bucket: str, tally: Tally) -> None:
    for version in ("s3v4", "s3"):
        key, _ = target(bucket, f"presigned-{version}")
        url = gw.client(signature_version=version).generate_presigned_url(
            "put_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=1)
        time.sleep(2.1)
        resp = requests.put(url, data=BODY, timeout=30)
        check(tally, f"presigned ({version}) after expiry", resp.status_code, resp.content, (403, "AccessDenied"))


@pytest.mark.parametrize("where", ["first-chunk", "signature"])
def test_chunk_signature_broken_mid_stream(gw: GatewayProcess, bucket: str, tally: Tally, where: str) -> None:
    _, path = target(bucket, f"chunk-{where}")
    chunks = [b"a" * 8192, b"b" * 8192, b"c" * 100]
    offset = {"first-chunk": len(b"2000;chunk-signature=") + 64 + 2 + 10,
              "signature": len(b"2000;chunk-signature=") + 5}[where]
    status, body = _streaming_put(gw, path, chunks, tamper=offset)
    check(tally, f"aws-chunked signature broken ({where})", status, body, (403, "SignatureDoesNotMatch"))


def test_sigv2_wrong_secret(gw: GatewayProcess, bucket: str, tally: Tally) -> None:
    key, _ = target(bucket, "v2-wrong-secret")
    from botocore.exceptions import ClientError
    with pytest.raises(ClientError) as info:
        gw.client(secret_key=SECRET_KEY + "x", signature_version="s3").put_object(Bucket=bucket, Key=key, Body=BODY)
    meta = info.value.response
    check(tally, "SigV2 wrong secret", meta["ResponseMetadata"]["HTTPStatusCode"],
          f"<Error><Code>{meta['Error']['Code']}</Code></Error>".encode(), (403, "SignatureDoesNotMatch"))


def _put_with(gw: GatewayProcess, access_key: str, secret: str, bucket: str, key: str) -> tuple[int, str]:
    from botocore.exceptions import ClientError
    try:
        gw.client(access_key, secret).put_object(Bucket=bucket, Key=key, Body=BODY)
    except ClientError as exc:
        return exc.response["ResponseMetadata"]["HTTPStatusCode"], exc.response["Error"]["Code"]
    return 200, ""


def _refused_within(gw: GatewayProcess, access_key: str, secret: str, bucket: str, key: str,
                    want: tuple[int, str], seconds: float = 8.0) -> tuple[tuple[int, str], float]:
    """Wait (reading, never writing) until the key is refused (secrets are cached a few seconds per
    process), then try the PUT; returns its answer and how long the refusal took to apply."""
    from botocore.exceptions import ClientError
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        try:
            gw.client(access_key, secret).list_objects_v2(Bucket=bucket)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == want[1]:
                break
        time.sleep(0.25)
    took = time.monotonic() - started
    return _put_with(gw, access_key, secret, bucket, key), took


def test_disabled_and_rotated_keys(gw: GatewayProcess, admin: httpx.Client, bucket: str, tally: Tally) -> None:
    ak, sk = new_tenant(admin)
    mine = f"own-{uuid.uuid4().hex[:8]}"
    assert gw.client(ak, sk).create_bucket(Bucket=mine)["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert admin.post(f"/admin/keys/{ak}/disable").status_code == 200
    key, _ = target(mine, "disabled-key")
    got, took = _refused_within(gw, ak, sk, mine, key, (403, "InvalidAccessKeyId"))
    tally.op(expected=got == (403, "InvalidAccessKeyId"), what=f"disabled key: {got} after {took:.1f} s")
    assert got == (403, "InvalidAccessKeyId")
    print(f"disabled key refused after {took:.1f} s")
    assert admin.post(f"/admin/keys/{ak}/enable").status_code == 200
    rotated = admin.post(f"/admin/keys/{ak}/rotate").json()
    key, _ = target(mine, "rotated-key")
    got, took = _refused_within(gw, ak, sk, mine, key, (403, "SignatureDoesNotMatch"))
    tally.op(expected=got == (403, "SignatureDoesNotMatch"), what=f"old secret after rotation: {got}")
    assert got == (403, "SignatureDoesNotMatch")
    print(f"old secret refused {took:.1f} s after rotation")
    assert _put_with(gw, rotated["access_key"], rotated["secret_key"], mine, "fine") == (200, "")


def test_another_tenants_key_on_a_bucket_it_does_not_own(gw: GatewayProcess, admin: httpx.Client, bucket: str,
                                                           tally: Tally) -> None:
    ak, sk = new_tenant(admin)
    key, _ = target(bucket, "other-tenant")
    client = gw.client(ak, sk)
    from botocore.exceptions import ClientError
    calls = {
        "PutObject": lambda: client.put_object(Bucket=bucket, Key=key, Body=BODY),
        "GetObject": lambda: client.get_object(Bucket=bucket, Key=key),
        "ListObjectsV2": lambda: client.list_objects_v2(Bucket=bucket),
        "DeleteObject": lambda: client.delete_object(Bucket=bucket, Key=key),
        "CreateMultipartUpload": lambda: client.create_multipart_upload(Bucket=bucket, Key=key),
        "CopyObject from it": lambda: client.copy_object(Bucket=f"own-{uuid.uuid4().hex[:6]}", Key="x",
                                                         CopySource={"Bucket": bucket, "Key": key}),
    }
    for name, call in calls.items():
        with pytest.raises(ClientError) as info:
            call()
        got = (info.value.response["ResponseMetadata"]["HTTPStatusCode"], info.value.response["Error"]["Code"])
        ok = got[0] in (403, 404) and got[1] in ("AccessDenied", "NoSuchBucket")
        tally.op(expected=ok, what=f"other tenant {name}: {got}")
        assert ok, (name, got)
    buckets = [b["Name"] for b in client.list_buckets()["Buckets"]]
    tally.op(expected=bucket not in buckets, what="other tenant's ListBuckets shows the bucket")
    assert bucket not in buckets


def _presigned_with(gw: GatewayProcess, access_key: str, secret: str, method: str, path: str, query: str,
                    payload: str | None = None) -> str:
    """A presigned URL for ``path?query`` (``query`` is part of what it signs); ``payload``, when
    given, is pinned as ``X-Amz-Content-Sha256`` in the query and signed as the payload hash."""
    from botocore.auth import S3SigV4QueryAuth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    class Signer(S3SigV4QueryAuth):
        def payload(self, request: Any) -> str:
            return payload or super().payload(request)

    if payload is not None:
        query = "&".join(filter(None, [query, f"X-Amz-Content-Sha256={payload}"]))
    request = AWSRequest(method=method, url=f"{gw.endpoint}{path}" + (f"?{query}" if query else ""))
    Signer(Credentials(access_key, secret), "s3", "us-east-1", expires=300).add_auth(request)
    return request.url


def test_a_tenant_cannot_sign_as_another_tenant(gw: GatewayProcess, admin: httpx.Client, tally: Tally) -> None:
    """Issue 25: a tenant presigns with its own secret and adds a first parameter naming the victim's
    key (``x-amz-credential=<victim>/x``, signed): the gateway once read the tenant from that one and
    the secret from the real X-Amz-Credential, and answered with the victim's objects and buckets."""
    victim_ak, victim_sk = new_tenant(admin)
    attacker_ak, attacker_sk = new_tenant(admin)
    victims = f"victim-{uuid.uuid4().hex[:8]}"
    gw.client(victim_ak, victim_sk).create_bucket(Bucket=victims)
    gw.client(victim_ak, victim_sk).put_object(Bucket=victims, Key="secret.txt", Body=b"the victim's data")
    key, _ = target(victims, "impersonated-put")
    inject = f"x-amz-credential={victim_ak}%2Fx"
    attempts = {
        "GET the victim's object": ("GET", f"/{victims}/secret.txt", inject),
        "PUT into the victim's bucket": ("PUT", f"/{victims}/{key}", inject),
        "LIST the victim's bucket": ("GET", f"/{victims}", f"{inject}&list-type=2"),
        "ListBuckets as the victim": ("GET", "/", inject),
        "the bootstrap key's unowned bucket": ("GET", "/", f"X-AMZ-CREDENTIAL={ACCESS_KEY}%2Fx"),
    }
    for case, (method, path, query) in attempts.items():
        url = _presigned_with(gw, attacker_ak, attacker_sk, method, path, query)
        resp = requests.request(method, url, data=BODY if method == "PUT" else None, timeout=30)
        check(tally, f"impersonation: {case}", resp.status_code, resp.content,
              (400, "AuthorizationQueryParametersError"))
        assert b"the victim's data" not in resp.content and f"<Name>{victims}<".encode() not in resp.content
    # The attacker's own presign still works, and still sees only its own (no) buckets.
    url = _presigned_with(gw, attacker_ak, attacker_sk, "GET", "/", "x-id=ListBuckets")
    resp = requests.get(url, timeout=30)
    assert resp.status_code == 200 and f"<Name>{victims}<".encode() not in resp.content


def test_presigned_put_enforces_its_pinned_payload_hash(gw: GatewayProcess, bucket: str, tally: Tally) -> None:
    """Issue 25: a presigned PUT that pins X-Amz-Content-Sha256 in its query authorises that body
    only; any other body was stored (only a header hash was compared)."""
    key, path = target(bucket, "pinned-hash")
    url = _presigned_with(gw, ACCESS_KEY, SECRET_KEY, "PUT", path, "", payload=hashlib.sha256(b"agreed").hexdigest())
    resp = requests.put(url, data=BODY, timeout=30)
    check(tally, "presigned PUT, body other than its pinned hash", resp.status_code, resp.content,
          (400, "XAmzContentSHA256Mismatch"))
    ok = requests.put(url, data=b"agreed", timeout=30)
    assert ok.status_code == 200, ok.content
    assert gw.client().get_object(Bucket=bucket, Key=key)["Body"].read() == b"agreed"
    TRIED.remove(key)  # stored on purpose, with the agreed body


@pytest.mark.parametrize("value", ["text/html\r\nX-Evil: 1", "text/html\nX-Evil: 1", "a\x00b"])
def test_control_characters_in_response_overrides_are_invalid_argument(gw: GatewayProcess, bucket: str,
                                                                       tally: Tally, value: str) -> None:
    """Issue 25: a signed ``response-content-type=text/html%0D%0AX-Evil:%201`` broke the connection
    (the server refused the header); S3 answers 400 InvalidArgument, in XML, and sets no header."""
    gw.client().put_object(Bucket=bucket, Key="override-target", Body=b"x")
    for method, operation in (("GET", "get_object"), ("HEAD", "head_object")):
        url = gw.client().generate_presigned_url(
            operation, Params={"Bucket": bucket, "Key": "override-target", "ResponseContentType": value})
        resp = requests.request(method, url, timeout=30)
        assert "X-Evil" not in resp.headers
        if method == "GET":
            check(tally, f"control character in response-content-type ({value!r})", resp.status_code,
                  resp.content, (400, "InvalidArgument"))
        else:
            assert resp.status_code == 400
    fine = gw.client().get_object(Bucket=bucket, Key="override-target", ResponseContentType="text/plain; a=b")
    assert fine["ContentType"] == "text/plain; a=b"


def test_no_trace_left(gw: GatewayProcess, admin: httpx.Client, bucket: str, seaweed: Any, tally: Tally) -> None:
    """After a flush: none of the refused keys exists anywhere, and no staging file remains."""
    assert TRIED, "run with the module's other tests"
    gw.flush()
    listed = {o["Key"] for o in gw.client().list_objects_v2(Bucket=bucket).get("Contents", [])}
    remote = {o["Key"] for o in seaweed.client().list_objects_v2(Bucket=bucket).get("Contents", [])}
    journal = admin.get("/admin/objects", params={"bucket": bucket}).json()
    rows = {o["key"] for o in journal["versions"]}
    leaked = [k for k in TRIED if k in listed or k in remote or k in rows]
    tmp = sorted((gw.data_dir / "tmp").iterdir())
    blobs = [p for p in (gw.data_dir / "blobs").rglob("*") if p.is_file()]
    stored = {hashlib.md5(p.read_bytes()).hexdigest() for p in blobs}
    tally.op(expected=not leaked and not tmp, what=f"traces: keys {leaked}, tmp {tmp}", hostile=False)
    assert not leaked and not tmp
    assert hashlib.md5(BODY).hexdigest() not in stored  # no refused body kept as a blob

