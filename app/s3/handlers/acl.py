"""Access control lists. Ferry has one ACL: the owner's full control, which is what S3 has for a
bucket whose object ownership is ``BucketOwnerEnforced`` (the default since 2023). Tools send
the canned ``private`` ACL unasked, so reading it and setting it again are accepted; any other
ACL is refused as S3 refuses it on such a bucket (``AccessControlListNotSupported``)."""

from __future__ import annotations

from app.domain.errors import S3Error
from app.s3 import xml
from app.s3.handlers.buckets import OWNER
from app.s3.request import S3Request
from app.s3.response import Response
from app.services.gateway import Gateway

# Canned ACLs that mean "the owner, and nobody else": the only ACL Ferry has.
OWNER_ONLY = frozenset({"private", "bucket-owner-full-control"})
_GRANT = ('<Grant><Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="CanonicalUser">'
          "<ID>ferry</ID><DisplayName>ferry</DisplayName></Grantee><Permission>FULL_CONTROL</Permission></Grant>")
_MAX_ACL_BODY = 64 * 1024


def _policy() -> Response:
    inner = OWNER + "<AccessControlList>" + _GRANT + "</AccessControlList>"
    return Response.xml(xml.document("AccessControlPolicy", inner))


def _not_supported() -> S3Error:
    return S3Error("AccessControlListNotSupported")


async def _check_acl_request(req: S3Request) -> None:
    """Accept only an ACL that grants the owner full control and nothing else."""
    if any(name.startswith("x-amz-grant-") for name in req.headers):
        raise _not_supported()
    canned = req.headers.get("x-amz-acl")
    if canned is not None and canned.strip().lower() not in OWNER_ONLY:
        raise _not_supported()
    body = await req.read_body(_MAX_ACL_BODY)
    if canned is None and not body.strip():
        raise S3Error("MissingSecurityHeader", "Your request was missing a required header", MissingHeaderName="x-amz-acl")
    if body.strip():
        root = xml.parse(body)
        if xml.local(root.tag) != "AccessControlPolicy":
            raise S3Error("MalformedACLError")
        permissions = [g.text for g in root.iter() if xml.local(g.tag) == "Permission"]
        if any(p != "FULL_CONTROL" for p in permissions) or len(permissions) > 1:
            raise _not_supported()


async def get_bucket_acl(req: S3Request, gw: Gateway) -> Response:
    assert req.bucket is not None
    await gw.head_bucket(req.bucket)
    return _policy()


async def put_bucket_acl(req: S3Request, gw: Gateway) -> Response:
    assert req.bucket is not None
    await _check_acl_request(req)
    await gw.head_bucket(req.bucket)
    return Response(200)


async def get_object_acl(req: S3Request, gw: Gateway) -> Response:
    assert req.bucket is not None and req.key is not None
    await gw.head_object(req.bucket, req.key)
    return _policy()


async def put_object_acl(req: S3Request, gw: Gateway) -> Response:
    assert req.bucket is not None and req.key is not None
    await _check_acl_request(req)
    await gw.head_object(req.bucket, req.key)
    return Response(200)
