"""A throwaway PostgreSQL database: created empty, dropped (with its connections) afterwards."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def throwaway_database(server_url: str, prefix: str) -> Iterator[str]:
    """Yields the URL of a new database ``<prefix>_<random>`` on the server of ``server_url``."""
    import psycopg
    from sqlalchemy.engine import make_url

    u = make_url(server_url)
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"

    def connect() -> Any:
        return psycopg.connect(host=u.host or "127.0.0.1", port=u.port or 5432, user=u.username or "postgres",
                               password=u.password, dbname="postgres", autocommit=True, connect_timeout=5)

    with connect() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield u.set(database=name).render_as_string(hide_password=False)
    finally:
        with connect() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
