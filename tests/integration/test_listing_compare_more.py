"""More generated cases of test_listing_compare.py (see its docstring), in a file of their own so
that a parallel run gives them their own worker and gateway."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.test_listing_compare import _healthy, lgw, merged_listing_holds, proxy  # noqa: F401 - fixtures
from tests.support.counting_proxy import CountingProxy
from tests.support.gateway import GatewayProcess

pytestmark = pytest.mark.timeout(600)


@pytest.mark.parametrize("seed", [3, 4])
def test_listing_is_the_remote_merged_with_the_journal(lgw: GatewayProcess, proxy: CountingProxy,  # noqa: F811
                                                       seaweed: Any, seed: int) -> None:
    merged_listing_holds(lgw, proxy, seaweed, seed)
