"""aws-chunked decoding: real client output, AWS's published vectors, and adversarial streams.

The signed-mode encoder below is written from the AWS documentation, independently of the
decoder, and is itself pinned by the documentation's example signatures.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import zlib
from collections.abc import Iterable, Sequence

import boto3
import pytest
from botocore import httpchecksum
from botocore.config import Config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.domain.checksums import BodyDigests
from app.domain.errors import S3Error
from app.s3.chunked import (
    MAX_CHUNK_HEADER,
    STREAMING_SIGNED,
    STREAMING_SIGNED_TRAILER,
    STREAMING_UNSIGNED_TRAILER,
    AwsChunkedDecoder,
    ChunkSigningContext,
    is_streaming,
)

SIGNED = STREAMING_SIGNED
SIGNED_TRAILER = STREAMING_SIGNED_TRAILER
UNSIGNED_TRAILER = STREAMING_UNSIGNED_TRAILER
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- test-only encoder, straight from the AWS documentation -----------------------------------


def _hmac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode(), hashlib.sha256).digest()


def signing_key(secret: str, date: str, region: str, service: str = "s3") -> bytes:
    return _hmac(_hmac(_hmac(_hmac(("AWS4" + secret).encode(), date), region), service), "aws4_request")


DOC_KEY = signing_key("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "20130524", "us-east-1")
DOC_DATE = "20130524T000000Z"
DOC_SCOPE = "20130524/us-east-1/s3/aws4_request"
DOC_SEED = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"  # sigv4-streaming
DOC_TRAILER_SEED = "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e"  # -trailers page
CTX = ChunkSigningContext(DOC_KEY, DOC_DATE, DOC_SCOPE, DOC_SEED)


def chunk_signature(ctx: ChunkSigningContext, previous: str, data: bytes) -> str:
    string_to_sign = "\n".join(
        [
            "AWS4-HMAC-SHA256-PAYLOAD",
            ctx.amz_date,
            ctx.scope,
            previous,
            EMPTY_SHA256,
            hashlib.sha256(data).hexdigest(),
        ]
    )
    return hmac.new(ctx.signing_key, string_to_sign.encode(), hashlib.sha256).hexdigest()


def trailer_signature(ctx: ChunkSigningContext, previous: str, trailers: dict[str, str]) -> str:
    canonical = "".join(f"{name}:{value}\n" for name, value in sorted(trailers.items()))
    string_to_sign = "\n".join(
        [
            "AWS4-HMAC-SHA256-TRAILER",
            ctx.amz_date,
            ctx.scope,
            previous,
            hashlib.sha256(canonical.encode()).hexdigest(),
        ]
    )
    return hmac.new(ctx.signing_key, string_to_sign.encode(), hashlib.sha256).hexdigest()


def split(payload: bytes, sizes: Iterable[int]) -> list[bytes]:
    """Cut payload into chunks of the given sizes (cycled), the last one taking the rest."""
    sizes = [s for s in sizes if s > 0] or [len(payload) or 1]
    chunks, pos, i = [], 0, 0
    while pos < len(payload):
        chunks.append(payload[pos : pos + sizes[i % len(sizes)]])
        pos += len(chunks[-1])
        i += 1
    return chunks


def encode(
    mode: str,
    chunks: Sequence[bytes],
    trailers: dict[str, str] | None = None,
    ctx: ChunkSigningContext = CTX,
    doc_layout: bool = False,
) -> bytes:
    """aws-chunked wire bytes for ``mode``; ``doc_layout`` adds the blank line AWS's example has."""
    out = bytearray()
    previous = ctx.seed_signature
    for data in [*chunks, b""]:
        if mode == UNSIGNED_TRAILER:
            out += b"%x\r\n" % len(data)
        else:
            previous = chunk_signature(ctx, previous, data)
            out += b"%x;chunk-signature=%s\r\n" % (len(data), previous.encode())
        if data:
            out += data + b"\r\n"
    if mode == SIGNED:
        return bytes(out + b"\r\n")
    if doc_layout:
        out += b"\r\n"
    trailers = trailers or {}
    for name, value in sorted(trailers.items()):
        out += f"{name}:{value}\r\n".encode()
    if mode == SIGNED_TRAILER:
        out += f"x-amz-trailer-signature:{trailer_signature(ctx, previous, trailers)}\r\n".encode()
    return bytes(out + b"\r\n")


