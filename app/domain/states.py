"""Lifecycle of a journaled write, as an explicit state machine.

    BUFFERED ──claim──▶ DESTAGING ──remote verified──▶ DURABLE
       ▲  │                 │ │
       │  └──newer write────┼─┼──────────────────────▶ SUPERSEDED
       └──retry / lease lost┘ └──attempts exhausted──▶ FAILED ──operator retry──▶ BUFFERED

Workers change a row with a compare-and-swap on (state, generation); ``ALLOWED`` is the only
place that says which moves are legal. Every write of a row's state, bulk moves included, goes
through ``adapters.catalog.journal_moves.move_rows``, which raises ``IllegalTransition`` for any
other move before a statement runs. Staying in a state is not a move: an update that keeps the
state (a lease renewal, "due now") does not write ``state`` at all.
"""

from __future__ import annotations

from enum import StrEnum


class VersionState(StrEnum):
    BUFFERED = "buffered"
    DESTAGING = "destaging"
    DURABLE = "durable"
    SUPERSEDED = "superseded"
    FAILED = "failed"


ALLOWED: dict[VersionState, frozenset[VersionState]] = {
    VersionState.BUFFERED: frozenset({VersionState.DESTAGING, VersionState.SUPERSEDED}),
    VersionState.DESTAGING: frozenset({VersionState.DURABLE, VersionState.BUFFERED, VersionState.FAILED,
                                       VersionState.SUPERSEDED}),
    VersionState.FAILED: frozenset({VersionState.BUFFERED, VersionState.SUPERSEDED}),
    VersionState.DURABLE: frozenset(),
    VersionState.SUPERSEDED: frozenset(),
}

# Not yet on the remote: served locally, counted against the write buffer, never evicted.
DIRTY = (VersionState.BUFFERED, VersionState.DESTAGING, VersionState.FAILED)


# Final: no move leaves them, so compaction may delete such rows without a transition.
TERMINAL = frozenset(s for s, nxt in ALLOWED.items() if not nxt)


class IllegalTransition(ValueError):
    """A move the state table does not allow (a bug in the caller, never a client error)."""


def check_transition(current: VersionState, target: VersionState) -> None:
    if target not in ALLOWED[current]:
        raise IllegalTransition(f"illegal transition {current} -> {target}")


def backoff_seconds(attempt: int, base: float = 1.0, cap: float = 300.0) -> float:
    """Exponential backoff (full jitter is applied by the caller)."""
    return min(cap, base * (2 ** max(0, attempt - 1)))
