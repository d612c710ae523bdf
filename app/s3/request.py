"""An incoming S3 request: addressing (path or virtual-hosted), query, headers, body stream."""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, overload
from urllib.parse import unquote_plus, unquote_to_bytes

import anyio

from app.domain.errors import S3Error
from app.s3.chunked import AwsChunkedDecoder, ChunkSigningContext, is_streaming
from app.s3.sigv4 import AuthResult

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]


class ClientDisconnected(Exception):
    """The client went away mid-request; nothing is answered."""


def parse_query(raw: bytes) -> dict[str, str]:
    """Form-style decoding, as S3 (and the SigV4 verifier) read it: ``+`` is a space, ``%2B`` a plus."""
    out: dict[str, str] = {}
    if not raw:
        return out
    for pair in raw.decode("latin-1").split("&"):
        if not pair:
            continue
        name, _, value = pair.partition("=")
        if "%" not in pair and "+" not in pair:  # nothing to decode (most of a presigned query)
            out.setdefault(name, value)
            continue
        try:
            name = unquote_plus(name, errors="strict")
            out.setdefault(name, unquote_plus(value, errors="strict"))
        except UnicodeDecodeError as exc:
            raise S3Error("InvalidArgument", f"Query parameter {name} is not valid UTF-8") from exc
    return out


