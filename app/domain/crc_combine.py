"""The CRC of a concatenation from the CRCs of its pieces (S3's FULL_OBJECT multipart checksum).

S3 computes a FULL_OBJECT checksum of a multipart upload (CRC32, CRC32C, CRC64NVME) as the CRC
of the whole object, which equals the part CRCs combined with each next part's length: no byte
is read again. This is zlib's ``crc32_combine`` (multiplication by x^(8n) modulo the polynomial,
in the reflected bit order), for any of the three reflected CRCs with all-ones init and xorout.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable

from app.domain.errors import S3Error

# Reflected polynomials and widths.
POLYS: dict[str, tuple[int, int]] = {
    "CRC32": (0xEDB88320, 32),
    "CRC32C": (0x82F63B78, 32),
    "CRC64NVME": (0x9A6C9329AC4BC9B5, 64),
}
FULL_OBJECT_ALGORITHMS = frozenset(POLYS)
FULL_OBJECT = "FULL_OBJECT"
COMPOSITE = "COMPOSITE"


def checksum_type(algorithm: str | None, requested: str | None) -> str | None:
    """CreateMultipartUpload's ``x-amz-checksum-type`` as S3 rules it: only with an algorithm;
    FULL_OBJECT only for the CRCs, COMPOSITE not for CRC64NVME; the default is FULL_OBJECT for
    CRC64NVME and COMPOSITE for the others."""
    kind = requested.strip().upper() if requested and requested.strip() else None
    if algorithm is None:
        if kind is not None:
            raise S3Error("InvalidRequest", "The x-amz-checksum-type header can only be used with the "
                          "x-amz-checksum-algorithm header.")
        return None
    algorithm = algorithm.upper()
    if kind is None:
        return FULL_OBJECT if algorithm == "CRC64NVME" else COMPOSITE
    if kind not in (FULL_OBJECT, COMPOSITE):
        raise S3Error("InvalidRequest", f"Value for x-amz-checksum-type header is invalid: {requested}")
    if kind == FULL_OBJECT and algorithm not in FULL_OBJECT_ALGORITHMS:
        raise S3Error("InvalidRequest", f"The FULL_OBJECT checksum type cannot be used with the "
                      f"{algorithm.lower()} checksum algorithm.")
    if kind == COMPOSITE and algorithm == "CRC64NVME":
        raise S3Error("InvalidRequest", "The COMPOSITE checksum type cannot be used with the crc64nvme "
                      "checksum algorithm.")
    return kind


def type_of(value: str) -> str:
    """A stored multipart checksum's type: COMPOSITE values end in ``-<parts>``."""
    return COMPOSITE if "-" in value else FULL_OBJECT


def _multmodp(a: int, b: int, poly: int, width: int) -> int:
    """a * b modulo the polynomial (reflected: the top bit is x^0)."""
    m = 1 << (width - 1)
    p = 0
    while True:
        if a & m:
            p ^= b
            if (a & (m - 1)) == 0:
                break
        m >>= 1
        b = (b >> 1) ^ poly if b & 1 else b >> 1
    return p


def _x8nmodp(n: int, poly: int, width: int) -> int:
    """x^(8n) modulo the polynomial."""
    p = 1 << (width - 1)  # x^0
    power = _multmodp(1 << (width - 2), 1 << (width - 2), poly, width)  # x^2
    power = _multmodp(power, power, poly, width)  # x^4
    power = _multmodp(power, power, poly, width)  # x^8: one byte
    while n:
        if n & 1:
            p = _multmodp(power, p, poly, width)
        n >>= 1
        power = _multmodp(power, power, poly, width)
    return p


def combine(algorithm: str, crc1: int, crc2: int, len2: int) -> int:
    """The CRC of A+B from crc(A), crc(B) and len(B)."""
    poly, width = POLYS[algorithm]
    return _multmodp(_x8nmodp(len2, poly, width), crc1, poly, width) ^ crc2


def full_object(algorithm: str, parts: Iterable[tuple[str, int]]) -> str:
    """The base64 CRC of the whole object from its parts' (base64 CRC, size), in order."""
    width = POLYS[algorithm][1] // 8
    total: int | None = None
    for value, size in parts:
        crc = int.from_bytes(base64.b64decode(value), "big")
        total = crc if total is None else combine(algorithm, total, crc, size)
    return base64.b64encode((total or 0).to_bytes(width, "big")).decode("ascii")
