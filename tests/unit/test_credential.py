"""One reading of the credential (issue 25): every auth input goes through ``read_credential``, and
the S3 edge's identification (which tenant) and verification (whose secret checks the signature)
always name the same key, whatever spelling an attacker gives one request: auth parameters in
another case, repeated, in both header and query, SigV2 next to SigV4.

The requests are signed by botocore with the attacker's own secret, the injected parameters
included in what is signed, so the signature is valid: the edge must either refuse the request or
run it as the attacker. On the old edge (a case-insensitive regex picked the first
``x-amz-credential``) the victim's tenant came out."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlsplit

import anyio
import pytest
from botocore.auth import HmacV1Auth, HmacV1QueryAuth, S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app.domain.errors import S3Error
from app.s3.app import S3App
from app.s3.sigv4 import RequestParts
from app.s3.sigv4.credential import HEADER_V2, HEADER_V4, QUERY_V2, QUERY_V4, read_credential

ATTACKER, ATTACKER_SECRET, ATTACKER_TENANT = "AKIDATTACKER00001", "attacker/secret+1", 1
VICTIM, VICTIM_SECRET, VICTIM_TENANT = "AKIDVICTIM0000001", "victim/secret+2", 2
ENDPOINT = "http://127.0.0.1:9000"
SCOPE_TAIL = "/20261202/us-east-1/s3/aws4_request"
AUTH_NAMES = ("X-Amz-Credential", "X-Amz-Algorithm", "X-Amz-Signature", "X-Amz-Date", "X-Amz-Expires",
              "X-Amz-SignedHeaders", "AWSAccessKeyId", "Signature", "Expires", "X-Amz-Content-Sha256")
FORMS = (HEADER_V4, QUERY_V4, HEADER_V2, QUERY_V2)


class KeyStore:
    """The two tenants' keys, as the catalog answers the edge (AccessKeys)."""

    keys = {ATTACKER: (ATTACKER_SECRET, ATTACKER_TENANT), VICTIM: (VICTIM_SECRET, VICTIM_TENANT)}

    def lookup_key(self, access_key: str) -> tuple[str | None, int | None]:
        return self.keys.get(access_key, (None, None))

    def cached_key(self, access_key: str) -> tuple[str | None, int | None] | None:
        return self.lookup_key(access_key)


EDGE = S3App(None, KeyStore())  # type: ignore[arg-type]  # authentication needs no gateway


def sign(form: str, method: str, path: str, query: str, *, ak: str = ATTACKER, secret: str = ATTACKER_SECRET,
         ) -> tuple[str, dict[str, str]]:
    """botocore's signature of ``method path?query`` in ``form``: (the URL sent, its headers)."""
    url = f"{ENDPOINT}{path}" + (f"?{query}" if query else "")
    request = AWSRequest(method=method, url=url, headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD"}
                         if form == HEADER_V4 else {})
    creds = Credentials(ak, secret)
    signer: Any = {HEADER_V4: lambda: S3SigV4Auth(creds, "s3", "us-east-1"),
                   QUERY_V4: lambda: S3SigV4QueryAuth(creds, "s3", "us-east-1", expires=600),
                   HEADER_V2: lambda: HmacV1Auth(creds),
                   QUERY_V2: lambda: HmacV1QueryAuth(creds, expires=600)}[form]()
    signer.add_auth(request)
    return request.url, dict(request.headers.items())


def scope_of(method: str, url: str, headers: dict[str, str]) -> dict[str, Any]:
    u = urlsplit(url)
    raw = [(k.lower().encode("latin-1"), str(v).encode("latin-1")) for k, v in headers.items()]
    if not any(k == b"host" for k, _ in raw):
        raw.append((b"host", u.netloc.encode()))
    return {"type": "http", "method": method, "path": u.path, "raw_path": u.path.encode(),
            "query_string": u.query.encode(), "headers": raw}


def authenticate(scope: dict[str, Any]) -> tuple[int | None, str] | S3Error:
    """The edge's answer: (tenant, verified access key), or the S3Error it refused with."""

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def run() -> tuple[int | None, str] | S3Error:
        try:
            req = await EDGE._parse(scope, receive, "test")
            await EDGE._authenticate(req, scope)
        except S3Error as err:
            return err
        assert req.auth is not None
        return req.tenant_id, req.auth.access_key

    return anyio.run(run)


def spellings(name: str) -> st.SearchStrategy[str]:
    """The name, its case variants and a percent-encoded dash."""
    return st.sampled_from([name, name.lower(), name.upper(), name.swapcase(), name.replace("-", "%2D", 1)])


victim_values = st.sampled_from([VICTIM + SCOPE_TAIL, VICTIM + "/x", VICTIM, "AWS4-HMAC-SHA256"])
# Every auth name, the ones that name a key more often (they are what impersonation needs).
names = st.sampled_from(AUTH_NAMES + ("X-Amz-Credential",) * 4 + ("AWSAccessKeyId",) * 2)
injected = st.lists(st.tuples(names.flatmap(spellings), victim_values), max_size=3)
victim_headers = st.sampled_from([
    None, None, None,
    f"AWS {VICTIM}:c2lnbmF0dXJl",
    f"AWS4-HMAC-SHA256 Credential={VICTIM}{SCOPE_TAIL}, SignedHeaders=host, Signature={'0' * 64}",
])


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(form=QUERY_V4, method="GET", before=[("x-amz-credential", VICTIM + "/x")], after=[], extra_header=None,
         ordinary=False)  # the reported attack
