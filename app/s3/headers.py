"""The S3 header families and what Ferry does with each: one table that the request layer
enforces (``check``) and that ``app/s3/coverage.py`` renders into docs/s3-operations.md, so
the documented behaviour and the code cannot drift apart.

A family is ``supported`` (honoured; documented, nothing to check here), ``accepted`` (taken
and ignored: only the listed values, or any value when none are listed; anything else is
refused with the family's error) or ``refused`` (any such header answers the family's error).
Ignoring a header silently where it would change what S3 stores (tags, lock, SSE-C, a website
redirect) would let a client believe something that is not true, hence the refusals.
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
    probe: dict[str, str] = field(default_factory=dict)  # headers one PutObject of the test sends
    message: str | None = None

    def error_for(self, value: str) -> S3Error | None:
        if self.status == "supported":
            return None
        if self.status == "accepted" and (not self.values or value.strip().lower() in
                                          {v.lower() for v in self.values}):
            return None
        assert self.error is not None
        return S3Error(self.error, self.message)


NOT_IMPLEMENTED = "A header you provided implies functionality that is not implemented"

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
    HeaderFamily("SSE-C (customer keys)", ("x-amz-server-side-encryption-customer-*",
                                           "x-amz-copy-source-server-side-encryption-customer-*"),
                 "refused", "NotImplemented",
                 probe={"x-amz-server-side-encryption-customer-algorithm": "AES256"}, message=NOT_IMPLEMENTED),
    HeaderFamily("object lock", ("x-amz-object-lock-*", "x-amz-bypass-governance-retention"), "refused",
                 "InvalidRequest", probe={"x-amz-object-lock-legal-hold": "ON"},
                 message="Bucket is missing Object Lock Configuration"),
    HeaderFamily("object lock at CreateBucket", ("x-amz-bucket-object-lock-enabled",), "accepted",
                 "InvalidRequest", ("false",), probe={"x-amz-bucket-object-lock-enabled": "true"},
                 message="Object Lock is not supported by Ferry"),
    HeaderFamily("tagging", ("x-amz-tagging",), "accepted", "NotImplemented", ("",),
                 note="an empty tag set is accepted; tags are not stored", probe={"x-amz-tagging": "a=b"},
                 message=NOT_IMPLEMENTED),
    HeaderFamily("tagging directive", ("x-amz-tagging-directive",), "accepted", "NotImplemented", ("COPY",),
                 note="`COPY` (there are no tags to copy)", probe={"x-amz-tagging-directive": "REPLACE"},
                 message=NOT_IMPLEMENTED),
    HeaderFamily("storage class", ("x-amz-storage-class",), "accepted", "InvalidStorageClass", ("STANDARD",),
                 note="`STANDARD` only: the remote bucket's default class", probe={"x-amz-storage-class": "GLACIER"}),
    HeaderFamily("canned ACL", ("x-amz-acl",), "accepted", "AccessControlListNotSupported",
                 ("private", "bucket-owner-full-control"), note="the owner-only ACLs; as S3 with BucketOwnerEnforced",
                 probe={"x-amz-acl": "public-read"}),
    HeaderFamily("ACL grants", ("x-amz-grant-*",), "refused", "AccessControlListNotSupported",
                 probe={"x-amz-grant-read": "uri=\"http://acs.amazonaws.com/groups/global/AllUsers\""}),
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
    HeaderFamily("MFA", ("x-amz-mfa",), "refused", "NotImplemented", probe={"x-amz-mfa": "SERIAL 123456"},
                 message=NOT_IMPLEMENTED),
    HeaderFamily("append (write offset)", ("x-amz-write-offset-bytes",), "refused", "NotImplemented",
                 probe={"x-amz-write-offset-bytes": "0"}, message=NOT_IMPLEMENTED),
)

_EXACT: dict[str, HeaderFamily] = {}
_PREFIXES: list[tuple[str, HeaderFamily]] = []
for _family in FAMILIES:
    if _family.status == "supported":
        continue
    for _name in _family.headers:
        if _name.endswith("*"):
            _PREFIXES.append((_name[:-1], _family))
        else:
            _EXACT[_name] = _family


def family_of(name: str) -> HeaderFamily | None:
    """The checked family a lower-case header name belongs to (None: not checked here)."""
    found = _EXACT.get(name)
    if found is not None:
        return found
    for prefix, family in _PREFIXES:
        if name.startswith(prefix):
            return family
    return None


def check(req: S3Request) -> None:
    """Refuse a request carrying a header (or value) of a family Ferry does not honour, before
    any handler runs. Only ``x-amz-*`` names can belong to a checked family."""
    for name, value in req.headers.items():
        if not name.startswith("x-amz-"):
            continue
        family = family_of(name)
        if family is not None:
            err = family.error_for(value)
            if err is not None:
                raise err
