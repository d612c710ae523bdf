"""Streaming body digests: Content-MD5 plus the S3 flexible checksums.

A PUT body is read once, in large buffers, and every digest the request asks for is fed from
that single pass; nothing here ever sees the whole body. Digests are rendered exactly as S3
puts them in ``x-amz-checksum-<alg>`` headers: base64 of the big-endian value.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import zlib
from collections.abc import Iterable, Mapping
from typing import Protocol

from awscrt import checksums as _crt

from app.domain.errors import S3Error

ALGORITHMS: tuple[str, ...] = ("CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256")

# Raw digest length per algorithm. A value that is not base64 at all is malformed (InvalidRequest);
# one that decodes to another length is a digest that cannot match, BadDigest, as S3 answers (the
# conformance suite's SHA256 of 64 bytes).
DIGEST_SIZES: dict[str, int] = {"CRC32": 4, "CRC32C": 4, "CRC64NVME": 8, "SHA1": 20, "SHA256": 32}

_MD5_SIZE = 16


class Checksum(Protocol):
    """What every streaming digest offers; callers never care which algorithm is behind it."""

    algorithm: str

    def update(self, data: bytes | bytearray | memoryview) -> None: ...

    def digest(self) -> bytes: ...

    def b64digest(self) -> str: ...


class _Crc32:
    """CRC32 (IEEE) via zlib, which releases the GIL and is fast on 1 MiB buffers."""

    algorithm = "CRC32"
    __slots__ = ("_value",)

    def __init__(self) -> None:
        self._value = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        self._value = zlib.crc32(data, self._value)

    def digest(self) -> bytes:
        return (self._value & 0xFFFFFFFF).to_bytes(4, "big")

    def b64digest(self) -> str:
        return base64.b64encode(self.digest()).decode("ascii")


class _Crc32c:
    """CRC32C (Castagnoli) via awscrt's hardware-accelerated implementation."""

    algorithm = "CRC32C"
    __slots__ = ("_value",)

    def __init__(self) -> None:
        self._value = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        self._value = _crt.crc32c(data, self._value)

    def digest(self) -> bytes:
        return (self._value & 0xFFFFFFFF).to_bytes(4, "big")

    def b64digest(self) -> str:
        return base64.b64encode(self.digest()).decode("ascii")


