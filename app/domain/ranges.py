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


Spec = tuple[int | None, int | None]  # (first, last): first None is a suffix of ``last`` bytes; last None runs to the end


def _spec(header: str | None) -> Spec | None:
    """The one parse of a Range header: the single range S3 acts on, or None when S3 ignores the
    header (absent, malformed, several ranges, ``bytes=-``, last before first)."""
    if not header:
        return None
    match = _RANGE.match(header)
    if match is None:
        return None
    start_s, end_s = match.groups()
    if not start_s and not end_s:
        return None
    first = _offset(start_s) if start_s else None
    last = _offset(end_s) if end_s else None
    if first is not None and last is not None and last < first:
        return None
    return first, last


def _header(spec: Spec) -> str:
    first, last = spec
    return f"bytes={'' if first is None else first}-{'' if last is None else last}"


def _resolve(spec: Spec | None, size: int, header: str | None) -> ByteRange | None:
    """Like S3: an ignored header is the whole object (None); a range that starts past the end,
    or a suffix of 0 bytes, is ``InvalidRange`` (416)."""
    if spec is None:
        return None
    first, last = spec
    if first is None:  # suffix: last N bytes
        suffix = last or 0
        if suffix == 0:
            raise S3Error("InvalidRange", ActualObjectSize=str(size), RangeRequested=header or "")
        if size == 0:
            return None
        return ByteRange(max(0, size - suffix), size - 1, size)
    if first >= size:
        raise S3Error("InvalidRange", ActualObjectSize=str(size), RangeRequested=header or "")
    return ByteRange(first, size - 1 if last is None else min(last, size - 1), size)


def parse_range(header: str | None, size: int) -> ByteRange | None:
    """The range to serve of an object of ``size`` bytes, ``None`` for the whole object."""
    return _resolve(_spec(header), size, header)


def honoured_range_header(header: str | None) -> str | None:
    """The header if S3 would act on it, in canonical form, else ``None``: forwarded to the remote
    only when S3 would honour it, an ignored header never turns a 200 into a 206 or a 416."""
    spec = _spec(header)
    return None if spec is None else _header(spec)


@dataclass(frozen=True, slots=True)
class RangeRequest:
    """A GET's Range, parsed once at the edge and passed down as a value: what S3 acts on
    (``spec``; None: the whole object), the header to forward, and how it resolves once the
    object's size is known."""

    spec: Spec | None = None

    @classmethod
    def from_header(cls, header: str | None) -> RangeRequest:
        return cls(_spec(header))

    @classmethod
    def span(cls, first: int, last: int) -> RangeRequest:
        """An explicit inclusive span (a copy source range, a block), already checked."""
        return cls((first, last))

    @property
    def header(self) -> str | None:
        """The canonical header to forward (None: ask for the whole object)."""
        return None if self.spec is None else _header(self.spec)

    @property
    def first_byte(self) -> int | None:
        """The first byte asked for: 0 for the whole object, None for a suffix (the size decides)."""
        return 0 if self.spec is None else self.spec[0]

    def resolve(self, size: int) -> ByteRange | None:
        return _resolve(self.spec, size, self.header)


WHOLE = RangeRequest()