def split_target(raw_path: bytes, host: str, domain: str | None) -> tuple[str | None, str | None]:
    """(bucket, key) from the Host header (virtual-hosted style) or the path (path style)."""
    try:
        path = unquote_to_bytes(raw_path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise S3Error("InvalidURI", "Couldn't parse the specified URI.", status=400) from exc
    hostname = host.rsplit(":", 1)[0] if host and not host.endswith("]") else host
    hostname = hostname.lower() if hostname else ""
    if domain and hostname.endswith("." + domain):
        bucket = hostname[: -len(domain) - 1]
        key = path[1:] if path.startswith("/") else path
        return bucket, key or None
    if not path.startswith("/"):
        raise S3Error("InvalidURI", "Couldn't parse the specified URI.", status=400)
    bucket, _, key = path[1:].partition("/")
    return (bucket or None), (key or None)


@dataclass
class S3Request:
    method: str
    bucket: str | None
    key: str | None
    query: dict[str, str]
    headers: dict[str, str]
    raw_path: bytes
    receive: Receive
    auth: AuthResult | None = None
    tenant_id: int | None = None
    request_id: str = ""
    zero_copy: bool = False  # the server sends file ranges itself (ASGI zerocopysend offered)
    body_timeout: float | None = None  # longest wait for the next body bytes (RequestTimeout)
    body_min_rate: BodyRate | None = None  # slowest body the gateway waits for (RequestTimeout)
    header_lists: dict[bytes, list[bytes]] | None = field(default=None, repr=False)  # raw, for SigV4
    _body: RequestBody | None = field(default=None, repr=False)

    @overload
    def header(self, name: str) -> str | None: ...
    @overload
    def header(self, name: str, default: str) -> str: ...

    def header(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name, default)

    @property
    def resource(self) -> str:
        if self.bucket and self.key:
            return f"/{self.bucket}/{self.key}"
        return f"/{self.bucket}" if self.bucket else "/"

    def body(self) -> RequestBody:
        if self._body is None:
            self._body = RequestBody(self)
        return self._body

    async def read_body(self, limit: int = 2 * 1024 * 1024) -> bytes:
        """Small bodies (XML documents) into memory, refusing anything larger than ``limit``."""
        out = bytearray()
        async for piece in self.body():
            out += piece
            if len(out) > limit:
                raise S3Error("MaxMessageLengthExceeded", "Your request was too big.", status=400)
        return bytes(out)


@dataclass(frozen=True)
class BodyRate:
    """The slowest a client may send a body: ``bytes_per_second`` over ``window`` seconds of the
    gateway waiting for it (time the gateway spends on the bytes is not the client's)."""

    bytes_per_second: int
    window: float

    @property
    def enabled(self) -> bool:
        return self.bytes_per_second > 0 and self.window > 0


class RequestBody:
    """Decoded payload of a request: aws-chunked framing removed, trailers kept aside."""

    def __init__(self, request: S3Request) -> None:
        self.request = request
        self.trailers: dict[str, str] = {}
        headers = request.headers
        auth = request.auth
        sha = headers.get("x-amz-content-sha256")
        self.decoder: AwsChunkedDecoder | None = None
        if is_streaming(sha):
            signing = None
            if sha and sha.startswith("STREAMING-AWS4-HMAC-SHA256") and auth is not None:
                signing = ChunkSigningContext(auth.signing_key, auth.amz_date, auth.scope, auth.signature)
            self.decoder = AwsChunkedDecoder(sha or "", signing)
        self.declared_raw = _int_header(headers.get("content-length"))
        decoded = headers.get("x-amz-decoded-content-length")
        self.declared_size = _int_header(decoded) if self.decoder else self.declared_raw
        # A presigned URL may pin the payload hash in its query (X-Amz-Content-Sha256): the signed
        # value, which the header may lack or contradict, is the one the body must hash to.
        pinned = auth.content_sha256 if auth is not None and auth.presigned else None
        self.payload_sha256 = next((h for h in (pinned, sha) if h and len(h) == 64), None)
        self._waited = 0.0  # seconds spent waiting for the client in the current rate window
        self._window_bytes = 0
        self._payload_handed_over = False

    def __aiter__(self) -> AsyncIterator[bytes | memoryview]:
        return self._iterate()

    def take_payload_hash(self) -> PayloadHash | None:
        """Hand the x-amz-content-sha256 check to the body's consumer (call before iterating).

        The consumer feeds every piece it gets to the returned hash, in its own thread and on its
        own large buffers, then calls ``verify()`` once the body is exhausted: hashing 64 KiB
        messages on the event loop cost more than the hash itself. None when there is nothing to
        check (unsigned or aws-chunked bodies, whose chunks the decoder verifies).
        """
        if self.payload_sha256 is None or self.decoder is not None:
            return None
        self._payload_handed_over = True
        return PayloadHash(self.payload_sha256)

    async def _iterate(self) -> AsyncIterator[bytes | memoryview]:
        received = 0
        hasher = hashlib.sha256() if self.payload_sha256 and not self._payload_handed_over else None
        while True:
            message = await self._next_message()
            if message["type"] == "http.disconnect":
                raise ClientDisconnected()
            chunk: bytes = message.get("body", b"")
            received += len(chunk)
            if self.declared_raw is not None and received > self.declared_raw:
                raise S3Error("IncompleteBody")
            if chunk:
                if self.decoder is not None:
                    for piece in self.decoder.feed(chunk):
                        yield piece
                else:
                    if hasher is not None:
                        hasher.update(chunk)
                    yield chunk
            if not message.get("more_body", False):
                break
        if self.declared_raw is not None and received != self.declared_raw:
            raise S3Error("IncompleteBody")
        if self.decoder is not None:
            self.trailers = self.decoder.close()
            if self.declared_size is not None and self.decoder.decoded_length != self.declared_size:
                raise S3Error("IncompleteBody")
        elif hasher is not None:
            _check_payload(hasher, self.payload_sha256 or "")

    async def _next_message(self) -> MutableMapping[str, Any]:
        """The next piece of the body, or RequestTimeout when the client sends nothing for
        ``body_timeout`` seconds: a stalled upload must not hold its reservation, its staging file
        and its connection for ever. The answer closes the connection (its body was not read)."""
        timeout = self.request.body_timeout
        rate = self.request.body_min_rate
        if timeout is None and rate is None:
            return await self.request.receive()
        idle = 0.0
        while True:
            wait = math.inf if timeout is None else timeout - idle
            if rate is not None:
                wait = min(wait, rate.window - self._waited)
            started = time.monotonic()
            message: MutableMapping[str, Any] | None = None
            with anyio.move_on_after(max(0.0, wait)):
                message = await self.request.receive()
            spent = time.monotonic() - started
            idle += spent
            if rate is not None:
                self._judge_rate(rate, spent, len(message.get("body", b"")) if message is not None else 0)
            if message is not None:
                return message
            if timeout is not None and idle >= timeout:
                raise S3Error("RequestTimeout", headers={"Connection": "close"})

    def _judge_rate(self, rate: BodyRate, waited: float, nbytes: int) -> None:
        """Count ``nbytes`` that came after ``waited`` seconds; at the window's end, a client that
        sent fewer than ``bytes_per_second`` per second of waiting gets RequestTimeout (and the
        connection is closed: the rest of its body is never read)."""
        self._waited += waited
        self._window_bytes += nbytes
        if self._waited < rate.window:
            return
        if self._window_bytes < rate.bytes_per_second * self._waited:
            raise S3Error("RequestTimeout", headers={"Connection": "close"})
        self._waited, self._window_bytes = 0.0, 0


class PayloadHash:
    """SHA-256 of a body whose ``x-amz-content-sha256`` names it, fed by the body's consumer."""

    __slots__ = ("_hash", "expected")

    def __init__(self, expected: str) -> None:
        self.expected = expected
        self._hash = hashlib.sha256()

    def update(self, data: bytes | bytearray | memoryview) -> None:
        self._hash.update(data)

    def verify(self) -> None:
        """XAmzContentSHA256Mismatch unless every byte fed hashes to the declared value."""
        _check_payload(self._hash, self.expected)


def _check_payload(hasher: Any, expected: str) -> None:
    computed = hasher.hexdigest()
    if computed != expected:
        raise S3Error("XAmzContentSHA256Mismatch", ClientComputedContentSHA256=expected,
                      S3ComputedContentSHA256=computed)


def _int_header(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError as exc:
        raise S3Error("InvalidArgument", "Invalid length header") from exc
    if number < 0:
        raise S3Error("InvalidArgument", "Invalid length header")
    return number
