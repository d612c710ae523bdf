"""SigV4 over the bytes Ferry sends: header values go to the remote byte for byte.

Ferry holds a header value as the latin-1 string of the client's raw bytes (one character per
byte, the way the ASGI server decoded it), and the remote must get those same bytes: a client
that wrote ``caf\\xe9`` (Latin-1) must read ``caf\\xe9`` back after the destage, and one that wrote
UTF-8 must read UTF-8. botocore would send a str header as its UTF-8 and sign that, which turns
Latin-1 into different bytes (or double-encodes UTF-8). So header values (metadata, content
headers) are sent as their latin-1 bytes (``before-send``) and signed over the same bytes (a
SigV4 signer that hashes the canonical request as latin-1 whenever it can be: every other part
of it is ASCII). A request with a character above 255 anywhere is left to botocore whole (sent
and signed as UTF-8), so what is signed is always what is sent."""

from __future__ import annotations

from hashlib import sha256
from typing import Any

import botocore.auth
from botocore.auth import S3SigV4Auth

SIGNATURE_VERSION = "ferry-s3v4"


class RawHeaderS3SigV4Auth(S3SigV4Auth):
    """S3's SigV4, with header characters below 256 hashed as the single bytes they are sent as."""

    def string_to_sign(self, request: Any, canonical_request: str) -> str:
        try:
            hashed = canonical_request.encode("latin-1")
        except UnicodeEncodeError:  # never for Ferry's own strings; botocore's behaviour then
            hashed = canonical_request.encode("utf-8")
        return "\n".join(["AWS4-HMAC-SHA256", request.context["timestamp"], self.credential_scope(request),
                          sha256(hashed).hexdigest()])


botocore.auth.AUTH_TYPE_MAPS.setdefault(SIGNATURE_VERSION, RawHeaderS3SigV4Auth)


def choose_raw_signer(signature_version: Any = None, **_: Any) -> str | None:
    """Header-signed S3 requests use the raw-bytes signer; presigned URLs keep botocore's."""
    return SIGNATURE_VERSION if signature_version == "s3v4" else None


def send_headers_as_latin1(request: Any, **_: Any) -> None:
    """botocore encoded every header str as UTF-8: the values go back to their latin-1 bytes,
    all of them or (a character above 255 somewhere, signed as UTF-8 then) none."""
    raw = {}
    for name, value in request.headers.items():
        if isinstance(value, bytes) and not value.isascii():
            try:
                raw[name] = value.decode("utf-8").encode("latin-1")
            except (UnicodeDecodeError, UnicodeEncodeError):
                return
    for name, value in raw.items():
        request.headers[name] = value


def install(client: Any) -> None:
    """Send and sign the client's header strings as the raw bytes they stand for."""
    events = client.meta.events
    events.register("choose-signer.s3", choose_raw_signer, unique_id="ferry-raw-signer")
    events.register("before-send.s3", send_headers_as_latin1, unique_id="ferry-raw-headers")
