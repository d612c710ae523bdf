"""The verifier: which form of authentication a request carries, the clock skew check and the
signing-key cache; the forms themselves are ``header.py`` and ``presigned.py``."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import lru_cache

from app.domain.errors import S3Error
from app.s3.sigv4.canonical import QUERY_AUTH_NAMES, canonical_query_pairs, header_map
from app.s3.sigv4.fields import V2_MESSAGE, iso
from app.s3.sigv4.header import verify_header
from app.s3.sigv4.keys import SERVICE, SIGNING_KEY_CACHE_SIZE, TERMINATOR, Signer, new_signer
from app.s3.sigv4.presigned import verify_presigned
from app.s3.sigv4.values import AuthResult, RequestParts, SecretLookup


def has_auth(req: RequestParts) -> bool:
    """Whether the request carries any credentials (else the caller treats it as anonymous).

    SigV2 credentials count too, so that ``verify`` can reject them rather than the request
    silently running as anonymous.
    """
    for name, _ in req.headers:
        if name == b"authorization":
            return True
    qs = req.query_string
    if not qs or (b"X-Amz-" not in qs and b"AWSAccessKeyId" not in qs and b"%" not in qs):
        return False
    names = {name for name, _ in canonical_query_pairs(qs)}
    return bool(names & QUERY_AUTH_NAMES) or "AWSAccessKeyId" in names


class SigV4Verifier:
    """Verifies SigV4 header and presigned (query) authentication against a secret lookup.

    Derived signing keys are cached per (secret, date, region, service) because deriving one
    costs four HMACs and every request from a client on a given day shares the same key.
    """

    def __init__(
        self,
        lookup: SecretLookup,
        *,
        max_skew_seconds: int = 900,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._lookup = lookup
        self._max_skew = max_skew_seconds
        self._clock = clock
        self._signer = lru_cache(maxsize=SIGNING_KEY_CACHE_SIZE)(new_signer)

    def verify(self, req: RequestParts) -> AuthResult:
        """Authenticate ``req`` or raise the ``S3Error`` S3 would answer with."""
        headers = req.by_name if req.by_name is not None else header_map(req.headers)
        auth = headers.get(b"authorization")
        if auth is not None:
            if req.query_string and b"X-Amz-" in req.query_string:
                names = {n for n, _ in canonical_query_pairs(req.query_string)}
                if names & QUERY_AUTH_NAMES:
                    raise S3Error(
                        "InvalidArgument",
                        "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, "
                        "Signature query string parameter or the Authorization header should be specified",
                        ArgumentName="Authorization",
                    )
            return verify_header(req, headers, auth, self._signer_for, self._check_skew)
        pairs = canonical_query_pairs(req.query_string)
        for name, _ in pairs:
            if name in QUERY_AUTH_NAMES:
                return verify_presigned(req, headers, pairs, self._signer_for, self._clock, self._max_skew)
        if any(name == "AWSAccessKeyId" for name, _ in pairs):
            raise S3Error("InvalidRequest", V2_MESSAGE)
        raise S3Error("AccessDenied", "Request is not signed")

    def _check_skew(self, amz_date: str, ts: float) -> None:
        now = self._clock()
        if abs(now - ts) > self._max_skew:
            raise S3Error(
                "RequestTimeTooSkewed",
                RequestTime=amz_date,
                ServerTime=iso(now),
                MaxAllowedSkewMilliseconds=str(self._max_skew * 1000),
            )

    def _signer_for(self, access_key: str, cred_date: str, region: str) -> tuple[Signer, str]:
        """The key's signer and the credential scope; an unknown key is InvalidAccessKeyId."""
        secret = self._lookup(access_key)
        if secret is None:
            raise S3Error("InvalidAccessKeyId", AWSAccessKeyId=access_key)
        return self._signer(secret, cred_date, region, SERVICE), f"{cred_date}/{region}/{SERVICE}/{TERMINATOR}"
