"""Which S3 operation a request is: S3 selects it by method, target and query/headers.

A plain path router cannot do this (``PUT /b/k`` is PutObject, CopyObject or UploadPart), so
this is an explicit table, checked top to bottom; the first matching row wins.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from app.s3.handlers import acl, attributes, buckets, multipart, objects
from app.s3.request import S3Request
from app.s3.response import Response
from app.services.gateway import Gateway

Handler = Callable[[S3Request, Gateway], Awaitable[Response]]

# Every sub-resource S3 selects an operation by (the query flags of botocore's S3 model, checked by
# tests/unit/test_router.py, plus older ones). A request naming one must reach a route that takes it:
# ``PUT /b?versioning`` is PutBucketVersioning, not CreateBucket, and ``PUT /b/k?renameObject`` must
# never be read as a PutObject of an empty body. The ones no route takes answer NotImplemented.
SUBRESOURCES = frozenset({
    "abac", "accelerate", "acl", "analytics", "annotation", "attributes", "cors", "default-storage-class",
    "delete", "encryption", "intelligent-tiering", "inventory", "legal-hold", "lifecycle", "list-type",
    "location", "logging", "metadataAnnotationTable", "metadataConfiguration", "metadataInventoryTable",
    "metadataJournalTable", "metadataTable", "metrics", "notification", "object-lock", "ownershipControls", "part",
    "policy", "policyStatus", "publicAccessBlock", "renameObject", "replication", "requestPayment", "restore",
    "retention", "select", "select-type", "session", "tagging", "torrent", "uploads", "versioning", "versions",
    "website", "uploadId", "partNumber",
})


@dataclass(frozen=True)
class Route:
    name: str
    method: str
    target: str  # "service", "bucket" or "object"
    handler: Handler
    query: tuple[str, ...] = ()
    header: str | None = None
    tolerates: tuple[str, ...] = ()  # sub-resources the handler itself judges (GET by partNumber)

    def takes(self, subresources: set[str]) -> bool:
        """Whether every sub-resource the request names is one this route is for."""
        return subresources.issubset(self.query + self.tolerates)


ROUTES: tuple[Route, ...] = (
    Route("ListBuckets", "GET", "service", buckets.list_buckets),
    # bucket
    Route("GetBucketAcl", "GET", "bucket", acl.get_bucket_acl, ("acl",)),
    Route("PutBucketAcl", "PUT", "bucket", acl.put_bucket_acl, ("acl",)),
    Route("GetBucketLocation", "GET", "bucket", buckets.get_bucket_location, ("location",)),
    Route("GetBucketVersioning", "GET", "bucket", buckets.get_bucket_versioning, ("versioning",)),
    Route("ListObjectVersions", "GET", "bucket", buckets.list_object_versions, ("versions",)),
    Route("ListMultipartUploads", "GET", "bucket", multipart.list_uploads, ("uploads",)),
    Route("ListObjectsV2", "GET", "bucket", buckets.list_objects_v2, ("list-type",)),
    Route("ListObjects", "GET", "bucket", buckets.list_objects_v1),
    Route("HeadBucket", "HEAD", "bucket", buckets.head_bucket),
    Route("CreateBucket", "PUT", "bucket", buckets.create_bucket),
    Route("DeleteBucket", "DELETE", "bucket", buckets.delete_bucket),
    Route("DeleteObjects", "POST", "bucket", buckets.delete_objects, ("delete",)),
    # object
    Route("GetObjectAttributes", "GET", "object", attributes.get_object_attributes, ("attributes",)),
    Route("GetObjectAcl", "GET", "object", acl.get_object_acl, ("acl",)),
    Route("PutObjectAcl", "PUT", "object", acl.put_object_acl, ("acl",)),
    Route("ListParts", "GET", "object", multipart.list_parts, ("uploadId",)),
    Route("GetObject", "GET", "object", objects.get_object, tolerates=("partNumber",)),
    Route("HeadObject", "HEAD", "object", objects.head_object, tolerates=("partNumber",)),
    Route("UploadPartCopy", "PUT", "object", multipart.upload_part_copy, ("partNumber", "uploadId"),
          "x-amz-copy-source"),
    Route("UploadPart", "PUT", "object", multipart.upload_part, ("partNumber", "uploadId")),
    Route("RenameObject", "PUT", "object", objects.rename_object, ("renameObject",)),
    Route("CopyObject", "PUT", "object", objects.copy_object, (), "x-amz-copy-source"),
    Route("PutObject", "PUT", "object", objects.put_object),
    Route("CreateMultipartUpload", "POST", "object", multipart.create_upload, ("uploads",)),
    Route("CompleteMultipartUpload", "POST", "object", multipart.complete_upload, ("uploadId",)),
    Route("AbortMultipartUpload", "DELETE", "object", multipart.abort_upload, ("uploadId",)),
    Route("DeleteObject", "DELETE", "object", objects.delete_object),
)

NOT_IMPLEMENTED = Route("NotImplemented", "*", "*", buckets.not_implemented)

# The table's rows per (method, target), in table order: a GET of an object looks at 3 rows, not 19.
_BY_METHOD_TARGET: dict[tuple[str, str], tuple[Route, ...]] = {}
for _route in ROUTES:
    _BY_METHOD_TARGET[(_route.method, _route.target)] = (
        *_BY_METHOD_TARGET.get((_route.method, _route.target), ()), _route)


def resolve(req: S3Request) -> Route:
    """The operation for a request; sub-resources and methods no route takes answer NotImplemented."""
    target = "object" if req.key else ("bucket" if req.bucket else "service")
    query = req.query
    named = set(SUBRESOURCES.intersection(query)) if query else set()
    for route in _BY_METHOD_TARGET.get((req.method, target), ()):
        if route.query and not all(q in query for q in route.query):
            continue
        if route.header and route.header not in req.headers:
            continue
        if named and not route.takes(named):
            continue
        return route
    return NOT_IMPLEMENTED
