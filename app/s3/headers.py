"""The S3 header families and what Ferry does with each: one table that the request layer
enforces (``check``) and that ``app/s3/coverage.py`` renders into docs/s3-operations.md, so
the documented behaviour and the code cannot drift apart.

A family is ``supported`` (honoured; documented, nothing to check here), ``accepted`` (taken
and ignored: only the listed values, or any value when none are listed; anything else is
refused with the family's error) or ``refused`` (any such header answers the family's error).
Ignoring a header silently where it would change what S3 stores (tags, lock, SSE-C, a website
redirect) would let a client believe something that is not true, hence the refusals. A header
that only asks S3 to skip a check of a feature the bucket does not have (bypassing governance
retention, an MFA code) is accepted: S3 accepts it on a bucket without that feature.

A family may be limited to some operations (``operations``); a header is judged by the first
family in the table that names it for the request's operation, so an ACL is judged one way at
CreateBucket and another at PutObject, as S3 does, and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.domain.errors import S3Error
from app.s3.request import S3Request


@dataclass(frozen=True)
class HeaderFamily:
    name: str
    headers: tuple[str, ...]  # lower-case names; a trailing ``*`` is a prefix
    status: str  # "supported" | "accepted" | "refused"
    error: str | None = None  # the S3 error code a refused header (or value) answers
    values: tuple[str, ...] = ()  # "accepted": the values taken (case-insensitive); empty: any
    note: str = ""
    probe: dict[str, str] = field(default_factory=dict)  # headers one request of the test sends
    message: str | None = None
    operations: tuple[str, ...] = ()  # the operations (router names) judged by this family; empty: all

    def judges(self, operation: str | None) -> bool:
        """Whether this family judges the header at ``operation`` (None: at some operation)."""
        return not self.operations or operation is None or operation in self.operations

    def error_for(self, value: str) -> S3Error | None:
        if self.status == "supported":
            return None
        if self.status == "accepted" and (not self.values or value.strip().lower() in
                                          {v.lower() for v in self.values}):
            return None
        assert self.error is not None
        return S3Error(self.error, self.message)


NOT_IMPLEMENTED = "A header you provided implies functionality that is not implemented"
NOT_SSE_C = "The encryption parameters are not applicable to this object."
ALL_USERS = 'uri="http://acs.amazonaws.com/groups/global/AllUsers"'
OBJECT_WRITES = ("PutObject", "CopyObject", "CreateMultipartUpload")

FAMILIES: tuple[HeaderFamily, ...] = (
    HeaderFamily("conditional reads", ("if-match", "if-none-match", "if-modified-since", "if-unmodified-since",
                                       "x-amz-copy-source-if-*"), "supported",
                 note="GET/HEAD: `412` / `304`; copy sources: `412`",
                 probe={}),
    HeaderFamily("conditional writes", ("if-match", "if-none-match"), "supported",
                 note="PutObject, CopyObject, CompleteMultipartUpload: `412 PreconditionFailed`, "
                      "`409 ConditionalRequestConflict`, see s3-compatibility.md",
                 probe={"if-none-match": "*"}),
    HeaderFamily("checksums", ("content-md5", "x-amz-checksum-*", "x-amz-sdk-checksum-algorithm", "x-amz-trailer"),
                 "supported", note="verified (`400 BadDigest`), stored, returned with `x-amz-checksum-mode: ENABLED`; "
                                  "`x-amz-checksum-type` (COMPOSITE / FULL_OBJECT) on CreateMultipartUpload",
                 probe={"x-amz-checksum-mode": "ENABLED"}),
    HeaderFamily("server-side encryption (SSE-S3, SSE-KMS)",
                 ("x-amz-server-side-encryption",), "accepted", "NotImplemented", ("AES256",),
                 note="`AES256` is accepted (the remote's default encryption applies; the local buffer is "
                      "not encrypted); `aws:kms`, `aws:kms:dsse` are refused",
                 probe={"x-amz-server-side-encryption": "aws:kms"}, message=NOT_IMPLEMENTED),
    HeaderFamily("SSE-KMS key and context", ("x-amz-server-side-encryption-aws-kms-key-id",
                                             "x-amz-server-side-encryption-context"), "refused", "NotImplemented",
                 probe={"x-amz-server-side-encryption-aws-kms-key-id": "alias/x"}, message=NOT_IMPLEMENTED),
    HeaderFamily("S3 Bucket Keys", ("x-amz-server-side-encryption-bucket-key-enabled",), "accepted",
                 probe={"x-amz-server-side-encryption-bucket-key-enabled": "true"}),
    HeaderFamily("SSE-C keys for reading", ("x-amz-server-side-encryption-customer-*",), "refused",
                 "InvalidRequest", note="no object Ferry holds is SSE-C encrypted: S3's answer for such an object",
                 probe={"x-amz-server-side-encryption-customer-algorithm": "AES256"},
                 message=NOT_SSE_C, operations=("GetObject", "HeadObject")),
    HeaderFamily("SSE-C keys of a copy source", ("x-amz-copy-source-server-side-encryption-customer-*",),
                 "refused", "InvalidRequest", note="no copy source is SSE-C encrypted",
                 probe={"x-amz-copy-source-server-side-encryption-customer-algorithm": "AES256"},
                 message=NOT_SSE_C, operations=("CopyObject", "UploadPartCopy")),
    HeaderFamily("SSE-C (customer keys)", ("x-amz-server-side-encryption-customer-*",),
                 "refused", "NotImplemented", note="writing with a customer key",
                 probe={"x-amz-server-side-encryption-customer-algorithm": "AES256"}, message=NOT_IMPLEMENTED),
    HeaderFamily("governance bypass on deletes", ("x-amz-bypass-governance-retention",), "accepted",
                 note="nothing is locked, so there is nothing to bypass (S3 accepts it on a bucket without "
                      "Object Lock; clean-ups send it)",
                 probe={"x-amz-bypass-governance-retention": "true"}, operations=("DeleteObject", "DeleteObjects")),
    HeaderFamily("object lock", ("x-amz-object-lock-*", "x-amz-bypass-governance-retention"), "refused",
                 "InvalidRequest", note="on writes, as S3 (and SeaweedFS) on a bucket without Object Lock",
                 probe={"x-amz-object-lock-legal-hold": "ON"}, message="Bucket is missing Object Lock Configuration"),
    HeaderFamily("object lock at CreateBucket", ("x-amz-bucket-object-lock-enabled",), "accepted",
                 "InvalidRequest", ("false",), probe={"x-amz-bucket-object-lock-enabled": "true"},
                 message="Object Lock is not supported by Ferry"),
    HeaderFamily("tagging", ("x-amz-tagging",), "accepted", "NotImplemented", ("",),
                 note="an empty tag set is accepted; tags are not stored", probe={"x-amz-tagging": "a=b"},
                 message=NOT_IMPLEMENTED),
    HeaderFamily("tagging directive", ("x-amz-tagging-directive",), "accepted", "InvalidArgument",
                 ("COPY", "REPLACE"), note="`COPY` (there are no tags to copy), `REPLACE` (with the tags of "
                                           "`x-amz-tagging`, judged above)",
                 probe={"x-amz-tagging-directive": "MERGE"}, message="Unknown tagging directive."),
    HeaderFamily("storage class", ("x-amz-storage-class",), "accepted", "InvalidStorageClass", ("STANDARD",),
                 note="`STANDARD` only: the remote bucket's default class", probe={"x-amz-storage-class": "GLACIER"}),
    HeaderFamily("canned ACL at CreateBucket", ("x-amz-acl",), "accepted", "InvalidBucketAclWithObjectOwnership",
                 ("private", "bucket-owner-full-control"), note="the owner-only ACLs, as S3 with its default "
                 "object ownership (BucketOwnerEnforced)", probe={"x-amz-acl": "public-read"},
                 operations=("CreateBucket",)),
    HeaderFamily("ACL grants at CreateBucket", ("x-amz-grant-*",), "refused", "InvalidBucketAclWithObjectOwnership",
                 probe={"x-amz-grant-read": ALL_USERS}, operations=("CreateBucket",)),
    HeaderFamily("canned ACL of a new object", ("x-amz-acl",), "accepted", "AccessControlListNotSupported",
                 ("bucket-owner-full-control",), note="as S3 with BucketOwnerEnforced (even `private` is refused); "
                 "PutObjectAcl and PutBucketAcl: see s3-compatibility.md", probe={"x-amz-acl": "public-read"},
                 operations=OBJECT_WRITES),
    HeaderFamily("ACL grants of a new object", ("x-amz-grant-*",), "refused", "AccessControlListNotSupported",
                 probe={"x-amz-grant-read": ALL_USERS}, operations=OBJECT_WRITES),
    HeaderFamily("object ownership", ("x-amz-object-ownership",), "accepted", "InvalidArgument",
                 ("BucketOwnerEnforced",), note="CreateBucket: `BucketOwnerEnforced`, the only mode Ferry has",
                 probe={"x-amz-object-ownership": "ObjectWriter"},
                 message="Ferry buckets are always BucketOwnerEnforced"),
    HeaderFamily("website redirect", ("x-amz-website-redirect-location",), "refused", "NotImplemented",
                 probe={"x-amz-website-redirect-location": "/elsewhere"}, message=NOT_IMPLEMENTED),
    HeaderFamily("request payer", ("x-amz-request-payer",), "accepted", probe={"x-amz-request-payer": "requester"}),
    HeaderFamily("expected bucket owner", ("x-amz-expected-bucket-owner", "x-amz-source-expected-bucket-owner"),
                 "accepted", note="Ferry has no account ids to compare",
                 probe={"x-amz-expected-bucket-owner": "123456789012"}),
    HeaderFamily("MFA", ("x-amz-mfa",), "accepted", note="no bucket has MFA delete, so there is nothing to "
                 "authorise (S3 accepts the header on such a bucket)", probe={"x-amz-mfa": "SERIAL 123456"}),
    HeaderFamily("append (write offset)", ("x-amz-write-offset-bytes",), "refused", "NotImplemented",
                 probe={"x-amz-write-offset-bytes": "0"}, message=NOT_IMPLEMENTED),
)

_EXACT: dict[str, list[HeaderFamily]] = {}
_PREFIXES: list[tuple[str, HeaderFamily]] = []
for _family in FAMILIES:
    if _family.status == "supported":
        continue
    for _name in _family.headers:
        if _name.endswith("*"):
            _PREFIXES.append((_name[:-1], _family))
        else:
            _EXACT.setdefault(_name, []).append(_family)


def family_of(name: str, operation: str | None) -> HeaderFamily | None:
    """The checked family that judges a lower-case header name at ``operation`` (None: not
    checked here): the first in the table. ``operation=None``: the first at any operation."""
    for family in _EXACT.get(name, ()):
        if family.judges(operation):
            return family
    for prefix, family in _PREFIXES:
        if name.startswith(prefix) and family.judges(operation):
            return family
    return None


def check(req: S3Request, operation: str | None = None) -> None:
    """Refuse a request carrying a header (or value) of a family Ferry does not honour, before
    any handler runs. Only ``x-amz-*`` names can belong to a checked family. ``operation`` is
    the router's name for the request (resolved here when not given)."""
    names = [name for name in req.headers if name.startswith("x-amz-") and family_of(name, None) is not None]
    if not names:
        return
    if operation is None:
        from app.s3.router import resolve  # the router imports the handlers; only needed here

        operation = resolve(req).name
    for name in names:
        family = family_of(name, operation)
        if family is not None:
            err = family.error_for(req.headers[name])
            if err is not None:
                raise err
