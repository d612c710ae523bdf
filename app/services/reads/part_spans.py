"""Where part ``n`` of a multipart object lies: GET/HEAD ``partNumber`` serves that part's bytes.

The parts are the ones GetObjectAttributes lists (a buffered version's journal blobs, or the
remote's parts of a destaged one), in order; ``n`` is the number the client uploaded the part
under, as in S3 (parts 1 and 3 of an upload are parts 1 and 3 of the object; 2 is none)."""

from __future__ import annotations

from collections.abc import Sequence

from app.domain.errors import S3Error
from app.domain.objects import PartAttributes


def part_bounds(parts: Sequence[PartAttributes], n: int) -> tuple[int, int]:
    """(first byte, last byte) of part ``n``; a number no part has is S3's 416 InvalidPartNumber."""
    start = 0
    for part in parts:
        if part.number == n:
            return start, start + part.size - 1
        start += part.size
    raise S3Error("InvalidPartNumber", "The requested partnumber is not satisfiable")
