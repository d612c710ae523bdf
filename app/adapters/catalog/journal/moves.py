"""The one writer of a journal row's ``state``.

Every move, single-row compare-and-swap or bulk (lease expiry, the retry button, the operator's
retry), names the states it moves from; each (from, to) is checked against
``domain.states.ALLOWED`` before any SQL runs, so an illegal move raises instead of quietly
rewriting a row. Updates that keep a row in its state (lease renewal, "due now") do not write
``state`` and do not come here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import ColumnElement, Connection, Update, update

from app.adapters.catalog.tables import ObjectVersion
from app.domain.states import TERMINAL, IllegalTransition, VersionState, check_transition


def move_rows(conn: Connection, froms: Iterable[VersionState], to: VersionState,
              *where: ColumnElement[bool], **values: Any) -> int:
    """Move the rows matching ``where`` that are in one of ``froms`` to ``to``; returns how many."""
    return int(conn.execute(prepared_move(froms, to, *where, **values)).rowcount or 0)


def prepared_move(froms: Iterable[VersionState], to: VersionState, *where: ColumnElement[bool],
                  **values: Any) -> Update:
    """``move_rows``'s statement built once, checked once, for a hot path to run with its own
    parameters (``bindparam``): building and keying an expression per call cost a small write's
    destage more CPU than its SQL (bench/analysis.md, "Small PUT destage, round 3")."""
    declared = frozenset(VersionState(f) for f in froms)
    if not declared:
        raise IllegalTransition(f"a move to {to} must declare the states it leaves")
    for current in sorted(declared):
        check_transition(current, to)
    if to in TERMINAL:
        values["inline_body"] = None  # a final row's bytes are the remote's (or a newer row's) now
    return (update(ObjectVersion)
            .where(ObjectVersion.state.in_(sorted(s.value for s in declared)), *where)
            .values(state=to.value, **values).execution_options(synchronize_session=False))