@example(form=QUERY_V2, method="GET", before=[], after=[("X-AMZ-CREDENTIAL", VICTIM + SCOPE_TAIL)],
         extra_header=None, ordinary=True)
@given(form=st.sampled_from(FORMS), method=st.sampled_from(["GET", "PUT", "DELETE"]), before=injected,
       after=injected, extra_header=victim_headers, ordinary=st.booleans())
def test_identification_and_verification_always_name_the_same_key(
        form: str, method: str, before: list[tuple[str, str]], after: list[tuple[str, str]],
        extra_header: str | None, ordinary: bool) -> None:
    """``before``: parameters the attacker signs; ``after``: appended once signed; an extra
    Authorization header with the victim's key. Accepted means: as the attacker, its key verified."""
    signed_query = "&".join(f"{n}={quote(v, safe='')}" for n, v in before)
    if ordinary:
        signed_query = "&".join(filter(None, ["versionId=v1", signed_query]))
    url, headers = sign(form, method, "/victim-bucket/key", signed_query)
    if after:
        url += ("&" if "?" in url else "?") + "&".join(f"{n}={quote(v, safe='')}" for n, v in after)
    if extra_header is not None:
        headers = {**headers, "Authorization": extra_header} if "Authorization" not in headers else headers
    scope = scope_of(method, url, headers)
    if extra_header is not None and "Authorization" in headers and headers["Authorization"] != extra_header:
        scope["headers"].append((b"authorization", extra_header.encode()))  # a second one
    outcome = authenticate(scope)
    if isinstance(outcome, S3Error):
        assert outcome.status in (400, 403), outcome
        return
    tenant, verified = outcome
    assert verified == ATTACKER and tenant == ATTACKER_TENANT, (outcome, url, headers)


@pytest.mark.parametrize("form", FORMS)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(AUTH_NAMES).flatmap(spellings), value=victim_values, first=st.booleans())
def test_one_signed_auth_parameter_never_changes_the_signer(form: str, name: str, value: str, first: bool) -> None:
    """The narrow case of the property above, each form on its own: one auth parameter, in any
    spelling, signed by the attacker before or after an ordinary one."""
    pairs = [f"{name}={quote(value, safe='')}", "versionId=v1"]
    url, headers = sign(form, "GET", "/victim-bucket/key", "&".join(pairs if first else pairs[::-1]))
    outcome = authenticate(scope_of("GET", url, headers))
    assert isinstance(outcome, S3Error) or outcome == (ATTACKER_TENANT, ATTACKER), (outcome, url)


@pytest.mark.parametrize("form", FORMS)
def test_every_form_reads_one_credential_and_runs_as_its_key(form: str) -> None:
    for ak, secret, tenant in ((ATTACKER, ATTACKER_SECRET, ATTACKER_TENANT), (VICTIM, VICTIM_SECRET, VICTIM_TENANT)):
        url, headers = sign(form, "GET", "/bucket/key", "versionId=v1", ak=ak, secret=secret)
        scope = scope_of("GET", url, headers)
        parts = RequestParts("GET", scope["raw_path"], scope["query_string"], scope["headers"])
        credential = read_credential(parts)
        assert credential is not None and credential.form == form and credential.access_key == ak
        assert authenticate(scope) == (tenant, ak)


def test_the_reported_attack_is_refused() -> None:
    """Issue 25: the attacker's presign with a first parameter naming the victim's key."""
    url, headers = sign(QUERY_V4, "GET", "/victim-bucket/key", f"x-amz-credential={VICTIM}%2Fx")
    outcome = authenticate(scope_of("GET", url, headers))
    assert isinstance(outcome, S3Error) and (outcome.code, outcome.status) == ("AuthorizationQueryParametersError", 400)


@pytest.mark.parametrize(("query", "code"), [
    ("X-Amz-Credential=a&X-Amz-Credential=b", "AuthorizationQueryParametersError"),
    ("x-amz-signature=abc", "AuthorizationQueryParametersError"),
    ("X-Amz-Algorithm=AWS4-HMAC-SHA256&AWSAccessKeyId=AK&Signature=s&Expires=1", "InvalidArgument"),
    ("AWSAccessKeyId=AK&awsaccesskeyid=AK2&Signature=s&Expires=1", "AuthorizationQueryParametersError"),
    ("AWSAccessKeyId=AK&Signature=s&signature=t&Expires=1", "AuthorizationQueryParametersError"),
    ("x-amz-content-sha256=a&X-Amz-Content-Sha256=b&X-Amz-Algorithm=AWS4-HMAC-SHA256",
     "AuthorizationQueryParametersError"),
])
def test_repeated_case_variant_or_mixed_auth_parameters_are_refused(query: str, code: str) -> None:
    with pytest.raises(S3Error) as info:
        read_credential(RequestParts("GET", b"/b/k", query.encode(), [(b"host", b"h")]))
    assert info.value.code == code and info.value.status == 400


def test_header_and_query_credentials_together_are_refused() -> None:
    url, headers = sign(HEADER_V4, "GET", "/b/k", f"AWSAccessKeyId={VICTIM}")
    outcome = authenticate(scope_of("GET", url, headers))
    assert isinstance(outcome, S3Error) and outcome.code == "InvalidArgument"


def test_ordinary_parameters_that_only_look_like_auth_are_left_alone() -> None:
    """``Signature`` and ``Expires`` are auth parameters only next to SigV2's AWSAccessKeyId."""
    url, headers = sign(HEADER_V4, "GET", "/b/k", "Signature=mine&expires=later")
    assert authenticate(scope_of("GET", url, headers)) == (ATTACKER_TENANT, ATTACKER)
