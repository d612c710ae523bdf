"""Where part ``n`` of a multipart object lies: GET/HEAD ``partNumber`` serves that part's bytes.

The parts are the ones GetObjectAttributes lists (a buffered version's journal blobs, or the
remote's parts of a destaged one), in order; ``n`` counts them from 1, as S3's
``x-amz-mp-parts-count`` does."""

from __future__ import annotations

from collections.abc import Sequence

from app.domain.errors import S3Error
from app.domain.objects import PartAttributes


def part_bounds(parts: Sequence[PartAttributes], n: int) -> tuple[int, int]:
    """(first byte, last byte) of part ``n``; a part past the last is S3's 416 InvalidPartNumber."""
    if not 1 <= n <= len(parts):
        raise S3Error("InvalidPartNumber", "The requested partnumber is not satisfiable")
    start = sum(p.size for p in parts[: n - 1])
    return start, start + parts[n - 1].size - 1
