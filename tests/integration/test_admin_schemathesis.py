"""Property-based checks of the admin API from its own OpenAPI schema (schemathesis).

Every operation is called with generated (valid and invalid) input and a valid admin token
against a live gateway; whatever the input, the answer must not be a 5xx. Bounded so the whole
run takes well under a minute.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings

from tests.support.gateway import ADMIN_TOKEN, GatewayProcess
from tests.support.reliability import Tally
from tests.support.seaweed import SeaweedServer

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
# The admin token's examples per operation: 12 in the quick profile, more on demand.
MAX_EXAMPLES = int(os.environ.get("FERRY_SCHEMATHESIS_EXAMPLES", "12"))


@pytest.fixture(scope="module")
def fuzz_gateway(seaweed: SeaweedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    # A gateway of its own: generated policies (say, read-only for '*') must not leak into other tests.
    g = GatewayProcess(seaweed, tmp_path_factory.mktemp("fuzz"))
    try:
        yield g.start(timeout=120)  # a loaded shared machine starts it slowly
    finally:
        g.stop()


# Examples per operation by the token's scope: the admin token explores most; the others check
# that no input makes a 5xx and that a token never does more than its scope allows.
# "tenant-*": a token bound to a tenant that owns no bucket the generated input can name.
SCOPES = {"admin": MAX_EXAMPLES, "write": 5, "read": 5, "tenant-write": 3, "tenant-read": 2}
READ_SCOPED_POSTS = ("/admin/remotes/{remote_id}/check",)  # read-scoped despite the method
# What a bound token may get a 2xx from when it names none of its tenant's buckets: filtered lists.
TENANT_OPEN = {("GET", "/admin/buckets"), ("GET", "/admin/policies"), ("GET", "/admin/staging"),
               ("GET", "/admin/cache/sizing"), ("GET", "/readyz"), ("GET", "/healthz")}


def _token(gw: GatewayProcess, scope: str) -> dict[str, str]:
    if scope == "admin":
        return AUTH
    body: dict[str, Any] = {"name": f"fuzz-{scope}-{uuid.uuid4().hex[:6]}", "scopes": [scope.split("-")[-1]]}
    if scope.startswith("tenant-"):
        body["tenant"] = f"fuzz-tenant-{uuid.uuid4().hex[:6]}"
        assert httpx.post(f"{gw.endpoint}/admin/tenants", headers=AUTH, timeout=30,
                          json={"name": body["tenant"]}).status_code == 201
    made = httpx.post(f"{gw.endpoint}/admin/tokens", headers=AUTH, timeout=30, json=body)
    assert made.status_code == 201, made.text
    return {"Authorization": f"Bearer {made.json()['token']}"}


def _beyond_scope(scope: str, method: str, path: str, status: int) -> bool:
    """A 2xx the token's scope does not allow: token management without admin, a change with read,
    anything but a filtered list for a token bound to a tenant."""
    if not 200 <= status < 300 or scope == "admin":
        return False
    if path.startswith("/admin/tokens"):
        return True
    if scope.startswith("tenant-"):
        return (method, path) not in TENANT_OPEN
    return scope == "read" and method not in ("GET", "HEAD") and path not in READ_SCOPED_POSTS


@pytest.mark.parametrize("scope", list(SCOPES))
def test_admin_api_never_answers_5xx(fuzz_gateway: GatewayProcess, scope: str) -> None:
    """One hypothesis run per operation (``schemathesis.pytest.from_fixture`` does not work with
    this pytest, so the operations are walked here); every failure is collected, then reported.
    Each token scope gets its own run: no 5xx, and no 2xx beyond what the scope allows."""
    headers = _token(fuzz_gateway, scope)
    api = schemathesis.openapi.from_url(f"{fuzz_gateway.endpoint}/admin/openapi.json", headers=AUTH)
    failures: list[str] = []
    operations = 0
    tally = Tally("security", f"admin-api-{scope}")
    for result in api.get_all_operations():
        operation = result.ok()
        operations += 1

        @given(case=operation.as_strategy())
        @settings(max_examples=SCOPES[scope], deadline=None, phases=[Phase.explicit, Phase.generate],
                  suppress_health_check=list(HealthCheck), database=None)
        def check(case: Any) -> None:
            response = case.call(base_url=fuzz_gateway.endpoint, headers=headers, timeout=30)
            what = f"{case.method} {case.formatted_path} -> {response.status_code}"
            # /readyz's 503 is its documented "not ready" answer (a slow remote on a loaded machine).
            failed = response.status_code >= 500 and not (case.operation.path == "/readyz"
                                                           and response.status_code == 503)
            bad = failed or _beyond_scope(scope, case.method, case.operation.path,
                                                               response.status_code)
            tally.op(expected=not bad, what=what)
            if bad:
                failures.append(f"{what}: {response.text[:300]} (query={case.query} body={case.body!r})")

        check()
    tally.write()
    assert operations >= 30
    assert not failures, "\n".join(failures[:20])