def crc32_b64(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def decode(
    mode: str,
    wire: bytes,
    pieces: Iterable[int] | None = None,
    ctx: ChunkSigningContext | None = CTX,
    expected_length: int | None = None,
    **kwargs: int,
) -> tuple[bytes, dict[str, str]]:
    """Feed ``wire`` (split at the ``pieces`` sizes, cycled) and return (payload, trailers)."""
    decoder = AwsChunkedDecoder(mode, ctx if mode != UNSIGNED_TRAILER else None, **kwargs)
    out = bytearray()
    for part in split(wire, pieces or [len(wire) or 1]):
        for piece in decoder.feed(part):
            # bytes in, so the pieces may be views of it (no copy); never of anything mutable
            assert isinstance(piece, bytes) or (isinstance(piece, memoryview) and isinstance(piece.obj, bytes))
            out += piece
        assert decoder.decoded_length == len(out)
    trailers = decoder.close(expected_length)
    return bytes(out), trailers


def error_code(mode: str, wire: bytes, **kwargs: object) -> str:
    with pytest.raises(S3Error) as info:
        decode(mode, wire, **kwargs)  # type: ignore[arg-type]
    return info.value.code


# -- AWS documentation vectors ---------------------------------------------------------------

DOC_CHUNK_SIGNATURES = [
    "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
    "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
    "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
]
DOC_TRAILER_CHUNK_SIGNATURES = [
    "b474d8862b1487a5145d686f57f013e54db672cee1c953b3010fb58501ef5aa2",
    "1c1344b170168f8e65b41376b44b20fe354e373826ccbbe2c1d40a8cae51e5c7",
    "2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992",
]
DOC_TRAILER_SIGNATURE = "d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435"


def doc_wire(signatures: list[str]) -> bytes:
    return (
        f"10000;chunk-signature={signatures[0]}\r\n".encode()
        + b"a" * 65536
        + f"\r\n400;chunk-signature={signatures[1]}\r\n".encode()
        + b"a" * 1024
        + f"\r\n0;chunk-signature={signatures[2]}\r\n".encode()
    )


def test_doc_example_put_object_in_chunks() -> None:
    """AWS example 'PUT Object' of 'Transferring Payload in Multiple Chunks' (66560 bytes of 'a')."""
    wire = doc_wire(DOC_CHUNK_SIGNATURES) + b"\r\n"
    payload, trailers = decode(SIGNED, wire, expected_length=66560)
    assert payload == b"a" * 66560
    assert trailers == {}
    assert encode(SIGNED, [b"a" * 65536, b"a" * 1024]) == wire  # pins the test encoder too


DOC_TRAILER_CTX = ChunkSigningContext(DOC_KEY, DOC_DATE, DOC_SCOPE, DOC_TRAILER_SEED)
DOC_TRAILERS = (
    b"x-amz-checksum-crc32c:sOO8/Q==\r\n"
    + f"x-amz-trailer-signature:{DOC_TRAILER_SIGNATURE}\r\n\r\n".encode()
)


@pytest.mark.parametrize("blank", [b"", b"\r\n"], ids=["sdk-layout", "doc-layout"])
def test_doc_example_put_object_with_trailer(blank: bytes) -> None:
    """'Including Trailing Headers' example; accepted with and without the blank line its text shows."""
    wire = doc_wire(DOC_TRAILER_CHUNK_SIGNATURES) + blank + DOC_TRAILERS
    payload, trailers = decode(SIGNED_TRAILER, wire, ctx=DOC_TRAILER_CTX, expected_length=66560)
    assert payload == b"a" * 66560
    assert trailers == {"x-amz-checksum-crc32c": "sOO8/Q=="}
    expected = encode(
        SIGNED_TRAILER, [b"a" * 65536, b"a" * 1024], {"x-amz-checksum-crc32c": "sOO8/Q=="}, DOC_TRAILER_CTX
    )
    assert expected == doc_wire(DOC_TRAILER_CHUNK_SIGNATURES) + DOC_TRAILERS


def test_doc_example_byte_at_a_time() -> None:
    wire = doc_wire(DOC_CHUNK_SIGNATURES) + b"\r\n"
    decoder = AwsChunkedDecoder(SIGNED, CTX)
    out = bytearray()
    for i in range(len(wire)):
        for piece in decoder.feed(wire[i : i + 1]):
            out += piece
    assert decoder.close(66560) == {}
    assert out == b"a" * 66560


def test_doc_example_wrong_seed_is_rejected_at_first_chunk() -> None:
    ctx = ChunkSigningContext(DOC_KEY, DOC_DATE, DOC_SCOPE, DOC_TRAILER_SEED)
    decoder = AwsChunkedDecoder(SIGNED, ctx)
    wire = doc_wire(DOC_CHUNK_SIGNATURES)
    with pytest.raises(S3Error) as info:
        decoder.feed(wire[: wire.index(b"\r\n") + 2 + 65536])  # exactly the first chunk's header and data
    assert info.value.code == "SignatureDoesNotMatch"
    assert info.value.status == 403


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("signing_key", signing_key("wrong", "20130524", "us-east-1")),
        ("amz_date", "20130524T000001Z"),
        ("scope", "20130524/us-west-2/s3/aws4_request"),
    ],
)
def test_doc_example_wrong_context_is_rejected(field: str, value: object) -> None:
    ctx = ChunkSigningContext(**{**CTX.__dict__, field: value})
    assert error_code(SIGNED, doc_wire(DOC_CHUNK_SIGNATURES) + b"\r\n", ctx=ctx) == "SignatureDoesNotMatch"


