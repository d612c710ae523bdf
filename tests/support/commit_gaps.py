"""Forcing another transaction's commit into the gap before one statement of the code under test
(a SQLAlchemy ``before_cursor_execute`` hook): the race tests of catalog transactions.

On SQLite a writing transaction holds the database's write lock from its ``BEGIN IMMEDIATE``
(app/adapters/catalog/engine.py), so no other commit can land inside it: the last gap there is
just before that BEGIN, and the hook puts the other commit there (tests/unit/test_sqlite_immediate.py
shows the gap inside is closed). On PostgreSQL the gap is before the statement itself."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy import Engine, event


@contextlib.contextmanager
def other_commit_in_the_gap(engine: Engine, statement_head: str, other: Callable[[], Any]) -> Iterator[list[Any]]:
    """Run ``other`` in a thread just before the first statement starting with ``statement_head``
    (upper case; it commits at once, or waits for the lock the caller holds), or, on SQLite,
    before the first writing transaction of the caller; yields its outcomes."""
    threads: list[threading.Thread] = []
    outcomes: list[Any] = []

    def run() -> None:
        try:
            outcomes.append(other())
        except Exception as exc:
            outcomes.append(exc)

    def hook(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if threads or threading.current_thread().name == "other":
            return
        head = statement.lstrip().upper()
        if head.startswith(statement_head) or head == "BEGIN IMMEDIATE":
            thread = threading.Thread(target=run, name="other")
            threads.append(thread)
            thread.start()
            thread.join(2.0)

    event.listen(engine, "before_cursor_execute", hook)
    try:
        yield outcomes
    finally:
        event.remove(engine, "before_cursor_execute", hook)
        for thread in threads:
            thread.join(30)
    assert threads, f"no {statement_head} statement ran"
