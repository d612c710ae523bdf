"""Run Alembic migrations programmatically (``ferry db upgrade`` and start-up).

On PostgreSQL an advisory lock serialises nodes that start together, so only one migrates.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text

from app.adapters.catalog.engine import make_engine

MIGRATIONS_DIR = Path(__file__).resolve().parents[3] / "migrations"
_LOCK_ID = 0x46455252  # "FERR"


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    cfg = alembic_config(url)
    engine = make_engine(url, pool_size=1)
    try:
        with engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_lock(:id)"), {"id": _LOCK_ID})
                conn.commit()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
            conn.commit()
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_unlock(:id)"), {"id": _LOCK_ID})
                conn.commit()
    finally:
        engine.dispose()


def current_heads(url: str) -> set[str]:
    engine = make_engine(url, pool_size=1)
    try:
        with engine.connect() as conn:
            return set(MigrationContext.configure(conn).get_current_heads())
    finally:
        engine.dispose()
