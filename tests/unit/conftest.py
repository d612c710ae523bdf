"""Fixtures shared by the unit tests of the catalog."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from app.adapters.catalog.engine import make_engine
from app.adapters.catalog.migrate import upgrade


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """A migrated catalog, once on SQLite and once on a fresh PostgreSQL database (skipped, or
    failed with FERRY_REQUIRE_SERVICES=1, without PostgreSQL). A module may define its own."""
    url = f"sqlite:///{tmp_path / 'ferry.db'}" if request.param == "sqlite" else \
        request.getfixturevalue("fresh_postgres_url")
    upgrade(url)
    eng = make_engine(url)
    yield eng
    eng.dispose()
