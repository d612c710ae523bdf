"""Property-based checks of the admin API from its own OpenAPI schema (schemathesis).

Every operation is called with generated (valid and invalid) input and a valid admin token
against a live gateway; whatever the input, the answer must not be a 5xx. Bounded so the whole
run takes well under a minute.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings

from tests.support.gateway import ADMIN_TOKEN, GatewayProcess
from tests.support.seaweed import SeaweedServer

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
MAX_EXAMPLES = 25


@pytest.fixture(scope="module")
def fuzz_gateway(seaweed: SeaweedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    # A gateway of its own: generated policies (say, read-only for '*') must not leak into other tests.
    with GatewayProcess(seaweed, tmp_path_factory.mktemp("fuzz")) as g:
        yield g


def test_admin_api_never_answers_5xx(fuzz_gateway: GatewayProcess) -> None:
    """One hypothesis run per operation (``schemathesis.pytest.from_fixture`` does not work with
    this pytest, so the operations are walked here); every failure is collected, then reported."""
    api = schemathesis.openapi.from_url(f"{fuzz_gateway.endpoint}/admin/openapi.json", headers=AUTH)
    failures: list[str] = []
    operations = 0
    for result in api.get_all_operations():
        operation = result.ok()
        operations += 1

        @given(case=operation.as_strategy())
        @settings(max_examples=MAX_EXAMPLES, deadline=None, phases=[Phase.explicit, Phase.generate],
                  suppress_health_check=list(HealthCheck), database=None)
        def check(case: Any) -> None:
            response = case.call(base_url=fuzz_gateway.endpoint, headers=AUTH, timeout=30)
            if response.status_code >= 500:
                failures.append(f"{case.method} {case.formatted_path} -> {response.status_code}: "
                                f"{response.text[:300]} (query={case.query} body={case.body!r})")

        check()
    assert operations >= 30
    assert not failures, "\n".join(failures[:20])
