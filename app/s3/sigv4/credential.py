"""Which credential a request carries, read once for every form Ferry accepts: the SigV4
``Authorization`` header, the SigV4 presigned query, the SigV2 ``AWS AK:sig`` header and the SigV2
presigned query.

The ``Credential`` returned here is the only reading of the signer: the edge looks up the tenant
and the secret of ``credential.access_key``, and the verifiers check the signature with that
secret over the fields parsed here. A second reading (a case-insensitive regex over the query)
once named another tenant than the one whose secret had signed (issue 25), so nothing else reads
credentials from the request, and spellings two readers could disagree on are refused: an auth
parameter given twice, or in another case (``x-amz-credential``), or auth in both header and query.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import unquote, unquote_to_bytes

from app.domain.errors import S3Error
from app.s3.sigv4.canonical import canonical_query_pairs, header_map
from app.s3.sigv4.fields import QUERY_CRED_PREFIX, V2_MESSAGE, header_error, parse_credential, query_error
from app.s3.sigv4.values import ALGORITHM, RequestParts

HEADER_V4 = "sigv4-header"
QUERY_V4 = "sigv4-query"
HEADER_V2 = "sigv2-header"
QUERY_V2 = "sigv2-query"
V2_SCHEME = "AWS"

V4_QUERY_PARAMS = (
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Date",
    "X-Amz-Expires",
    "X-Amz-SignedHeaders",
    "X-Amz-Signature",
)
V4_MARKERS = frozenset({"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Signature"})  # "this is a presign"
V2_QUERY_PARAMS = ("AWSAccessKeyId", "Signature", "Expires")
PINNED_HASH = "x-amz-content-sha256"  # a presign's pinned payload hash: SDKs spell it in either case
_SPELLINGS = {name.lower(): name for name in (*V4_QUERY_PARAMS, "AWSAccessKeyId")}
_V2_SPELLINGS = {name.lower(): name for name in V2_QUERY_PARAMS}
ONLY_ONE = ("Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, Signature query "
            "string parameter or the Authorization header should be specified")


@dataclass(frozen=True, slots=True)
class Credential:
    """Who a request says signed it, and the fields its form signs with."""

    form: str  # HEADER_V4, QUERY_V4, HEADER_V2 or QUERY_V2
    access_key: str
    signature: str
    # SigV4 header: Credential, SignedHeaders, Signature; SigV4 query: the six X-Amz-* (decoded);
    # SigV2 query: AWSAccessKeyId, Signature, Expires (``%``-decoded only: a raw '+' stays a plus).
    fields: Mapping[str, str]
    date: str = ""  # SigV4 credential scope: YYYYMMDD and region
    region: str = ""
    pinned_sha256: str | None = None  # SigV4 query: X-Amz-Content-Sha256 given in the query
    # The query's canonical (name, value) pairs, sorted: the one parse of the query that found
    # these fields, which the SigV4 verifier signs over (None: not parsed, as for SigV2).
    query_pairs: list[tuple[str, str]] | None = None

    @property
    def sigv2(self) -> bool:
        return self.form in (HEADER_V2, QUERY_V2)


def read_credential(req: RequestParts) -> Credential | None:
    """The request's one credential, None when it carries none (anonymous), or the ``S3Error`` S3
    answers for a malformed, repeated or ambiguous one."""
    headers = req.by_name if req.by_name is not None else header_map(req.headers)
    auth = headers.get(b"authorization")
    pairs = canonical_query_pairs(req.query_string)
    params = _auth_params(pairs)
    v4 = bool(params.keys() & V4_MARKERS)
    v2 = "AWSAccessKeyId" in params
    if auth is not None:
        if v4 or v2:
            raise S3Error("InvalidArgument", ONLY_ONE, ArgumentName="Authorization")
        return _from_header(auth, pairs)
    if v4 and v2:
        raise S3Error("InvalidArgument", ONLY_ONE, ArgumentName="X-Amz-Algorithm")
    if v4:
        return _from_v4_query(params, pairs)
    if v2:
        return _from_v2_query(_raw_v2_params(req.query_string))
    return None


def _auth_params(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """The query's auth parameters by their canonical name (values as the canonical pairs carry
    them, AWS-encoded), each given once and spelled as S3 spells it; every other parameter is no
    business of authentication. A name is its decoded spelling AWS-encoded, which for every auth
    parameter (unreserved characters only) is the decoded name itself."""
    found: dict[str, list[tuple[str, str]]] = {}
    v2 = False
    for name, value in pairs:
        lower = name.lower()
        canonical = _SPELLINGS.get(lower)
        if canonical is None:
            if lower in _V2_SPELLINGS:
                canonical = name
            elif lower == PINNED_HASH:
                canonical = name  # any spelling, but only one of them
            else:
                continue
        v2 = v2 or lower == "awsaccesskeyid"
        found.setdefault(lower, []).append((name, value))
    params: dict[str, str] = {}
    for lower, given in found.items():
        if lower in _V2_SPELLINGS and not v2:
            continue  # Signature and Expires are auth parameters only beside AWSAccessKeyId
        if len(given) > 1:
            raise query_error(f"{given[0][0]} was given more than once.")
        name, value = given[0]
        if lower != PINNED_HASH and name != (_SPELLINGS.get(lower) or _V2_SPELLINGS[lower]):
            raise query_error(f"{name} is not an authentication parameter; query parameter names are "
                              f"case-sensitive (did you mean {_SPELLINGS.get(lower) or _V2_SPELLINGS[lower]}?)")
        params[PINNED_HASH if lower == PINNED_HASH else name] = value
    return params


def _decoded(value: str) -> str:
    """A canonical pair's value as the client meant it (most presigned values carry no escape)."""
    return _unescaped(value) if "%" in value else value


