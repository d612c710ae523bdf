"""FULL_OBJECT multipart checksums: the part CRCs combined equal the CRC of the whole object
(checked against the streaming digests the gateway computes), and ChecksumType's rules."""

from __future__ import annotations

import os

import pytest

from app.domain.checksums import new_checksum
from app.domain.crc_combine import checksum_type, full_object
from app.domain.errors import S3Error


def b64(alg: str, data: bytes) -> str:
    c = new_checksum(alg)
    c.update(data)
    return c.b64digest()


@pytest.mark.parametrize("algorithm", ["CRC32", "CRC32C", "CRC64NVME"])
def test_combined_part_crcs_are_the_whole_objects_crc(algorithm: str) -> None:
    for sizes in ([1], [0, 5], [5 * 1024 * 1024 + 3, 17, 1, 1000], [64 * 1024] * 7):
        parts = [os.urandom(n) for n in sizes]
        assert full_object(algorithm, [(b64(algorithm, p), len(p)) for p in parts]) == b64(algorithm, b"".join(parts))


def test_checksum_type_rules() -> None:
    assert checksum_type(None, None) is None
    assert checksum_type("CRC64NVME", None) == "FULL_OBJECT"
    assert checksum_type("CRC32", None) == checksum_type("SHA256", "composite") == "COMPOSITE"
    assert checksum_type("CRC32C", "FULL_OBJECT") == "FULL_OBJECT"
    for algorithm, kind in ((None, "FULL_OBJECT"), ("SHA1", "FULL_OBJECT"), ("CRC64NVME", "COMPOSITE"),
                            ("CRC32", "WHOLE")):
        with pytest.raises(S3Error) as err:
            checksum_type(algorithm, kind)
        assert err.value.code == "InvalidRequest"
