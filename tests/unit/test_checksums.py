"""Streaming digests must match S3's (and botocore's) byte-for-byte, however the body is split."""

from __future__ import annotations

import base64
import hashlib
import itertools
import zlib

import pytest
from botocore import httpchecksum
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.checksums import (
    ALGORITHMS,
    DIGEST_SIZES,
    BodyDigests,
    checksum_header_algorithms,
    new_checksum,
    verify_expected,
)
from app.domain.errors import S3Error

# botocore's own implementations (CRT-backed where available): what boto3 puts in trailers.
BOTOCORE = {
    "CRC32": httpchecksum.CrtCrc32Checksum,
    "CRC32C": httpchecksum.CrtCrc32cChecksum,
    "CRC64NVME": httpchecksum.CrtCrc64NvmeChecksum,
    "SHA1": httpchecksum.Sha1Checksum,
    "SHA256": httpchecksum.Sha256Checksum,
}


def b64(value: int, size: int) -> str:
    return base64.b64encode(value.to_bytes(size, "big")).decode()


def one_shot(algorithm: str, data: bytes) -> str:
    checksum = new_checksum(algorithm)
    checksum.update(data)
    return checksum.b64digest()


def botocore_digest(algorithm: str, data: bytes) -> str:
    checksum = BOTOCORE[algorithm]()
    checksum.update(data)
    return checksum.b64digest()


# -- known vectors ---------------------------------------------------------------------------

# The CRC catalogue "check" values (input "123456789") pin the exact polynomial/reflection.
CHECK_VALUES = {
    "CRC32": b64(0xCBF43926, 4),
    "CRC32C": b64(0xE3069283, 4),
    "CRC64NVME": b64(0xAE8B14860A799888, 8),
    "SHA1": base64.b64encode(hashlib.sha1(b"123456789").digest()).decode(),
    "SHA256": base64.b64encode(hashlib.sha256(b"123456789").digest()).decode(),
}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_crc_catalogue_check_values(algorithm: str) -> None:
    assert one_shot(algorithm, b"123456789") == CHECK_VALUES[algorithm]


def test_hello_world_vectors() -> None:
    assert one_shot("CRC32", b"hello world") == "DUoRhQ=="  # 0x0d4a1185
    assert one_shot("CRC32C", b"hello world") == "yZRlqg=="  # 0xc99465aa
    assert one_shot("SHA1", b"hello world") == "Kq5sNclPz7QV2+lfQIuc6R7oRu0="
    assert one_shot("SHA256", b"hello world") == "uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek="


def test_aws_documentation_crc32c_vector() -> None:
    """The trailer in AWS's chunked-upload example: CRC32C of 66560 'a' bytes."""
    assert one_shot("CRC32C", b"a" * 66560) == "sOO8/Q=="


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_empty_input(algorithm: str) -> None:
    digest = base64.b64decode(one_shot(algorithm, b""))
    assert len(digest) == DIGEST_SIZES[algorithm]
    assert one_shot(algorithm, b"") == botocore_digest(algorithm, b"")
    if algorithm.startswith("CRC"):
        assert digest == bytes(DIGEST_SIZES[algorithm])


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_digest_size_matches_table(algorithm: str) -> None:
    checksum = new_checksum(algorithm)
    checksum.update(b"x")
    assert len(checksum.digest()) == DIGEST_SIZES[algorithm]
    assert base64.b64decode(checksum.b64digest()) == checksum.digest()
    assert checksum.algorithm == algorithm


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_matches_botocore_on_large_input(algorithm: str) -> None:
    data = bytes(range(256)) * 12289  # ~3 MiB, not a multiple of the 1 MiB buffers
    checksum = new_checksum(algorithm)
    view = memoryview(data)
    for start in range(0, len(data), 1 << 20):
        checksum.update(view[start : start + (1 << 20)])
    assert checksum.b64digest() == botocore_digest(algorithm, data)


