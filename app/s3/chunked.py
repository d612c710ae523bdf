"""Incremental decoder for ``Content-Encoding: aws-chunked`` request bodies.

S3 clients stream uploads in this framing when ``x-amz-content-sha256`` names a streaming mode:

* ``STREAMING-AWS4-HMAC-SHA256-PAYLOAD``: ``<hex>;chunk-signature=<sig>\\r\\n<data>\\r\\n`` ...
  ending ``0;chunk-signature=<sig>\\r\\n\\r\\n``; every chunk is signed, chained from the seed
  (Authorization) signature.
* ``STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER``: the same chunks, then after the final chunk
  header ``name:value\\r\\n`` trailer lines, ``x-amz-trailer-signature:<sig>\\r\\n`` and ``\\r\\n``.
* ``STREAMING-UNSIGNED-PAYLOAD-TRAILER``: ``<hex>\\r\\n<data>\\r\\n`` ... ``0\\r\\n``, trailer
  lines, ``\\r\\n`` (what botocore's ``AwsChunkedWrapper`` sends).

The decoder is a push parser so the HTTP layer can feed whatever the socket delivers. Payload
bytes pass straight through (never buffered nor copied); only chunk headers, the CRLF after data and the
trailer section are accumulated, each with a hard size cap. Decoded data is handed out before
the chunk's signature is known; callers must discard the whole body if any later call raises.

Errors: signature mismatches -> ``SignatureDoesNotMatch``; a body that stops early ->
``IncompleteBody``; broken framing -> ``InvalidRequest``; broken trailers ->
``MalformedTrailerError``; unsupported streaming modes (SigV4a) -> ``NotImplemented``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import Final

from app.domain.errors import S3Error

STREAMING_SIGNED: Final = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
STREAMING_SIGNED_TRAILER: Final = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
STREAMING_UNSIGNED_TRAILER: Final = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
SUPPORTED_MODES: Final = frozenset({STREAMING_SIGNED, STREAMING_SIGNED_TRAILER, STREAMING_UNSIGNED_TRAILER})

MAX_CHUNK_HEADER: Final = 4096  # one chunk-size line, CRLF included
MAX_TRAILER_BYTES: Final = 16 * 1024  # the whole trailer section
MAX_TRAILERS: Final = 32

_EMPTY_SHA256: Final = hashlib.sha256(b"").hexdigest()
_TRAILER_SIGNATURE: Final = "x-amz-trailer-signature"
_HEX_SIZE = re.compile(rb"[0-9a-fA-F]{1,16}")
_EXTENSION = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+)(?:=([!#$%&'*+.^_`|~0-9A-Za-z-]+|\"[^\"\\]*\"))?")
_SIGNATURE = re.compile(rb"[0-9a-fA-F]{64}")
_TRAILER_NAME = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_TRAILER_VALUE = re.compile(rb"[\t\x20-\x7e]*")

# Parser states.
_HEADER: Final = 0  # reading a chunk-size line
_DATA: Final = 1  # passing chunk payload through
_DATA_CRLF: Final = 2  # expecting the CRLF that ends chunk payload
_TRAILERS: Final = 3  # reading trailer lines after the final chunk header
_AFTER_BLANK: Final = 4  # signed trailers: blank line right after the final chunk, trailers follow
_DONE: Final = 5


@dataclass(frozen=True)
class ChunkSigningContext:
    """What chunk signatures chain from: the request's SigV4 key, date, scope and signature."""

    signing_key: bytes  # the SigV4 derived key
    amz_date: str  # X-Amz-Date of the request, e.g. 20261129T093000Z
    scope: str  # "20261129/us-east-1/s3/aws4_request"
    seed_signature: str  # hex signature from the Authorization header


def is_streaming(content_sha256: str | None) -> bool:
    """Whether ``x-amz-content-sha256`` announces an aws-chunked body (supported or not).

    Unsupported streaming modes (SigV4a ``STREAMING-AWS4-ECDSA-...``) also answer True, so the
    caller hands them to ``AwsChunkedDecoder``, which rejects them with NotImplemented instead
    of the body being stored with its framing.
    """
    return content_sha256 is not None and content_sha256.startswith("STREAMING-")


