"""Header authentication: the ``Authorization: AWS4-HMAC-SHA256 ...`` form of SigV4."""

from __future__ import annotations

from collections.abc import Callable

from app.domain.errors import S3Error
from app.s3.sigv4.canonical import canonical_query_pairs, check_signature, mismatch
from app.s3.sigv4.fields import (
    V2_MESSAGE,
    check_payload_hash,
    header_error,
    parse_credential,
    parse_signed_headers,
    request_date,
)
from app.s3.sigv4.keys import Signer
from app.s3.sigv4.values import ALGORITHM, AuthResult, RequestParts

SignerFor = Callable[[str, str, str], tuple[Signer, str]]  # (access key, date, region) -> (signer, scope)


def verify_header(req: RequestParts, headers: dict[bytes, list[bytes]], auth: list[bytes],
                  signer_for: SignerFor, check_skew: Callable[[str, float], None]) -> AuthResult:
    """Authenticate a header-signed request or raise the ``S3Error`` S3 would answer with."""
    fields = _authorization_fields(auth)
    access_key, cred_date, region = parse_credential(fields["Credential"], header_error)
    signed = fields["SignedHeaders"]
    signed_names = parse_signed_headers(signed, header_error)
    signature = fields["Signature"]

    amz_date, ts = request_date(headers)
    if cred_date != amz_date[:8]:
        raise header_error("Invalid credential date. Date is not the same as X-Amz-Date.")
    check_skew(amz_date, ts)
    payload = _header_payload_hash(headers)
    signer, scope = signer_for(access_key, cred_date, region)
    query = "&".join([f"{n}={v}" for n, v in canonical_query_pairs(req.query_string)])
    failure = check_signature(
        req, headers, signed, signed_names, query, payload, amz_date, scope, signer, signature
    )
    if failure is not None:
        raise mismatch(failure, access_key, signature)
    return AuthResult(access_key=access_key, region=region, amz_date=amz_date, scope=scope,
                      signature=signature, signing_key=signer.key, content_sha256=payload, presigned=False)


def _authorization_fields(auth: list[bytes]) -> dict[str, str]:
    """Credential, SignedHeaders and Signature of the one AWS4-HMAC-SHA256 Authorization header."""
    if len(auth) != 1:
        raise header_error("more than one Authorization header was sent.")
    scheme, _, rest = auth[0].decode("latin-1").strip().partition(" ")
    if scheme != ALGORITHM:
        if scheme == "AWS":
            raise S3Error("InvalidRequest", V2_MESSAGE)
        if scheme == "AWS4-ECDSA-P256-SHA256":
            raise S3Error("InvalidRequest", "SigV4a is not supported, use AWS4-HMAC-SHA256")
        raise S3Error("InvalidArgument", "Unsupported Authorization Type", ArgumentName="Authorization")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        key, eq, value = part.strip().partition("=")
        if not eq or key in fields or key not in ("Credential", "SignedHeaders", "Signature"):
            fields.clear()
            break
        fields[key] = value
    if len(fields) != 3:
        raise header_error(
            "the authorization header requires three components: Credential, SignedHeaders, "
            "and Signature."
        )
    return fields


def _header_payload_hash(headers: dict[bytes, list[bytes]]) -> str:
    """The one x-amz-content-sha256 a header-signed request must carry, checked for its form."""
    content = headers.get(b"x-amz-content-sha256")
    if content is None:
        raise S3Error("InvalidRequest", "Missing required header for this request: x-amz-content-sha256")
    if len(content) != 1:
        raise S3Error("InvalidArgument", "x-amz-content-sha256 was sent more than once")
    payload = content[0].decode("latin-1")
    check_payload_hash(payload)
    return payload
