"""Header authentication: the ``Authorization: AWS4-HMAC-SHA256 ...`` form of SigV4."""

from __future__ import annotations

from collections.abc import Callable

from app.domain.errors import S3Error
from app.s3.sigv4.canonical import canonical_query_pairs, check_signature, mismatch
from app.s3.sigv4.credential import Credential
from app.s3.sigv4.fields import check_payload_hash, header_error, parse_signed_headers, request_date
from app.s3.sigv4.keys import Signer
from app.s3.sigv4.values import AuthResult, RequestParts

SignerFor = Callable[[str, str, str], tuple[Signer, str]]  # (access key, date, region) -> (signer, scope)


def verify_header(req: RequestParts, headers: dict[bytes, list[bytes]], credential: Credential,
                  signer_for: SignerFor, check_skew: Callable[[str, float], None]) -> AuthResult:
    """Authenticate a header-signed request (its ``credential`` read by ``read_credential``) or
    raise the ``S3Error`` S3 would answer with."""
    access_key, cred_date, region = credential.access_key, credential.date, credential.region
    signed = credential.fields["SignedHeaders"]
    signed_names = parse_signed_headers(signed, header_error)
    signature = credential.signature

    amz_date, ts = request_date(headers)
    if cred_date != amz_date[:8]:
        raise header_error("Invalid credential date. Date is not the same as X-Amz-Date.")
    check_skew(amz_date, ts)
    payload = _header_payload_hash(headers)
    signer, scope = signer_for(access_key, cred_date, region)
    pairs = credential.query_pairs
    query = "&".join([f"{n}={v}" for n, v in (canonical_query_pairs(req.query_string) if pairs is None else pairs)])
    failure = check_signature(
        req, headers, signed, signed_names, query, payload, amz_date, scope, signer, signature
    )
    if failure is not None:
        raise mismatch(failure, access_key, signature)
    return AuthResult(access_key=access_key, region=region, amz_date=amz_date, scope=scope,
                      signature=signature, signing_key=signer.key, content_sha256=payload, presigned=False)


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