def test_doc_trailer_with_tampered_trailer_value() -> None:
    wire = doc_wire(DOC_TRAILER_CHUNK_SIGNATURES) + DOC_TRAILERS.replace(b"sOO8", b"sOO9")
    assert error_code(SIGNED_TRAILER, wire, ctx=DOC_TRAILER_CTX) == "SignatureDoesNotMatch"


# -- real botocore output ----------------------------------------------------------------------


BOTOCORE_CHECKSUMS = {
    "x-amz-checksum-crc32": httpchecksum.CrtCrc32Checksum,
    "x-amz-checksum-crc32c": httpchecksum.CrtCrc32cChecksum,
    "x-amz-checksum-crc64nvme": httpchecksum.CrtCrc64NvmeChecksum,
    "x-amz-checksum-sha1": httpchecksum.Sha1Checksum,
    "x-amz-checksum-sha256": httpchecksum.Sha256Checksum,
}


def botocore_wire(payload: bytes, name: str = "x-amz-checksum-crc32", chunk_size: int | None = None) -> bytes:
    wrapper = httpchecksum.AwsChunkedWrapper(
        io.BytesIO(payload), checksum_cls=BOTOCORE_CHECKSUMS[name], checksum_name=name, chunk_size=chunk_size
    )
    return b"".join(iter(wrapper))


