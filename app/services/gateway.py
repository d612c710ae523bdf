"""The gateway facade: the S3 edge calls one object; each capability lives in its own module.

- ``buckets``: create, head, delete, list buckets (``app/services/buckets.py``)
- ``listing``: the merged listing (``app/services/listing.py``)
- ``reads``: lookup, read-your-writes, cache read, remote read (``app/services/reads.py``)
- ``writes``: put, copy, delete into the journal or the remote (``app/services/writes.py``)
- ``multipart``: uploads, parts, Complete (``app/services/multipart.py``)
- ``core``: collaborators, write mode, backpressure, body receipt (``app/services/core.py``)
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
from app.services.listing import ListingService, listing_start, merge_listing  # noqa: F401
from app.services.multipart import MultipartService, composite_checksum  # noqa: F401
from app.services.reads import ReadsService
from app.services.writes import WritesService


class Gateway(WritesService, MultipartService, ReadsService, ListingService, BucketsService):
    """Every S3 use case behind one object, composed from the capability services."""