class _Crc64Nvme:
    """CRC64/NVME via awscrt; S3's default full-object checksum for new uploads."""

    algorithm = "CRC64NVME"
    __slots__ = ("_value",)

    def __init__(self) -> None:
        self._value = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        self._value = _crt.crc64nvme(data, self._value)

    def digest(self) -> bytes:
        return (self._value & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big")

    def b64digest(self) -> str:
        return base64.b64encode(self.digest()).decode("ascii")


class _Hash:
    """SHA-1 / SHA-256 through hashlib (OpenSSL), wrapped to the common interface."""

    __slots__ = ("_hash", "algorithm")

    def __init__(self, algorithm: str, name: str) -> None:
        self.algorithm = algorithm
        self._hash = hashlib.new(name)

    def update(self, data: bytes | bytearray | memoryview) -> None:
        self._hash.update(data)

    def digest(self) -> bytes:
        return self._hash.digest()

    def b64digest(self) -> str:
        return base64.b64encode(self._hash.digest()).decode("ascii")


def new_checksum(algorithm: str) -> Checksum:
    """A fresh streaming digest for ``algorithm`` (any case); unknown names are a client error."""
    name = algorithm.upper()
    if name == "CRC32":
        return _Crc32()
    if name == "CRC32C":
        return _Crc32c()
    if name == "CRC64NVME":
        return _Crc64Nvme()
    if name == "SHA1":
        return _Hash("SHA1", "sha1")
    if name == "SHA256":
        return _Hash("SHA256", "sha256")
    raise S3Error("InvalidRequest", f"Checksum algorithm {algorithm!r} is not supported.")


class BodyDigests:
    """MD5 (for the ETag) plus any requested checksums, all computed in one pass over the body."""

    __slots__ = ("_checksums", "_md5", "size")

    def __init__(self, algorithms: Iterable[str] = ()) -> None:
        self._md5 = hashlib.md5(usedforsecurity=False)
        self._checksums: dict[str, Checksum] = {}
        for algorithm in algorithms:
            checksum = new_checksum(algorithm)
            self._checksums.setdefault(checksum.algorithm, checksum)
        self.size = 0

    @property
    def algorithms(self) -> tuple[str, ...]:
        """Upper-case names of the checksums being computed (MD5 is implicit)."""
        return tuple(self._checksums)

    def update(self, data: bytes | bytearray | memoryview) -> None:
        """Feed the next piece of the decoded body to every digest."""
        self._md5.update(data)
        for checksum in self._checksums.values():
            checksum.update(data)
        self.size += data.nbytes if isinstance(data, memoryview) else len(data)

    def md5_digest(self) -> bytes:
        return self._md5.digest()

    def md5_hex(self) -> str:
        return self._md5.hexdigest()

    def md5_b64(self) -> str:
        return base64.b64encode(self._md5.digest()).decode("ascii")

    def checksums(self) -> dict[str, str]:
        """Algorithm (upper case) -> base64 digest, as S3 returns them in headers."""
        return {name: checksum.b64digest() for name, checksum in self._checksums.items()}


def checksum_header_algorithms(headers: Mapping[str, str]) -> dict[str, str]:
    """The ``x-amz-checksum-<alg>`` values a request carries, keyed by upper-case algorithm.

    Only the five digest algorithms count: ``x-amz-checksum-type``, ``-algorithm``, ``-mode`` and
    algorithms we do not implement are not checksum values and are left to the caller.
    """
    found: dict[str, str] = {}
    for algorithm in ALGORITHMS:
        value = headers.get("x-amz-checksum-" + algorithm.lower())
        if value is not None:
            found[algorithm] = value
    return found


def _strict_b64decode(value: str) -> bytes | None:
    """Decode canonical base64 or return None; lenient decoders would accept junk as a digest."""
    try:
        return binascii.a2b_base64(value.encode("ascii"), strict_mode=True)
    except (UnicodeEncodeError, binascii.Error, ValueError):
        return None


def verify_expected(digests: BodyDigests, content_md5: str | None, expected: dict[str, str]) -> None:
    """Check the computed digests against what the client declared, S3's error codes included.

    Every declared value is validated for form first (InvalidDigest / InvalidRequest), then
    compared (BadDigest), so a malformed header is reported as such even if another mismatches.
    A checksum value of the wrong length is well-formed base64 that cannot match: BadDigest.
    """
    md5_expected: bytes | None = None
    if content_md5 is not None:
        md5_expected = _strict_b64decode(content_md5.strip())
        if md5_expected is None or len(md5_expected) != _MD5_SIZE:
            raise S3Error("InvalidDigest", "The Content-MD5 you specified was invalid.")

    decoded: dict[str, bytes] = {}
    for algorithm, value in expected.items():
        name = algorithm.upper()
        raw = _strict_b64decode(value.strip()) if name in DIGEST_SIZES else None
        if raw is None or not raw:
            header = f"x-amz-checksum-{algorithm.lower()}"
            raise S3Error("InvalidRequest", f"Value for {header} header is invalid.")
        decoded[name] = raw

    if md5_expected is not None and md5_expected != digests.md5_digest():
        raise S3Error("BadDigest", "The Content-MD5 you specified did not match what we received.")

    computed = digests.checksums()
    for name, raw in decoded.items():
        if name not in computed:
            raise ValueError(f"BodyDigests is not computing {name}; pass the expected algorithms to it")
        if base64.b64decode(computed[name]) != raw:
            raise S3Error("BadDigest", f"The {name} you specified did not match the calculated checksum.")


def whole_object_checksum(stored: Mapping[str, str]) -> tuple[str, str] | None:
    """The (algorithm, value) to verify a whole object's bytes against, from the checksums the
    remote stored; None when there is none of the whole object (a multipart upload's composite
    checksum, ``<b64>-<parts>``, covers its parts' digests, not the bytes). ALGORITHMS lists the
    CRCs first: they cost a fraction of a hash."""
    for algorithm in ALGORITHMS:
        value = stored.get(algorithm)
        if value and "-" not in value:
            return algorithm, value
    return None