@pytest.mark.parametrize("name", sorted(BOTOCORE_CHECKSUMS))
@pytest.mark.parametrize("size", [0, 1, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) - 7])
def test_botocore_aws_chunked_wrapper(name: str, size: int) -> None:
    payload = (bytes(range(251)) * (size // 251 + 1))[:size]
    wire = botocore_wire(payload, name)
    payload_out, trailers = decode(
        UNSIGNED_TRAILER, wire, pieces=[65536, 1000, 1 << 20], expected_length=size
    )
    assert payload_out == payload
    algorithm = name.removeprefix("x-amz-checksum-").upper()
    digests = BodyDigests([algorithm])
    digests.update(payload_out)
    assert trailers == {name: digests.checksums()[algorithm]}


def test_botocore_wrapper_without_checksum() -> None:
    wrapper = httpchecksum.AwsChunkedWrapper(io.BytesIO(b"abc" * 1000))
    wire = wrapper.read()
    assert wire.endswith(b"\r\n0\r\n\r\n")
    assert decode(UNSIGNED_TRAILER, wire) == (b"abc" * 1000, {})


@PROPERTY
@given(payload=st.binary(max_size=3000), chunk_size=st.integers(1, 700), pieces=st.lists(st.integers(1, 400)))
def test_botocore_wrapper_any_chunk_size_any_split(
    payload: bytes, chunk_size: int, pieces: list[int]
) -> None:
    wire = botocore_wire(payload, chunk_size=chunk_size)
    out, trailers = decode(UNSIGNED_TRAILER, wire, pieces=pieces, expected_length=len(payload))
    assert out == payload
    assert trailers == {"x-amz-checksum-crc32": crc32_b64(payload)}


class _Captured(Exception):
    pass


@pytest.mark.parametrize("algorithm", [None, "CRC32C", "CRC64NVME", "SHA1", "SHA256"])
def test_boto3_put_object_wire_format(algorithm: str | None) -> None:
    """What boto3 really sends for PutObject (captured just before the socket), decoded."""
    payload = bytes(range(256)) * 9000  # > 2 MiB: several 1 MiB chunks
    captured: dict[str, object] = {}

    def capture(request: object, **_: object) -> None:
        body = request.body  # type: ignore[attr-defined]
        captured["headers"] = {k.lower(): v for k, v in request.headers.items()}  # type: ignore[attr-defined]
        captured["body"] = body.read() if hasattr(body, "read") else body
        raise _Captured

    client = boto3.client(
        "s3",
        endpoint_url="https://localhost:1",
        region_name="us-east-1",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
        config=Config(retries={"max_attempts": 1}, s3={"addressing_style": "path"}),
    )
    client.meta.events.register("before-send.s3.PutObject", capture)
    extra = {"ChecksumAlgorithm": algorithm} if algorithm else {}
    with pytest.raises(_Captured):
        client.put_object(Bucket="bucket", Key="key", Body=io.BytesIO(payload), **extra)

    headers = captured["headers"]
    assert isinstance(headers, dict)
    content_sha256 = headers["x-amz-content-sha256"].decode()
    assert is_streaming(content_sha256)
    assert content_sha256 == UNSIGNED_TRAILER
    assert headers["content-encoding"] == b"aws-chunked"
    body = captured["body"]
    assert isinstance(body, bytes)
    out, trailers = decode(
        content_sha256, body, pieces=[8192], expected_length=int(headers["x-amz-decoded-content-length"])
    )
    assert out == payload
    trailer_name = headers["x-amz-trailer"].decode()
    digests = BodyDigests([trailer_name.removeprefix("x-amz-checksum-")])
    digests.update(out)
    assert trailers == {trailer_name: next(iter(digests.checksums().values()))}


# -- property tests on the signed and unsigned encoders ------------------------------------------

MODES = st.sampled_from([SIGNED, SIGNED_TRAILER, UNSIGNED_TRAILER])
CHUNK_SIZES = st.lists(st.integers(1, 600), min_size=1, max_size=5)
FEED_SIZES = st.lists(st.integers(1, 300), max_size=10)


def trailers_for(mode: str, payload: bytes) -> dict[str, str] | None:
    return None if mode == SIGNED else {"x-amz-checksum-crc32": crc32_b64(payload)}


@PROPERTY
@given(mode=MODES, payload=st.binary(max_size=2500), sizes=CHUNK_SIZES, pieces=FEED_SIZES)
def test_roundtrip_any_payload_any_split(
    mode: str, payload: bytes, sizes: list[int], pieces: list[int]
) -> None:
    trailers = trailers_for(mode, payload)
    wire = encode(mode, split(payload, sizes), trailers)
    out, got = decode(mode, wire, pieces=pieces, expected_length=len(payload))
    assert out == payload
    assert got == (trailers or {})


@PROPERTY
@given(
    mode=st.sampled_from([SIGNED_TRAILER, UNSIGNED_TRAILER]),
    payload=st.binary(max_size=600),
    extra=st.dictionaries(
        st.from_regex(r"x-amz-meta-[a-z]{1,8}", fullmatch=True),
        st.from_regex(r"[!-~]{0,20}", fullmatch=True),
        max_size=3,
    ),
    pieces=FEED_SIZES,
)
def test_roundtrip_several_trailers(
    mode: str, payload: bytes, extra: dict[str, str], pieces: list[int]
) -> None:
    trailers = {"x-amz-checksum-crc32": crc32_b64(payload), **extra}
    out, got = decode(mode, encode(mode, split(payload, [200]), trailers), pieces=pieces)
    assert (out, got) == (payload, trailers)


def _decode_accepting(mode: str, wire: bytes, payload: bytes, trailers: dict[str, str] | None) -> None:
    """Decode a tampered stream: it must fail, or yield exactly the original payload/trailers.

    In unsigned mode the framing alone cannot authenticate payload bytes, so -- as the request
    handler does -- the CRC32 trailer is checked too and a missing trailer counts as failure.
    """
    try:
        out, got = decode(mode, wire, expected_length=len(payload))
        if mode == UNSIGNED_TRAILER and got.get("x-amz-checksum-crc32") != crc32_b64(out):
            raise S3Error("BadDigest")
    except S3Error as exc:
        assert exc.code in {
            "SignatureDoesNotMatch",
            "IncompleteBody",
            "InvalidRequest",
            "MalformedTrailerError",
            "BadDigest",
        }
        return
    assert out == payload
    assert got == (trailers or {})


@PROPERTY
@given(mode=MODES, payload=st.binary(min_size=1, max_size=1500), sizes=CHUNK_SIZES, data=st.data())
def test_single_flipped_byte_is_never_accepted_as_different_data(
    mode: str, payload: bytes, sizes: list[int], data: st.DataObject
) -> None:
    trailers = trailers_for(mode, payload)
    wire = bytearray(encode(mode, split(payload, sizes), trailers))
    index = data.draw(st.integers(0, len(wire) - 1), label="index")
    wire[index] ^= data.draw(st.integers(1, 255), label="mask")
    _decode_accepting(mode, bytes(wire), payload, trailers)


@pytest.mark.parametrize("mode", [SIGNED, SIGNED_TRAILER, UNSIGNED_TRAILER])
def test_every_flipped_bit_in_a_small_stream(mode: str) -> None:
    payload = b"The quick brown fox jumps over the lazy dog" * 3
    trailers = trailers_for(mode, payload)
    wire = encode(mode, split(payload, [50]), trailers)
    for index in range(len(wire)):
        for bit in range(8):
            tampered = bytearray(wire)
            tampered[index] ^= 1 << bit
            _decode_accepting(mode, bytes(tampered), payload, trailers)


@pytest.mark.parametrize(
    ("mode", "doc_layout"),
    [(SIGNED, False), (SIGNED_TRAILER, False), (SIGNED_TRAILER, True), (UNSIGNED_TRAILER, False)],
)
def test_truncation_at_every_position_fails(mode: str, doc_layout: bool) -> None:
    payload = bytes(range(256)) * 4
    wire = encode(mode, split(payload, [300, 1, 200]), trailers_for(mode, payload), doc_layout=doc_layout)
    for cut in range(len(wire)):
        decoder = AwsChunkedDecoder(mode, CTX if mode != UNSIGNED_TRAILER else None)
        out = b"".join(decoder.feed(wire[:cut]))
        assert payload.startswith(out)
        with pytest.raises(S3Error) as info:
            decoder.close()  # no expected length: framing alone must notice
        assert info.value.code in {"IncompleteBody", "MalformedTrailerError"}, cut


def test_blank_line_after_final_chunk() -> None:
    """Only signed trailers may follow a blank line (AWS's example layout): the mandatory trailer
    signature makes that unambiguous. For unsigned trailers a blank line is the end."""
    assert decode(UNSIGNED_TRAILER, b"3\r\nabc\r\n0\r\n\r\n") == (b"abc", {})
    late = b"3\r\nabc\r\n0\r\n\r\nx-amz-checksum-crc32:" + crc32_b64(b"abc").encode() + b"\r\n\r\n"
    assert error_code(UNSIGNED_TRAILER, late) == "InvalidRequest"
    signed = encode(SIGNED_TRAILER, [b"abc"], {}, doc_layout=True)
    head = signed[: signed.index(b"x-amz-trailer-signature")]
    assert head.endswith(b"\r\n\r\n")
    assert error_code(SIGNED_TRAILER, head) == "MalformedTrailerError"
    assert decode(SIGNED_TRAILER, signed) == (b"abc", {})


@PROPERTY
@given(mode=MODES, payload=st.binary(max_size=1500), sizes=CHUNK_SIZES, data=st.data())
def test_random_truncation_never_succeeds(
    mode: str, payload: bytes, sizes: list[int], data: st.DataObject
) -> None:
    wire = encode(mode, split(payload, sizes), trailers_for(mode, payload))
    cut = data.draw(st.integers(0, len(wire) - 1))
    decoder = AwsChunkedDecoder(mode, CTX if mode != UNSIGNED_TRAILER else None)
    out = b"".join(decoder.feed(wire[:cut]))
    assert decoder.decoded_length == len(out)
    assert payload.startswith(out)
    with pytest.raises(S3Error):
        decoder.close(len(payload))


@PROPERTY
@given(
    mode=MODES, payload=st.binary(max_size=1000), sizes=CHUNK_SIZES, junk=st.binary(min_size=1, max_size=20)
)
def test_bytes_after_the_end_are_rejected(mode: str, payload: bytes, sizes: list[int], junk: bytes) -> None:
    wire = encode(mode, split(payload, sizes), trailers_for(mode, payload))
    with pytest.raises(S3Error) as info:
        decode(mode, wire + junk)
    assert info.value.code in {"InvalidRequest", "MalformedTrailerError"}


# -- framing errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wire",
    [
        b"zz\r\nabc\r\n0\r\n\r\n",  # not hex
        b"-3\r\nabc\r\n0\r\n\r\n",  # sign
        b"0x3\r\nabc\r\n0\r\n\r\n",  # prefix
        b" 3\r\nabc\r\n0\r\n\r\n",  # whitespace
        b"\r\nabc\r\n0\r\n\r\n",  # empty size
        b"11111111111111111\r\n",  # 17 hex digits
        b"3\nabc\r\n0\r\n\r\n",  # bare LF after size
        b"3\r\nabc\n0\r\n\r\n",  # bare LF after data
        b"3\r\nabcd\r\n0\r\n\r\n",  # data longer than announced
        b"3\r\nab\r\n0\r\n\r\n",  # data shorter than announced
        b"3;\r\nabc\r\n0\r\n\r\n",  # empty extension
        b"3;a b\r\nabc\r\n0\r\n\r\n",  # junk extension
    ],
)
def test_malformed_framing(wire: bytes) -> None:
    assert error_code(UNSIGNED_TRAILER, wire) == "InvalidRequest"


def test_chunk_extensions_and_upper_case_hex_are_accepted() -> None:
    wire = b'A;foo=bar;baz;q="x y"\r\n0123456789\r\n0;chunk-signature=' + b"0" * 64 + b"\r\n\r\n"
    assert decode(UNSIGNED_TRAILER, wire) == (b"0123456789", {})


def test_signed_chunk_needs_a_signature() -> None:
    assert error_code(SIGNED, b"3\r\nabc\r\n0\r\n\r\n") == "InvalidRequest"
    sig = chunk_signature(CTX, CTX.seed_signature, b"abc")
    for bad in [sig[:-1], sig + "0", "g" * 64, f"{sig};chunk-signature={sig}"]:
        assert error_code(SIGNED, f"3;chunk-signature={bad}\r\nabc\r\n".encode()) == "InvalidRequest"


def test_signature_is_checked_when_the_chunk_completes() -> None:
    """Data may be handed out early, but the bad signature surfaces before the next chunk."""
    wire = bytearray(encode(SIGNED, [b"abc", b"def"]))
    wire[wire.index(b"abc")] = ord("x")
    decoder = AwsChunkedDecoder(SIGNED, CTX)
    header_end = wire.index(b"\r\n") + 2
    assert decoder.feed(bytes(wire[: header_end + 2])) == [b"xb"]
    with pytest.raises(S3Error) as info:
        decoder.feed(bytes(wire[header_end + 2 : header_end + 3]))
    assert info.value.code == "SignatureDoesNotMatch"


def test_reordered_chunks_are_rejected() -> None:
    """Each signature chains from the previous one, so swapping chunks breaks the chain."""
    wire = encode(SIGNED, [b"abc", b"def"])
    first_end = wire.index(b"abc\r\n") + 5
    second_end = wire.index(b"def\r\n") + 5
    swapped = wire[first_end:second_end] + wire[:first_end] + wire[second_end:]
    assert error_code(SIGNED, swapped) == "SignatureDoesNotMatch"


def test_oversize_chunk_header() -> None:
    decoder = AwsChunkedDecoder(UNSIGNED_TRAILER)
    decoder.feed(b"3;x=" + b"a" * (MAX_CHUNK_HEADER - 10))
    with pytest.raises(S3Error) as info:
        decoder.feed(b"a" * 10)
    assert info.value.code == "InvalidRequest"
    # In one large feed the missing line end is caught without buffering the feed.
    decoder = AwsChunkedDecoder(UNSIGNED_TRAILER)
    with pytest.raises(S3Error):
        decoder.feed(b"1" * (1 << 20))
    assert len(decoder._buf) == 0


def test_chunk_header_exactly_at_the_limit_is_fine() -> None:
    header = b"3;x=" + b"a" * (MAX_CHUNK_HEADER - 6) + b"\r\n"
    assert len(header) == MAX_CHUNK_HEADER
    assert decode(UNSIGNED_TRAILER, header + b"abc\r\n0\r\n\r\n", pieces=[7]) == (b"abc", {})


def test_chunk_larger_than_max_chunk_size() -> None:
    wire = encode(UNSIGNED_TRAILER, [b"x" * 101])
    assert error_code(UNSIGNED_TRAILER, wire, max_chunk_size=100) == "InvalidRequest"
    assert decode(UNSIGNED_TRAILER, wire, max_chunk_size=101)[0] == b"x" * 101
    huge = b"ffffffffffffffff\r\n"
    assert error_code(UNSIGNED_TRAILER, huge) == "InvalidRequest"


def test_decoded_length_mismatch() -> None:
    wire = encode(UNSIGNED_TRAILER, [b"abc"])
    assert error_code(UNSIGNED_TRAILER, wire, expected_length=4) == "IncompleteBody"
    assert error_code(UNSIGNED_TRAILER, wire, expected_length=2) == "IncompleteBody"
    assert decode(UNSIGNED_TRAILER, wire, expected_length=3) == (b"abc", {})


def test_decoded_length_overflow_is_caught_early_when_known_upfront() -> None:
    decoder = AwsChunkedDecoder(UNSIGNED_TRAILER, expected_length=10)
    decoder.feed(b"a\r\n0123456789\r\n")
    with pytest.raises(S3Error) as info:
        decoder.feed(b"1\r\n")
    assert info.value.code == "IncompleteBody"


def test_errors_are_sticky() -> None:
    decoder = AwsChunkedDecoder(UNSIGNED_TRAILER)
    with pytest.raises(S3Error):
        decoder.feed(b"zz\r\n")
    with pytest.raises(S3Error):
        decoder.feed(b"3\r\nabc\r\n")
    with pytest.raises(S3Error):
        decoder.close()


def test_empty_feeds_and_empty_body() -> None:
    decoder = AwsChunkedDecoder(UNSIGNED_TRAILER)
    assert decoder.feed(b"") == []
    with pytest.raises(S3Error) as info:
        decoder.close()
    assert info.value.code == "IncompleteBody"
    assert decode(SIGNED, encode(SIGNED, []), expected_length=0) == (b"", {})


def test_feed_accepts_bytearray_and_memoryview() -> None:
    wire = encode(SIGNED, [b"hello", b" world"])
    decoder = AwsChunkedDecoder(SIGNED, CTX)
    half = len(wire) // 2
    out = decoder.feed(bytearray(wire[:half])) + decoder.feed(memoryview(wire)[half:])
    assert b"".join(out) == b"hello world"
    assert all(isinstance(piece, bytes) for piece in out)
    assert decoder.close(11) == {}


def test_payload_passes_through_without_buffering() -> None:
    """A large chunk fed in pieces is returned piece by piece; nothing accumulates."""
    decoder = AwsChunkedDecoder(UNSIGNED_TRAILER)
    decoder.feed(b"%x\r\n" % (8 << 20))
    piece = b"x" * (1 << 20)
    for _ in range(8):
        returned = decoder.feed(piece)
        assert returned == [piece]
        assert returned[0] is piece  # whole feed was payload: handed back as-is
        assert len(decoder._buf) == 0
    decoder.feed(b"\r\n0\r\n\r\n")
    assert decoder.close(8 << 20) == {}


# -- trailer errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "trailer_section",
    [
        b"x-amz-checksum-crc32\r\n\r\n",  # no colon
        b":AAAAAA==\r\n\r\n",  # no name
        b"bad name:AAAAAA==\r\n\r\n",  # space in name
        b"x-amz-checksum-crc32:AAAA\x01AA==\r\n\r\n",  # control character
        b"x-amz-checksum-crc32:AAAAAA==\n\r\n",  # bare LF
        b"x-amz-checksum-crc32:AAAAAA==\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n",  # duplicate
        b"x-amz-trailer-signature:" + b"0" * 64 + b"\r\n\r\n",  # signature while unsigned
    ],
)
def test_malformed_unsigned_trailers(trailer_section: bytes) -> None:
    assert error_code(UNSIGNED_TRAILER, b"3\r\nabc\r\n0\r\n" + trailer_section) == "MalformedTrailerError"