@settings(max_examples=200, deadline=None)
@given(
    algorithm=st.sampled_from(ALGORITHMS),
    data=st.binary(max_size=4096),
    cuts=st.lists(st.integers(min_value=0, max_value=4096), max_size=8),
)
def test_streaming_equals_one_shot_and_botocore(algorithm: str, data: bytes, cuts: list[int]) -> None:
    bounds = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    checksum = new_checksum(algorithm)
    for start, end in itertools.pairwise(bounds):
        checksum.update(memoryview(data)[start:end] if start % 2 else data[start:end])
    assert checksum.b64digest() == one_shot(algorithm, data) == botocore_digest(algorithm, data)


def test_crc32_uses_ieee_polynomial_like_zlib() -> None:
    data = b"The quick brown fox jumps over the lazy dog"
    assert one_shot("CRC32", data) == b64(zlib.crc32(data), 4)


# -- new_checksum ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["crc32", "Crc32C", "crc64nvme", "sha1", "Sha256"])
def test_new_checksum_is_case_insensitive(name: str) -> None:
    assert new_checksum(name).algorithm == name.upper()


@pytest.mark.parametrize("name", ["MD5", "CRC64", "SHA512", "XXHASH64", "", "crc 32"])
def test_new_checksum_rejects_unknown(name: str) -> None:
    with pytest.raises(S3Error) as info:
        new_checksum(name)
    assert info.value.code == "InvalidRequest"


# -- BodyDigests -----------------------------------------------------------------------------


def test_body_digests_one_pass() -> None:
    data = b"hello world" * 1000
    digests = BodyDigests(["crc32", "SHA256", "CRC32"])  # duplicates collapse
    for start in range(0, len(data), 777):
        digests.update(memoryview(data)[start : start + 777])
    assert digests.size == len(data)
    assert digests.md5_hex() == hashlib.md5(data).hexdigest()
    assert digests.md5_b64() == base64.b64encode(hashlib.md5(data).digest()).decode()
    assert digests.checksums() == {"CRC32": one_shot("CRC32", data), "SHA256": one_shot("SHA256", data)}
    assert digests.algorithms == ("CRC32", "SHA256")


def test_body_digests_defaults_to_md5_only() -> None:
    digests = BodyDigests()
    digests.update(b"")
    assert digests.checksums() == {}
    assert digests.size == 0
    assert digests.md5_hex() == "d41d8cd98f00b204e9800998ecf8427e"


def test_body_digests_size_counts_bytes_of_any_buffer() -> None:
    digests = BodyDigests(ALGORITHMS)
    digests.update(bytearray(b"abc"))
    digests.update(memoryview(b"defg"))
    assert digests.size == 7
    assert digests.checksums() == {alg: one_shot(alg, b"abcdefg") for alg in ALGORITHMS}


def test_body_digests_rejects_unknown_algorithm() -> None:
    with pytest.raises(S3Error) as info:
        BodyDigests(["CRC16"])
    assert info.value.code == "InvalidRequest"


# -- checksum_header_algorithms --------------------------------------------------------------


def test_checksum_header_algorithms_picks_only_digest_headers() -> None:
    headers = {
        "x-amz-checksum-crc32": "DUoRhQ==",
        "x-amz-checksum-sha256": "abc",
        "x-amz-checksum-type": "FULL_OBJECT",
        "x-amz-checksum-algorithm": "CRC32",
        "x-amz-checksum-mode": "ENABLED",
        "x-amz-checksum-xxhash64": "AAAAAAAAAAA=",
        "x-amz-sdk-checksum-algorithm": "CRC32",
        "content-md5": "1B2M2Y8AsgTpgAmY7PhCfg==",
    }
    assert checksum_header_algorithms(headers) == {"CRC32": "DUoRhQ==", "SHA256": "abc"}
    assert checksum_header_algorithms({}) == {}


# -- verify_expected -------------------------------------------------------------------------


def digests_of(data: bytes, *algorithms: str) -> BodyDigests:
    digests = BodyDigests(algorithms)
    digests.update(data)
    return digests


