"""ListObjectsV2 continuation tokens: opaque to clients, a key (or prefix) marker to us.

Encoding the marker rather than passing the remote's own token through lets the listing merge
local entries (write-back) with the remote's and resume anywhere.
"""

from __future__ import annotations

import base64
import binascii

from app.domain.errors import S3Error

_PREFIX = b"f1:"


def encode_token(marker: str) -> str:
    return base64.urlsafe_b64encode(_PREFIX + marker.encode("utf-8", "surrogatepass")).decode("ascii")


def decode_token(token: str) -> str:
    try:
        raw = base64.urlsafe_b64decode(token.encode("ascii") + b"=" * (-len(token) % 4))
        if not raw.startswith(_PREFIX):
            raise ValueError("foreign token")
        # Strict UTF-8: a marker is a key, and a lone surrogate could not be sent on to the remote.
        return raw[len(_PREFIX):].decode("utf-8")
    except (ValueError, UnicodeError, binascii.Error) as exc:
        raise S3Error("InvalidArgument", "The continuation token provided is incorrect",
                      ArgumentName="continuation-token") from exc
