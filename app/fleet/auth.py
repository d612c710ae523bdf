"""Signatures of the internal endpoint: HMAC-SHA256 with the fleet's shared secret.

A peer signs ``method \\n path \\n query \\n timestamp \\n sha256(body)``. The receiver recomputes
it over what it received, refuses a timestamp outside the skew window (a replayed capture ages
out) and compares in constant time. Any mismatch is 403, never a hint of which part failed.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping

DATE = "x-ferry-date"
BODY_SHA256 = "x-ferry-content-sha256"
SIGNATURE = "x-ferry-signature"
NODE = "x-ferry-node"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def _string_to_sign(method: str, path: str, query: str, timestamp: str, body_sha256: str) -> bytes:
    return "\n".join((method.upper(), path, query, timestamp, body_sha256)).encode("utf-8", "surrogateescape")


def sign(secret: str, method: str, path: str, query: str = "", body_sha256: str = EMPTY_SHA256,
         now: float | None = None) -> dict[str, str]:
    """The headers that authenticate one request (``path`` and ``query`` exactly as sent)."""
    timestamp = str(int(now if now is not None else time.time()))
    mac = hmac.new(secret.encode(), _string_to_sign(method, path, query, timestamp, body_sha256), hashlib.sha256)
    return {DATE: timestamp, BODY_SHA256: body_sha256, SIGNATURE: mac.hexdigest()}


def verify(secret: str, method: str, path: str, query: str, headers: Mapping[str, str], body_sha256: str,
           skew: float, now: float | None = None) -> bool:
    """Whether the request carries a valid, fresh signature over exactly what was received."""
    timestamp = headers.get(DATE, "")
    claimed = headers.get(SIGNATURE, "")
    if not timestamp.isdigit() or not claimed or len(timestamp) > 12:
        return False
    if abs((now if now is not None else time.time()) - int(timestamp)) > skew:
        return False
    if not hmac.compare_digest(headers.get(BODY_SHA256, ""), body_sha256):
        return False
    expected = hmac.new(secret.encode(), _string_to_sign(method, path, query, timestamp, body_sha256),
                        hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, claimed)
