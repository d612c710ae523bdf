"""The journal enforces ``domain.states.ALLOWED``: exactly the table's moves succeed, on the real
Journal over SQLite; every other (from, to) pair raises before touching the row."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import update

from app.adapters.catalog.engine import make_engine
from app.adapters.catalog.journal.journal import BlobRef, Journal
from app.adapters.catalog.journal.moves import move_rows
from app.adapters.catalog.migrate import upgrade
from app.adapters.catalog.tables import ObjectVersion
from app.domain.states import ALLOWED, TERMINAL, IllegalTransition, VersionState
from app.domain.versions import VersionDraft
from tests.support.journal_rows import append_put

PAIRS = list(itertools.product(VersionState, VersionState))


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    url = f"sqlite:///{tmp_path / 'ferry.db'}"
    upgrade(url)
    engine = make_engine(url)
    yield Journal(engine, "node-a")
    engine.dispose()


def _row_in(journal: Journal, state: VersionState, key: str = "k") -> int:
    row = append_put(journal, VersionDraft("b", key, 1, "e", [BlobRef("0" * 32, 1, "e")], {}, {}, {}, None))
    with journal.sessions.begin() as s:  # test setup: place the row in the state under test
        s.execute(update(ObjectVersion).where(ObjectVersion.seq == row.seq).values(state=state.value))
    return row.seq


@pytest.mark.parametrize(("current", "target"), PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_exactly_the_tables_moves_succeed(journal: Journal, current: VersionState, target: VersionState) -> None:
    row = journal.get(_row_in(journal, current))
    assert row is not None and row.state == current
    if target in ALLOWED[current]:
        assert journal.move(row, target) is True
        after = journal.get(row.seq)
        assert after is not None and after.state == target and after.generation == row.generation + 1
    else:
        with pytest.raises(IllegalTransition):
            journal.move(row, target)
        after = journal.get(row.seq)
        assert after is not None and after.state == current and after.generation == row.generation


@pytest.mark.parametrize(("current", "target"), PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_bulk_moves_are_checked_too(journal: Journal, current: VersionState, target: VersionState) -> None:
    seq = _row_in(journal, current)
    with journal.sessions.begin() as s:
        if target in ALLOWED[current]:
            assert move_rows(s.connection(), [current], target, ObjectVersion.seq == seq) == 1
        else:
            with pytest.raises(IllegalTransition):
                move_rows(s.connection(), [current], target, ObjectVersion.seq == seq)


def test_a_move_must_declare_where_it_comes_from(journal: Journal) -> None:
    with journal.sessions.begin() as s, pytest.raises(IllegalTransition):
        move_rows(s.connection(), [], VersionState.BUFFERED)


def test_superseding_a_final_row_raises(journal: Journal) -> None:
    """It used to take the row's own state as the expected one, so DURABLE -> SUPERSEDED went through."""
    row = journal.get(_row_in(journal, VersionState.DURABLE))
    assert row is not None
    with pytest.raises(IllegalTransition):
        journal.mark_superseded(row)
    after = journal.get(row.seq)
    assert after is not None and after.state == VersionState.DURABLE


def test_named_moves_follow_the_table(journal: Journal) -> None:
    seq = _row_in(journal, VersionState.BUFFERED)
    row = journal.claim(seq, 60.0)
    assert row is not None and row.state == VersionState.DESTAGING
    assert journal.renew(row, 60.0)
    assert journal.mark_retry(row, "boom", 0.0, failed=True)
    assert journal.get(seq).state == VersionState.FAILED  # type: ignore[union-attr]
    assert journal.retry_now(include_failed=True) == 1
    row = journal.claim(seq, -1.0)  # a lease already run out
    assert row is not None
    assert journal.release_expired_leases() == 1
    row = journal.claim(seq, 60.0)
    assert row is not None
    assert journal.mark_durable(row, "e", None)
    assert journal.get(seq).state == VersionState.DURABLE  # type: ignore[union-attr]
    assert journal.mark_retry(row, "late", 0.0, failed=False) is False  # stale generation: CAS loses


def test_retry_now_counts_buffered_and_failed_once(journal: Journal) -> None:
    _row_in(journal, VersionState.BUFFERED, "a")
    failed = _row_in(journal, VersionState.FAILED, "b")
    _row_in(journal, VersionState.DURABLE, "c")
    assert journal.retry_now(include_failed=False) == 1
    assert journal.get(failed).state == VersionState.FAILED  # type: ignore[union-attr]
    assert journal.retry_now(include_failed=True) == 2
    assert journal.get(failed).state == VersionState.BUFFERED  # type: ignore[union-attr]


def test_compaction_deletes_only_final_rows() -> None:
    assert {VersionState.DURABLE, VersionState.SUPERSEDED} == TERMINAL
