"""The on-disk format of a cached block: a fixed 64-byte header, then the block's bytes.

The header names the block (the raw bytes of its name, a hash of bucket, key, ETag, block size
and index), its index, its length and a CRC-32 of its bytes, behind a magic and a format
version. A block whose header does not parse, names another block, has another length or
version is treated as absent (refetched), never served; the checksum is checked by the scrub
(a bounded background pass), so a hit stays a ``sendfile`` from ``DATA_OFFSET``. Files of an
older data directory have no header and so are absent too.

Layout (little-endian): magic ``FRYB`` (4), version u16, header length u16, index u64,
length u64, crc32 u32, reserved u32 (0), identity 32 bytes.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

MAGIC = b"FRYB"
VERSION = 1
HEADER = struct.Struct("<4sHHQQII32s")
DATA_OFFSET = HEADER.size  # 64
assert DATA_OFFSET == 64


@dataclass(frozen=True)
class BlockHeader:
    name: str  # the block's 64-hex name (its identity)
    index: int
    length: int
    crc32: int
    version: int = VERSION

    def pack(self) -> bytes:
        return HEADER.pack(MAGIC, self.version, DATA_OFFSET, self.index, self.length, self.crc32, 0,
                           bytes.fromhex(self.name))


def parse(raw: bytes) -> BlockHeader | None:
    """The header in ``raw``, or None when it is not one of this format's version."""
    if len(raw) < DATA_OFFSET:
        return None
    magic, version, size, index, length, crc, reserved, ident = HEADER.unpack(raw[:DATA_OFFSET])
    if magic != MAGIC or version != VERSION or size != DATA_OFFSET or reserved != 0:
        return None
    return BlockHeader(ident.hex(), index, length, crc, version)


def crc32(data: bytes | memoryview, value: int = 0) -> int:
    """The running checksum of a block's bytes (zlib's CRC-32: in the standard library, fast)."""
    return zlib.crc32(data, value)