def test_trailer_section_size_is_capped() -> None:
    wire = b"0\r\n" + b"".join(b"x-amz-meta-%d:%s\r\n" % (i, b"v" * 100) for i in range(200)) + b"\r\n"
    assert error_code(UNSIGNED_TRAILER, wire) == "MalformedTrailerError"


def test_trailer_value_whitespace_is_trimmed_and_names_lower_cased() -> None:
    wire = b"0\r\nX-Amz-Checksum-CRC32:  AAAAAA==\t\r\n\r\n"
    assert decode(UNSIGNED_TRAILER, wire) == (b"", {"x-amz-checksum-crc32": "AAAAAA=="})


def test_signed_trailer_errors() -> None:
    good = encode(SIGNED_TRAILER, [b"abc"], {"x-amz-checksum-crc32": crc32_b64(b"abc")})
    head, _, _ = good.partition(b"x-amz-trailer-signature")
    # Missing signature.
    assert error_code(SIGNED_TRAILER, head + b"\r\n") == "MalformedTrailerError"
    # Two blank lines after the final chunk.
    final = head[: head.index(b"x-amz-checksum")]
    assert error_code(SIGNED_TRAILER, final + b"\r\n\r\n" + good[len(final) :]) == "MalformedTrailerError"
    # Signature not last.
    sig_line = good[len(head) : -2]
    assert error_code(SIGNED_TRAILER, head + sig_line + b"x-amz-meta-a:b\r\n\r\n") == "MalformedTrailerError"
    # Malformed signature.
    assert (
        error_code(SIGNED_TRAILER, head + b"x-amz-trailer-signature:abc\r\n\r\n") == "MalformedTrailerError"
    )
    # Valid form, wrong value.
    wrong = trailer_signature(CTX, CTX.seed_signature, {"x-amz-checksum-crc32": crc32_b64(b"abc")})
    assert error_code(SIGNED_TRAILER, head + f"x-amz-trailer-signature:{wrong}\r\n\r\n".encode()) == (
        "SignatureDoesNotMatch"
    )
    # Dropping the checksum trailer changes what was signed.
    final_header_end = head.index(b"x-amz-checksum")
    assert error_code(SIGNED_TRAILER, head[:final_header_end] + sig_line + b"\r\n") == "SignatureDoesNotMatch"


