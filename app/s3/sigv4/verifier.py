"""The verifier: which form of authentication a request carries, the clock skew check and the
signing-key cache; the forms themselves are ``header.py`` and ``presigned.py``."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import lru_cache

from app.domain.errors import S3Error
from app.s3.sigv4.canonical import canonical_query_pairs, header_map
from app.s3.sigv4.credential import HEADER_V4, Credential, read_credential, refuse_sigv2
from app.s3.sigv4.fields import iso
from app.s3.sigv4.header import SignerFor, verify_header
from app.s3.sigv4.keys import SERVICE, SIGNING_KEY_CACHE_SIZE, TERMINATOR, Signer, new_signer
from app.s3.sigv4.presigned import verify_presigned
from app.s3.sigv4.values import AuthResult, RequestParts, SecretLookup


def has_auth(req: RequestParts) -> bool:
    """Whether the request carries any credentials (else the caller treats it as anonymous).

    SigV2 credentials and malformed ones count too, so that ``verify`` can reject them rather than
    the request silently running as anonymous.
    """
    try:
        return read_credential(req) is not None
    except S3Error:
        return True


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
        """Authenticate ``req`` or raise the ``S3Error`` S3 would answer with (reads the credential
        and looks its secret up; the S3 edge, which needs the tenant too, calls ``verify_credential``)."""
        credential = read_credential(req)
        if credential is None:
            raise S3Error("AccessDenied", "Request is not signed")
        return self.verify_credential(req, credential, self._lookup(credential.access_key))

    def verify_credential(self, req: RequestParts, credential: Credential, secret: str | None) -> AuthResult:
        """Check ``credential``'s signature with ``secret`` (None: an unknown key). The credential
        is the one ``read_credential`` read from ``req``: it is never read a second time."""
        refuse_sigv2(credential)
        headers = req.by_name if req.by_name is not None else header_map(req.headers)
        signer_for = self._signer_with(credential.access_key, secret)
        if credential.form == HEADER_V4:
            return verify_header(req, headers, credential, signer_for, self._check_skew)
        pairs = credential.query_pairs
        return verify_presigned(req, headers, canonical_query_pairs(req.query_string) if pairs is None else pairs,
                                credential, signer_for,
                                self._clock, self._max_skew)

    def _check_skew(self, amz_date: str, ts: float) -> None:
        now = self._clock()
        if abs(now - ts) > self._max_skew:
            raise S3Error(
                "RequestTimeTooSkewed",
                RequestTime=amz_date,
                ServerTime=iso(now),
                MaxAllowedSkewMilliseconds=str(self._max_skew * 1000),
            )

    def _signer_with(self, access_key: str, secret: str | None) -> SignerFor:
        """The signer and credential scope for the credential's date and region; an unknown key
        (no secret) is InvalidAccessKeyId."""

        def signer_for(_access_key: str, cred_date: str, region: str) -> tuple[Signer, str]:
            if secret is None:
                raise S3Error("InvalidAccessKeyId", AWSAccessKeyId=access_key)
            return self._signer(secret, cred_date, region, SERVICE), f"{cred_date}/{region}/{SERVICE}/{TERMINATOR}"

        return signer_for
