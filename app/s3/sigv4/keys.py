"""Signing keys: the SigV4 key chain, and a derived key with its HMAC pads pre-hashed (the
verifier caches one per secret, day and region)."""

from __future__ import annotations

import hashlib
import hmac

SERVICE = "s3"
TERMINATOR = "aws4_request"
SIGNING_KEY_CACHE_SIZE = 1024
_IPAD = bytes(x ^ 0x36 for x in range(256))
_OPAD = bytes(x ^ 0x5C for x in range(256))


def derive_signing_key(secret: str, date: str, region: str, service: str = SERVICE) -> bytes:
    """The SigV4 key chain HMAC(HMAC(HMAC(HMAC("AWS4"+secret, date), region), service), term)."""
    k = hmac.digest(("AWS4" + secret).encode("utf-8"), date.encode("utf-8"), "sha256")
    k = hmac.digest(k, region.encode("utf-8"), "sha256")
    k = hmac.digest(k, service.encode("utf-8"), "sha256")
    return hmac.digest(k, TERMINATOR.encode(), "sha256")


class Signer:
    """A derived key with its HMAC pads pre-hashed.

    Signing then costs two hash-object copies instead of a full HMAC set-up, which under
    OpenSSL 3 is one of the most expensive steps of a verify.
    """

    __slots__ = ("_inner", "_outer", "key")

    def __init__(self, key: bytes) -> None:
        self.key = key
        block = key.ljust(64, b"\0")  # a derived key (32 bytes) is shorter than the SHA-256 block
        self._inner = hashlib.sha256(block.translate(_IPAD))
        self._outer = hashlib.sha256(block.translate(_OPAD))

    def hexdigest(self, msg: bytes) -> str:
        inner = self._inner.copy()
        inner.update(msg)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.hexdigest()


def new_signer(secret: str, date: str, region: str, service: str) -> Signer:
    return Signer(derive_signing_key(secret, date, region, service))
