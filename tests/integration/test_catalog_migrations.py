"""The same Alembic migrations build the catalog on SQLite and on PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from app.adapters.catalog.engine import make_engine
from app.adapters.catalog.migrate import current_heads, upgrade
from app.adapters.catalog.repo import Catalog

EXPECTED_TABLES = {"tenants", "access_keys", "multipart_uploads", "multipart_parts", "object_versions",
                   "alembic_version"}


def _exercise(url: str) -> None:
    upgrade(url)
    upgrade(url)  # idempotent
    assert current_heads(url)
    engine = make_engine(url)
    assert set(inspect(engine).get_table_names()) >= EXPECTED_TABLES
    catalog = Catalog(engine)
    tenant = catalog.ensure_tenant_key("t-mig", "AKMIGRATION", "secret-1")
    assert catalog.lookup_key("AKMIGRATION") == ("secret-1", tenant)
    assert catalog.lookup_key("AKUNKNOWN") == (None, None)
    engine.dispose()


def test_sqlite_migrations(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    _exercise(url)
    with create_engine(url).connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"


@pytest.mark.fleet
def test_postgres_migrations(postgres_url: str) -> None:
    engine = create_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))  # every table, whatever revision left them
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()
    _exercise(postgres_url)