def test_trailers_are_not_allowed_without_trailer_mode() -> None:
    wire = encode(SIGNED, [b"abc"])[:-2] + b"x-amz-checksum-crc32:AAAAAA==\r\n\r\n"
    assert error_code(SIGNED, wire) == "InvalidRequest"


# -- modes ---------------------------------------------------------------------------------------


def test_is_streaming() -> None:
    assert is_streaming(SIGNED)
    assert is_streaming(SIGNED_TRAILER)
    assert is_streaming(UNSIGNED_TRAILER)
    assert is_streaming("STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD")
    assert not is_streaming("UNSIGNED-PAYLOAD")
    assert not is_streaming(EMPTY_SHA256)
    assert not is_streaming(None)
    assert not is_streaming("")


def test_unsupported_streaming_modes() -> None:
    for mode in [
        "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD",
        "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD-TRAILER",
    ]:
        with pytest.raises(S3Error) as info:
            AwsChunkedDecoder(mode, CTX)
        assert info.value.code == "NotImplemented"
    with pytest.raises(ValueError):
        AwsChunkedDecoder("UNSIGNED-PAYLOAD")


def test_signed_modes_need_a_signing_context() -> None:
    for mode in [SIGNED, SIGNED_TRAILER]:
        with pytest.raises(ValueError):
            AwsChunkedDecoder(mode)
    AwsChunkedDecoder(UNSIGNED_TRAILER, CTX)  # ignored when unsigned


def test_unsigned_mode_ignores_chunk_signatures() -> None:
    """Nothing to check them against; they must not make an unsigned body fail or pass."""
    wire = encode(SIGNED_TRAILER, [b"abc"], {})
    head = wire[: wire.index(b"x-amz-trailer-signature")]
    assert decode(UNSIGNED_TRAILER, head + b"\r\n") == (b"abc", {})