def md5_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def test_verify_expected_accepts_matching_values() -> None:
    data = b"hello world"
    expected = {alg: one_shot(alg, data) for alg in ALGORITHMS}
    verify_expected(digests_of(data, *ALGORITHMS), md5_b64(data), expected)
    verify_expected(digests_of(data), None, {})
    verify_expected(digests_of(data, "crc32"), None, {"crc32": "DUoRhQ=="})  # lower-case key


@pytest.mark.parametrize(
    "content_md5",
    [
        "",
        "not base64!",
        "AAAA",
        base64.b64encode(b"x" * 15).decode(),
        base64.b64encode(b"x" * 17).decode(),
        "é",
    ],
)
def test_verify_expected_invalid_content_md5(content_md5: str) -> None:
    with pytest.raises(S3Error) as info:
        verify_expected(digests_of(b"data"), content_md5, {})
    assert info.value.code == "InvalidDigest"


def test_verify_expected_md5_mismatch() -> None:
    with pytest.raises(S3Error) as info:
        verify_expected(digests_of(b"data"), md5_b64(b"other"), {})
    assert info.value.code == "BadDigest"
    assert info.value.status == 400


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_verify_expected_checksum_mismatch(algorithm: str) -> None:
    wrong = one_shot(algorithm, b"other")
    with pytest.raises(S3Error) as info:
        verify_expected(digests_of(b"data", algorithm), md5_b64(b"data"), {algorithm: wrong})
    assert info.value.code == "BadDigest"
    assert info.value.message == f"The {algorithm} you specified did not match the calculated checksum."


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("kind", ["garbage", "empty"])
def test_verify_expected_malformed_checksum(algorithm: str, kind: str) -> None:
    value = {"garbage": "!!!!", "empty": ""}[kind]
    with pytest.raises(S3Error) as info:
        verify_expected(digests_of(b"data", algorithm), None, {algorithm: value})
    assert info.value.code == "InvalidRequest"
    assert info.value.message == f"Value for x-amz-checksum-{algorithm.lower()} header is invalid."


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("kind", ["short", "long", "hex-as-base64"])
def test_verify_expected_wrong_length_is_bad_digest(algorithm: str, kind: str) -> None:
    """Issue 25: S3 answers BadDigest for base64 of the wrong length (the conformance suite sends
    the base64 of a hex SHA256, 64 bytes); InvalidRequest is for values that are not base64."""
    size = DIGEST_SIZES[algorithm]
    raw = {"short": bytes(size - 1), "long": bytes(size + 1),
           "hex-as-base64": hashlib.sha256(b"data").hexdigest().encode()}[kind]
    with pytest.raises(S3Error) as info:
        verify_expected(digests_of(b"data", algorithm), None, {algorithm: base64.b64encode(raw).decode()})
    assert info.value.code == "BadDigest"
    assert info.value.message == f"The {algorithm} you specified did not match the calculated checksum."


def test_verify_expected_reports_malformed_before_mismatch() -> None:
    """A malformed header is an InvalidRequest even when another value mismatches first."""
    digests = digests_of(b"data", "CRC32", "SHA256")
    with pytest.raises(S3Error) as info:
        verify_expected(digests, md5_b64(b"other"), {"CRC32": "AAAAAA==", "SHA256": "!!!!"})
    assert info.value.code == "InvalidRequest"


def test_verify_expected_requires_the_algorithm_to_be_computed() -> None:
    with pytest.raises(ValueError):
        verify_expected(digests_of(b"data"), None, {"CRC32": "AAAAAA=="})


def test_whole_object_checksum_prefers_the_cheapest_and_skips_composites() -> None:
    from app.domain.checksums import whole_object_checksum

    assert whole_object_checksum({}) is None
    assert whole_object_checksum({"SHA256": "abc=", "CRC32C": "def="}) == ("CRC32C", "def=")
    assert whole_object_checksum({"CRC32": "AAAAAA==-3"}) is None  # a multipart upload's composite
    assert whole_object_checksum({"CRC32": "AAAAAA==-3", "SHA1": "x="}) == ("SHA1", "x=")
