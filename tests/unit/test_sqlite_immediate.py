"""SQLite writing transactions begin with BEGIN IMMEDIATE; reads stay deferred (issue 27).

A check-then-write in one writing transaction is one step against every other writer: two
threads that each read a counter and write it plus one end at 2, where deferred transactions
(pysqlite's default, whose BEGIN comes only before the first write) lose one of them to
"database is locked" (the second reader's snapshot cannot be upgraded to a write).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Engine, text

from app.adapters.catalog.engine import Sessions, make_engine, writer


def _engine(tmp_path: Path) -> Engine:
    engine = make_engine(f"sqlite:///{tmp_path / 'c.db'}")
    with writer(engine).begin() as conn:
        conn.execute(text("CREATE TABLE counter (n INTEGER NOT NULL)"))
        conn.execute(text("INSERT INTO counter VALUES (0)"))
    return engine


def _race(bump: Callable[[threading.Barrier], None]) -> list[BaseException]:
    """Run ``bump`` in two threads that both read before either writes (if they can)."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(2, timeout=10)

    def one() -> None:
        try:
            bump(barrier)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return errors


def test_writing_transactions_serialize_a_check_then_write(tmp_path: Path) -> None:
    engine = _engine(tmp_path)

    def bump(barrier: threading.Barrier) -> None:
        with writer(engine).begin() as conn:
            n = conn.execute(text("SELECT n FROM counter")).scalar_one()
            time.sleep(0.2)  # the other thread waits in BEGIN IMMEDIATE meanwhile
            conn.execute(text("UPDATE counter SET n = :n"), {"n": n + 1})

    assert _race(bump) == []
    with engine.connect() as conn:
        assert conn.execute(text("SELECT n FROM counter")).scalar_one() == 2


def test_orm_writing_sessions_begin_immediate(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    sessions = Sessions(engine)

    def bump(barrier: threading.Barrier) -> None:
        with sessions.begin() as s:
            n = s.execute(text("SELECT n FROM counter")).scalar_one()
            time.sleep(0.2)
            s.execute(text("UPDATE counter SET n = :n"), {"n": n + 1})

    assert _race(bump) == []
    with sessions() as s:
        assert s.execute(text("SELECT n FROM counter")).scalar_one() == 2


def test_a_read_does_not_wait_for_a_writer(tmp_path: Path) -> None:
    """Readers keep WAL's concurrency: a read runs while a writing transaction holds the lock."""
    engine = _engine(tmp_path)
    with writer(engine).begin() as conn:
        conn.execute(text("UPDATE counter SET n = 5"))
        t0 = time.monotonic()
        with engine.connect() as reader:
            assert reader.execute(text("SELECT n FROM counter")).scalar_one() == 0  # the last commit
        assert time.monotonic() - t0 < 1


def test_deferred_transactions_would_lose_one(tmp_path: Path) -> None:
    """The race the option closes, shown on a plain (deferred) transaction of the same engine."""
    engine = _engine(tmp_path)

    def bump(barrier: threading.Barrier) -> None:
        with engine.connect() as conn:
            n = conn.execute(text("SELECT n FROM counter")).scalar_one()
            barrier.wait()  # both have read: their snapshots are taken
            conn.execute(text("UPDATE counter SET n = :n"), {"n": n + 1})
            conn.commit()

    errors = _race(bump)
    with engine.connect() as conn:
        final = conn.execute(text("SELECT n FROM counter")).scalar_one()
    assert final == 1 and len(errors) == 1
    assert "locked" in str(errors[0])


def test_the_option_is_inert_off_sqlite() -> None:
    engine = make_engine("postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    assert writer(engine) is writer(engine)  # one option engine per engine, one pool
    engine.dispose()
