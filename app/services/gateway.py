"""The gateway facade: the S3 edge calls one object; each capability lives in its own module.

- ``buckets``: create, head, delete, list buckets (``app/services/buckets.py``)
- ``listing``: the merged listing (``app/services/reads/listing.py``)
- ``reads``: lookup, read-your-writes, cache read, remote read (``app/services/reads/service.py``)
- ``writes``: put, copy, delete into the journal or the remote (``app/services/writes/service.py``)
- ``multipart``: uploads, parts, Complete (``app/services/multipart/service.py``)
- ``conditional``: the per-key claim of a conditional write (``app/services/writes/key_holds.py``)
- ``core``: what they share: collaborators, write mode, backpressure, body receipt (``app/services/core.py``)
"""

from __future__ import annotations

from app.services.bodies import (  # noqa: F401 - re-exported for the S3 edge
    BodyStream,
    ExpectedDigests,
    ObjectRead,
    PutResult,
    ReceivedBody,
    StreamBody,
    multipart_etag,
)
from app.services.buckets import BucketsService
from app.services.core import GatewayCore
from app.services.multipart.service import MultipartService, composite_checksum  # noqa: F401
from app.services.reads.listing import ListingService, listing_start, merge_listing  # noqa: F401
from app.services.reads.service import ReadsService
from app.services.writes.key_holds import KeyHolds
from app.services.writes.service import WritesService


class Gateway:
    """Every S3 use case behind one name: the capability services, each built with what it uses.

    A thin facade: it wires the services to one another and hands out their operations; no
    behaviour lives here. ``core`` holds what they share (``app/services/core.py``)."""

    def __init__(self, core: GatewayCore) -> None:
        self.core = core
        self.buckets = BucketsService(core)
        self.reads = ReadsService(core)
        self.listing = ListingService(core, self.buckets)
        holds = KeyHolds(core)
        self.writes = WritesService(core, self.reads, holds)
        self.multipart = MultipartService(core, self.reads, self.buckets, holds)
        # What the node's settings chose, for the edge (ownership, the region it names).
        self.tenancy = core.tenancy
        self.region = core.region
        self.mode = core.mode
        # The S3 operations, by capability.
        self.list_buckets = self.buckets.list_buckets
        self.create_bucket = self.buckets.create_bucket
        self.head_bucket = self.buckets.head_bucket
        self.delete_bucket = self.buckets.delete_bucket
        self.bucket_location = self.buckets.bucket_location
        self.list_objects = self.listing.list_objects
        self.list_versions = self.listing.list_versions
        self.head_object = self.reads.head_object
        self.object_attributes = self.reads.object_attributes
        self.get_object = self.reads.get_object
        self.warm_object = self.reads.warm_object
        self.put_object = self.writes.put_object
        self.copy_object = self.writes.copy_object
        self.rename_object = self.writes.rename_object
        self.delete_object = self.writes.delete_object
        self.delete_objects = self.writes.delete_objects
        self.create_upload = self.multipart.create_upload
        self.upload_part = self.multipart.upload_part
        self.upload_part_copy = self.multipart.upload_part_copy
        self.list_parts = self.multipart.list_parts
        self.list_uploads = self.multipart.list_uploads
        self.abort_upload = self.multipart.abort_upload
        self.complete_upload = self.multipart.complete_upload
        self.complete_upload_result = self.multipart.complete_upload_result
        # What other nodes ask of this one (the fleet's internal endpoint).
        self.open_held_version = self.reads.open_held_version
        self.accept_replica = core.accept_replica
        self.open_held_part = self.multipart.open_held_part
        self.drop_held_parts = self.multipart.drop_held_parts