def _invalid(message: str) -> S3Error:
    return S3Error("InvalidRequest", message)


def _malformed_trailer(message: str) -> S3Error:
    return S3Error("MalformedTrailerError", message)


def _signature_mismatch() -> S3Error:
    return S3Error("SignatureDoesNotMatch")


def _hmac_hex(key: bytes, string_to_sign: str) -> str:
    return hmac.new(key, string_to_sign.encode("utf-8"), hashlib.sha256).hexdigest()


class AwsChunkedDecoder:
    """Push parser: ``feed()`` raw body bytes, get payload back; ``close()`` yields trailers."""

    def __init__(
        self,
        content_sha256: str,
        signing: ChunkSigningContext | None = None,
        max_chunk_size: int = 16 * 1024 * 1024,
        *,
        expected_length: int | None = None,
    ) -> None:
        if content_sha256 not in SUPPORTED_MODES:
            if is_streaming(content_sha256):
                raise S3Error("NotImplemented", f"x-amz-content-sha256 {content_sha256} is not supported.")
            raise ValueError(f"not an aws-chunked mode: {content_sha256!r}")
        self._signed = content_sha256 != STREAMING_UNSIGNED_TRAILER
        self._trailer_mode = content_sha256 != STREAMING_SIGNED
        if self._signed and signing is None:
            raise ValueError(f"{content_sha256} needs a ChunkSigningContext")
        self._signing = signing if self._signed else None
        self._previous = signing.seed_signature.lower() if signing is not None else ""
        self._max_chunk = max_chunk_size
        self._expected_length = expected_length

        self._state = _HEADER
        self._buf = bytearray()  # partial header/trailer line or CRLF; never payload
        self._remaining = 0  # payload bytes still due in the current chunk
        self._chunk_signature = ""  # the signature the current chunk claims
        self._hasher = hashlib.sha256() if self._signed else None
        self._trailer_lines: list[tuple[str, str]] = []
        self._trailer_bytes = 0
        self._trailer_signature: str | None = None
        self._error: S3Error | None = None
        self.decoded_length = 0

    # -- public API ---------------------------------------------------------------------------

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes | memoryview]:
        """Consume raw body bytes, return decoded payload pieces ready so far (possibly empty).

        Fed ``bytes``, the pieces are ``data`` itself or memoryviews of it (no copy: a body's
        payload is otherwise copied once more for nothing); fed anything mutable, they are copies.
        """
        if self._error is not None:
            raise self._error
        try:
            return self._feed(data)
        except S3Error as exc:
            self._error = exc
            raise

    def close(self, expected_length: int | None = None) -> dict[str, str]:
        """End of raw body: the trailers (lower-case names, signature removed), or an S3Error.

        ``expected_length`` (``x-amz-decoded-content-length``; also settable in the constructor)
        must equal the decoded size, otherwise IncompleteBody: a short or padded body is never
        accepted as complete.
        """
        if self._error is not None:
            raise self._error
        try:
            return self._close(expected_length)
        except S3Error as exc:
            self._error = exc
            raise

    # -- parsing ------------------------------------------------------------------------------

    def _feed(self, data: bytes | bytearray | memoryview) -> list[bytes | memoryview]:
        view = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
        size = len(view)
        pos = 0
        out: list[bytes | memoryview] = []
        while pos < size:
            state = self._state
            if state == _DATA:
                take = min(self._remaining, size - pos)
                piece = view[pos : pos + take]
                if self._hasher is not None:
                    self._hasher.update(piece)
                if isinstance(data, bytes):  # immutable: a view of it stays valid, no copy needed
                    out.append(data if take == size else piece)
                else:
                    out.append(piece.tobytes())
                pos += take
                self._remaining -= take
                self.decoded_length += take
                if self._remaining == 0:
                    self._end_of_chunk_data()
            elif state == _DATA_CRLF:
                need = 2 - len(self._buf)
                self._buf += view[pos : pos + need]
                pos += min(need, size - pos)
                if len(self._buf) == 2:
                    if self._buf != b"\r\n":
                        raise _invalid("Chunk data is not followed by CRLF; the chunk size is wrong.")
                    self._buf.clear()
                    self._state = _HEADER
            elif state == _DONE:
                raise _invalid("Unexpected data after the end of the aws-chunked body.")
            else:
                line, pos = self._take_line(view, pos, size)
                if line is None:
                    break
                if state == _HEADER:
                    self._on_chunk_header(line)
                else:
                    self._on_trailer_line(line)
        return out

    def _take_line(self, view: memoryview, pos: int, size: int) -> tuple[bytes | None, int]:
        """The next LF-terminated line (LF kept) once complete, buffering partial lines (capped).

        Only a window as long as the remaining line allowance is searched, so a missing LF in a
        large feed is detected without scanning (or copying) the rest of it.
        """
        limit = MAX_CHUNK_HEADER if self._state == _HEADER else MAX_TRAILER_BYTES - self._trailer_bytes
        window_end = min(size, pos + max(limit - len(self._buf), 0))
        haystack = view.obj
        if isinstance(haystack, bytes | bytearray) and len(haystack) == size:
            end = haystack.find(b"\n", pos, window_end)
        else:
            index = view[pos:window_end].tobytes().find(b"\n")
            end = -1 if index < 0 else pos + index
        if end < 0:
            if window_end < size or len(self._buf) + size - pos >= limit:
                raise self._line_too_long()
            self._buf += view[pos:size]
            return None, size
        self._buf += view[pos : end + 1]
        line = bytes(self._buf)
        self._buf.clear()
        return line, end + 1

    def _line_too_long(self) -> S3Error:
        if self._state == _HEADER:
            return _invalid(f"aws-chunked chunk header exceeds {MAX_CHUNK_HEADER} bytes.")
        return _malformed_trailer(f"The trailer section exceeds {MAX_TRAILER_BYTES} bytes.")

    def _on_chunk_header(self, line: bytes) -> None:
        if not line.endswith(b"\r\n"):
            raise _invalid("aws-chunked chunk header does not end with CRLF.")
        fields = line[:-2].split(b";")
        if not _HEX_SIZE.fullmatch(fields[0]):
            raise _invalid("aws-chunked chunk size is not a hexadecimal number.")
        chunk_size = int(fields[0], 16)
        if chunk_size > self._max_chunk:
            raise _invalid(f"aws-chunked chunk of {chunk_size} bytes exceeds the {self._max_chunk} limit.")
        if self._expected_length is not None and self.decoded_length + chunk_size > self._expected_length:
            raise S3Error("IncompleteBody", "The aws-chunked body exceeds x-amz-decoded-content-length.")
        signature: str | None = None
        for extension in fields[1:]:
            match = _EXTENSION.fullmatch(extension)
            if match is None:
                raise _invalid("aws-chunked chunk extension is malformed.")
            if match.group(1) == b"chunk-signature":
                value = match.group(2)
                if signature is not None or value is None or not _SIGNATURE.fullmatch(value):
                    raise _invalid("aws-chunked chunk-signature is malformed.")
                signature = value.decode("ascii").lower()
        if self._signed and signature is None:
            raise _invalid("aws-chunked chunk has no chunk-signature.")
        self._chunk_signature = signature or ""
        if chunk_size:
            self._remaining = chunk_size
            self._state = _DATA
            return
        # Final chunk: its (empty) payload is signed like any other, then come the trailers.
        self._end_of_chunk_data()
        self._state = _TRAILERS

    def _end_of_chunk_data(self) -> None:
        """Verify the chunk that just completed, before its successor can be accepted."""
        if self._hasher is not None:
            signing = self._signing
            assert signing is not None
            string_to_sign = "\n".join(
                (
                    "AWS4-HMAC-SHA256-PAYLOAD",
                    signing.amz_date,
                    signing.scope,
                    self._previous,
                    _EMPTY_SHA256,
                    self._hasher.hexdigest(),
                )
            )
            expected = _hmac_hex(signing.signing_key, string_to_sign)
            if not hmac.compare_digest(expected, self._chunk_signature):
                raise _signature_mismatch()
            self._previous = expected
            self._hasher = hashlib.sha256()
        self._state = _DATA_CRLF

    def _on_trailer_line(self, line: bytes) -> None:
        if not line.endswith(b"\r\n"):
            raise _malformed_trailer("A trailer line does not end with CRLF.")
        self._trailer_bytes += len(line)
        content = line[:-2]
        if not content:
            self._on_blank_line()
            return
        if not self._trailer_mode:
            raise _invalid(f"Trailers are not allowed with {STREAMING_SIGNED}.")
        if self._trailer_signature is not None:
            raise _malformed_trailer("x-amz-trailer-signature must be the last trailer.")
        self._state = _TRAILERS  # a blank line already seen was the optional separator
        name, colon, value = content.partition(b":")
        if not colon or not _TRAILER_NAME.fullmatch(name) or not _TRAILER_VALUE.fullmatch(value):
            raise _malformed_trailer("A trailer line is not of the form name:value.")
        key = name.decode("ascii").lower()
        text = value.decode("ascii").strip(" \t")
        if key == _TRAILER_SIGNATURE:
            if not self._signed:
                raise _malformed_trailer("x-amz-trailer-signature is not allowed with an unsigned payload.")
            if not _SIGNATURE.fullmatch(text.encode("ascii")):
                raise _malformed_trailer("x-amz-trailer-signature is malformed.")
            self._trailer_signature = text.lower()
            return
        if any(key == seen for seen, _ in self._trailer_lines):
            raise _malformed_trailer(f"Trailer {key} appears more than once.")
        if len(self._trailer_lines) >= MAX_TRAILERS:
            raise _malformed_trailer("Too many trailers.")
        self._trailer_lines.append((key, text))

    def _on_blank_line(self) -> None:
        """A blank line ends the body, except once right after the final chunk with signed trailers.

        The AWS documentation example for signed trailers sends ``0;chunk-signature=..\\r\\n\\r\\n``
        *followed by* the trailer lines, while SDKs send the trailers straight after the final
        chunk header. Both are accepted in that mode, where it is unambiguous because the trailer
        section must end with its signature. Unsigned trailers get no such leeway: there a blank
        line is the end, so a cut-off body can never pass for one without trailers.
        """
        if (
            self._state == _TRAILERS
            and self._signed
            and self._trailer_mode
            and not self._trailer_lines
            and (self._trailer_signature is None)
        ):
            self._state = _AFTER_BLANK
            return
        if self._state == _AFTER_BLANK:
            raise _malformed_trailer("Unexpected blank line in the trailer section.")
        self._finish_trailers()

    def _finish_trailers(self) -> None:
        if self._signed and self._trailer_mode:
            if self._trailer_signature is None:
                raise _malformed_trailer("The trailer section has no x-amz-trailer-signature.")
            self._verify_trailer_signature(self._trailer_signature)
        self._state = _DONE

    def _verify_trailer_signature(self, provided: str) -> None:
        """Trailer signature: chained from the final chunk over ``name:value\\n`` lines, sorted."""
        signing = self._signing
        assert signing is not None
        canonical = "".join(f"{name}:{value}\n" for name, value in sorted(self._trailer_lines))
        string_to_sign = "\n".join(
            (
                "AWS4-HMAC-SHA256-TRAILER",
                signing.amz_date,
                signing.scope,
                self._previous,
                hashlib.sha256(canonical.encode("ascii")).hexdigest(),
            )
        )
        expected = _hmac_hex(signing.signing_key, string_to_sign)
        if not hmac.compare_digest(expected, provided):
            raise _signature_mismatch()

    def _close(self, expected_length: int | None) -> dict[str, str]:
        if self._state == _AFTER_BLANK:
            self._finish_trailers()
        if self._state != _DONE:
            raise S3Error("IncompleteBody", "The aws-chunked body ended before its final chunk and trailers.")
        for expected in (self._expected_length, expected_length):
            if expected is not None and expected != self.decoded_length:
                raise S3Error(
                    "IncompleteBody",
                    f"Decoded {self.decoded_length} bytes but x-amz-decoded-content-length is {expected}.",
                )
        return dict(self._trailer_lines)
