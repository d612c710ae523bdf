"""A catalog database that cannot be reached (PostgreSQL restarting, a network cut) is the
gateway being unavailable for a moment: ``503 ServiceUnavailable`` (with Retry-After), never a
500 InternalError (issue 15: a PostgreSQL restart under load answered PUT, GET, DELETE and
UploadPart with 500). A real refused connection, not a stand-in: nothing listens on the port."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from app.adapters.catalog.engine import make_engine
from app.domain.errors import CatalogUnavailable, S3Error
from tests.support.listener import closed_port


def test_an_unreachable_postgresql_is_service_unavailable() -> None:
    engine = make_engine(f"postgresql+psycopg://postgres@127.0.0.1:{closed_port()}/ferry?connect_timeout=2")
    with pytest.raises(S3Error) as info, engine.connect() as conn:
        conn.execute(text("SELECT 1"))
    assert isinstance(info.value, CatalogUnavailable)
    assert (info.value.code, info.value.status) == ("ServiceUnavailable", 503)
    assert "127.0.0.1" not in info.value.message and "postgres" not in info.value.message  # no address leaks


def test_sqlite_errors_are_left_alone(tmp_path: object) -> None:
    """SQLite's own errors (a syntax error here) are not an outage and keep their type."""
    engine = make_engine("sqlite://")
    with pytest.raises(Exception) as info, engine.connect() as conn:
        conn.execute(text("SELEC 1"))
    assert not isinstance(info.value, S3Error)


@pytest.mark.fleet
def test_a_dropped_pooled_connection_is_replaced_silently(postgres_url: str) -> None:
    """The pool's pre-ping finds a connection the server dropped (a restart) and opens a new one:
    that is no outage, so no 503 (the hook leaves the pre-ping alone)."""
    engine = make_engine(postgres_url, pool_size=1)
    with engine.connect() as conn:
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar()
    with make_engine(postgres_url).connect() as admin:
        admin.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    with engine.connect() as conn:
        assert conn.execute(text("SELECT pg_backend_pid()")).scalar() != pid
    engine.dispose()