@lru_cache(maxsize=256)
def _unescaped(value: str) -> str:
    """``unquote``, remembered: a client's presigned URLs repeat the same escaped credential scope
    and signed-header list on every request (bounded: 256 values of at most a request line)."""
    return unquote(value)


def _raw_v2_params(qs: bytes) -> dict[str, bytes]:
    """SigV2's three query parameters, raw (SigV2 does not form-decode: a raw '+' stays a plus)."""
    raw: dict[str, bytes] = {}
    for segment in qs.split(b"&"):
        name, _, value = segment.partition(b"=")
        text = unquote(name.decode("latin-1").replace("+", " "))
        if text in V2_QUERY_PARAMS:
            raw.setdefault(text, value)
    return raw


def _from_header(auth: list[bytes], pairs: list[tuple[str, str]]) -> Credential:
    if len(auth) != 1:
        raise header_error("more than one Authorization header was sent.")
    scheme, _, rest = auth[0].decode("latin-1").strip().partition(" ")
    if scheme == V2_SCHEME:
        return _from_v2_header(rest)
    if scheme != ALGORITHM:
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
            "the authorization header requires three components: Credential, SignedHeaders, and Signature."
        )
    access_key, cred_date, region = parse_credential(fields["Credential"], header_error)
    return Credential(HEADER_V4, access_key, fields["Signature"], fields, cred_date, region, query_pairs=pairs)


def _from_v2_header(credential: str) -> Credential:
    access_key, colon, signature = credential.strip().rpartition(":")
    if not colon or not access_key or not signature:
        raise S3Error("InvalidArgument", "AWS authorization header is invalid.  Expected "
                      "AwsAccessKeyId:signature", ArgumentName="Authorization")
    return Credential(HEADER_V2, access_key, signature, {})


def _from_v4_query(raw: dict[str, str], pairs: list[tuple[str, str]]) -> Credential:
    params = {name: _decoded(raw[name]) for name in V4_QUERY_PARAMS if name in raw}
    if len(params) != len(V4_QUERY_PARAMS):
        raise query_error(
            "Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, "
            "X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters."
        )
    if params["X-Amz-Algorithm"] != ALGORITHM:
        raise query_error('X-Amz-Algorithm only supports "AWS4-HMAC-SHA256"')
    access_key, cred_date, region = parse_credential(
        params["X-Amz-Credential"], lambda detail: query_error(QUERY_CRED_PREFIX + detail))
    pinned = raw.get(PINNED_HASH)
    return Credential(QUERY_V4, access_key, params["X-Amz-Signature"], params, cred_date, region,
                      _decoded(pinned) if pinned is not None else None, pairs)


def _from_v2_query(raw: dict[str, bytes]) -> Credential:
    if any(name not in raw for name in V2_QUERY_PARAMS):
        raise S3Error("AccessDenied", "Query-string authentication requires the Signature, Expires and "
                      "AWSAccessKeyId parameters")
    params = {name: unquote_to_bytes(raw[name]).decode("utf-8", "replace") for name in V2_QUERY_PARAMS}
    return Credential(QUERY_V2, params["AWSAccessKeyId"], params["Signature"], params)


def refuse_sigv2(credential: Credential) -> None:
    """The SigV4 verifier's answer to SigV2 credentials (the edge sends those to SigV2's)."""
    if credential.sigv2:
        raise S3Error("InvalidRequest", V2_MESSAGE)
