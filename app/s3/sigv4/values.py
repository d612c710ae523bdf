"""The values SigV4 verification works on: the request as it came, who signed it, the
payload modes of ``x-amz-content-sha256``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
STREAMING_UNSIGNED_PAYLOAD_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
STREAMING_HMAC_PAYLOAD = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
STREAMING_HMAC_PAYLOAD_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"

# Values x-amz-content-sha256 may carry besides a hex digest. The SigV4a (ECDSA) streaming
# modes pass here on purpose: the aws-chunked decoder rejects them with NotImplemented.
PAYLOAD_MODES = frozenset(
    {
        UNSIGNED_PAYLOAD,
        STREAMING_UNSIGNED_PAYLOAD_TRAILER,
        STREAMING_HMAC_PAYLOAD,
        STREAMING_HMAC_PAYLOAD_TRAILER,
        "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD",
        "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD-TRAILER",
    }
)


@dataclass(frozen=True, slots=True)
class RequestParts:
    """The pieces of an incoming request that SigV4 covers, straight from the ASGI scope."""

    method: str  # "GET"
    raw_path: bytes  # as received on the wire (scope["raw_path"]), still percent-encoded, no query
    query_string: bytes  # scope["query_string"], raw
    headers: Sequence[tuple[bytes, bytes]]  # scope["headers"] (names lower-case bytes)
    # The same headers by name (values in order), when the caller built that view already: the
    # edge walks the headers once for the parser, the router and this verifier.
    by_name: dict[bytes, list[bytes]] | None = None


@dataclass(frozen=True, slots=True)
class AuthResult:
    """Who signed the request, plus what aws-chunked bodies need to check chunk signatures."""

    access_key: str
    region: str
    amz_date: str  # "20261129T093000Z"
    scope: str  # "20261129/us-east-1/s3/aws4_request"
    signature: str  # the seed signature (aws-chunked chunk signatures chain from it)
    signing_key: bytes  # derived key (aws-chunked chunk signatures use it)
    content_sha256: str  # x-amz-content-sha256 value, or "UNSIGNED-PAYLOAD" for presigned
    presigned: bool


class SecretLookup(Protocol):
    """Maps an access key to its secret; None means unknown or disabled."""

    def __call__(self, access_key: str) -> str | None: ...
