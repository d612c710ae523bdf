"""HTTP Range for S3: one range only, bytes unit, S3's rules for what is ignored vs refused."""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.domain.errors import S3Error

_RANGE = re.compile(r"^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$", re.ASCII)
# Offsets beyond any object size are all alike; capping them keeps int() away from its
# 4300-digit limit (a ValueError, i.e. a 500) on a hostile header.
_MAX_DIGITS = 20
_HUGE = 10**_MAX_DIGITS


def _offset(digits: str) -> int:
    return int(digits) if len(digits.lstrip("0")) <= _MAX_DIGITS else _HUGE


@dataclass(frozen=True, slots=True)
class ByteRange:
    """Inclusive first..last within an object of ``size`` bytes."""

    first: int
    last: int
    size: int

    @property
    def length(self) -> int:
        return self.last - self.first + 1

    @property
    def content_range(self) -> str:
        return f"bytes {self.first}-{self.last}/{self.size}"


def parse_range(header: str | None, size: int) -> ByteRange | None:
    """Return the range to serve, ``None`` for the whole object.

    Like S3: a syntactically invalid or multi-range header is ignored (whole object); a valid
    range that starts past the end is ``InvalidRange`` (416).
    """
    if not header:
        return None
    match = _RANGE.match(header)
    if match is None:
        return None
    start_s, end_s = match.groups()
    if not start_s and not end_s:
        return None
    if not start_s:  # suffix: last N bytes
        suffix = _offset(end_s)
        if suffix == 0:
            raise S3Error("InvalidRange", ActualObjectSize=str(size), RangeRequested=header)
        if size == 0:
            return None
        return ByteRange(max(0, size - suffix), size - 1, size)
    first = _offset(start_s)
    if end_s:
        last = _offset(end_s)
        if last < first:
            return None
    else:
        last = size - 1
    if first >= size:
        raise S3Error("InvalidRange", ActualObjectSize=str(size), RangeRequested=header)
    return ByteRange(first, min(last, size - 1), size)


def honoured_range_header(header: str | None) -> str | None:
    """The header if S3 would act on it (one satisfiable-looking range), else ``None``.

    Used before the size is known, e.g. to forward a Range to the remote only when S3 would
    honour it: an ignored header must not turn a 200 into a 206 or a 416.
    """
    if not header:
        return None
    match = _RANGE.match(header)
    if match is None:
        return None
    start_s, end_s = match.groups()
    if not start_s and not end_s:
        return None
    if start_s and end_s and _offset(end_s) < _offset(start_s):
        return None
    first = str(_offset(start_s)) if start_s else ""
    last = str(_offset(end_s)) if end_s else ""
    return f"bytes={first}-{last}"


@dataclass(frozen=True, slots=True)
class RangeRequest:
    """A GET's Range, parsed once at the edge and passed down as a value: the header to forward
    (``None`` when S3 would ignore it) and how it resolves once the object's size is known."""

    header: str | None = None

    @classmethod
    def from_header(cls, header: str | None) -> RangeRequest:
        return cls(honoured_range_header(header))

    @classmethod
    def span(cls, first: int, last: int) -> RangeRequest:
        """An explicit inclusive span (a copy source range), already checked against the size."""
        return cls(f"bytes={first}-{last}")

    def resolve(self, size: int) -> ByteRange | None:
        return parse_range(self.header, size) if self.header else None


WHOLE = RangeRequest()
