"""AWS Signature Version 4 verification for incoming S3 requests (server side).

The package: ``values`` (the request and the result), ``canonical`` (canonical request and the
signature compare), ``keys`` (the key chain and its pre-hashed HMAC pads), ``fields`` (parsing
credential scope, signed headers, dates, payload hash), ``header`` and ``presigned`` (the two
forms of authentication), ``credential`` (the one reading of who signed, SigV2 included) and
``verifier`` (clock skew, the signing-key cache).

The S3 front door is a raw ASGI app, so this module takes the request as plain values
(``RequestParts``) and knows nothing about any web framework. Every failure is an ``S3Error``
with the code S3 itself would answer, so clients see familiar errors.

Canonicalisation follows what S3 (and botocore's ``S3SigV4Auth``) do, which differs from the
generic SigV4 rules in two places that matter:

* the canonical URI is the raw path exactly as it came over the wire - S3 neither
  normalises (``..``, ``//``) nor double-encodes it;
* the canonical query string is rebuilt from the decoded parameters, so ``%2f`` and ``%2F``
  or ``%7E`` and ``~`` verify alike. A raw ``+`` in the query means a space (form decoding, as
  ``urllib.parse.parse_qsl`` reads it); a literal plus arrives as ``%2B`` from every SDK.
  The router must decode the query the same way (``parse_qsl(qs, keep_blank_values=True)``)
  so the parameters it acts on are exactly the ones that were signed.

The canonical request is built as bytes straight from the ASGI values: no decode/encode round
trip for paths and header values, which is both faster and byte-exact for clients (botocore,
Go, Java) that put UTF-8 header values on the wire and sign those same bytes.
"""

from __future__ import annotations

from app.s3.sigv4.keys import derive_signing_key
from app.s3.sigv4.presigned import MAX_PRESIGNED_EXPIRES
from app.s3.sigv4.values import (
    ALGORITHM,
    STREAMING_HMAC_PAYLOAD,
    STREAMING_HMAC_PAYLOAD_TRAILER,
    STREAMING_UNSIGNED_PAYLOAD_TRAILER,
    UNSIGNED_PAYLOAD,
    AuthResult,
    RequestParts,
    SecretLookup,
)
from app.s3.sigv4.verifier import SigV4Verifier, has_auth

__all__ = [
    "ALGORITHM",
    "MAX_PRESIGNED_EXPIRES",
    "STREAMING_HMAC_PAYLOAD",
    "STREAMING_HMAC_PAYLOAD_TRAILER",
    "STREAMING_UNSIGNED_PAYLOAD_TRAILER",
    "UNSIGNED_PAYLOAD",
    "AuthResult",
    "RequestParts",
    "SecretLookup",
    "SigV4Verifier",
    "derive_signing_key",
    "has_auth",
]
