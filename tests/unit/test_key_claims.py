"""The per-key claim of conditional writes over a real migrated catalog (SQLite and
PostgreSQL): of many callers racing for one key exactly one wins; a released or run-out claim
is taken again; a released claim keeps the result a retried request is recognised by."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import Engine

from app.adapters.catalog.journal.key_claims import KeyClaims
from app.domain.conditions import PreviousWrite, WriteConditions
from app.domain.errors import S3Error
from tests.support.commit_gaps import other_commit_in_the_gap


def _race(engine: Engine, key: str, callers: int) -> list[str]:
    claims = [KeyClaims(engine, f"node-{i}") for i in range(callers)]
    barrier = threading.Barrier(callers)
    won: list[str] = []

    def take(i: int) -> None:
        barrier.wait()
        if claims[i].claim_key("b", key, f"t{i}", 30.0) is not None:
            won.append(f"t{i}")

    threads = [threading.Thread(target=take, args=(i,)) for i in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return won


def test_exactly_one_of_racing_claims_wins(engine: Engine) -> None:
    for round_ in range(20):
        key = f"k/{round_}"
        assert len(_race(engine, key, 6)) == 1, round_
        KeyClaims(engine).release_key("b", key, _race_winner(engine, key))
        assert len(_race(engine, key, 6)) == 1, round_  # a released row: the update race


def _race_winner(engine: Engine, key: str) -> str:
    from sqlalchemy import text

    with engine.connect() as conn:
        return str(conn.execute(text("SELECT token FROM key_claims WHERE key = :k"), {"k": key}).scalar_one())


def test_released_claim_is_taken_again_and_keeps_the_result(engine: Engine) -> None:
    claims = KeyClaims(engine, "n1")
    assert claims.claim_key("b", "k", "a", 30.0) == PreviousWrite(None, None, 0.0)
    assert claims.claim_key("b", "k", "b", 30.0) is None  # held
    claims.release_key("b", "k", "wrong-token", invocation="inv", etag="e1")  # not ours: no effect
    assert claims.claim_key("b", "k", "b", 30.0) is None
    claims.release_key("b", "k", "a", invocation="inv-1", etag="e1")
    previous = claims.claim_key("b", "k", "b", 30.0)
    assert previous is not None and (previous.invocation, previous.etag) == ("inv-1", "e1")
    claims.release_key("b", "k", "b")  # a failed write keeps the earlier result
    previous = claims.claim_key("b", "k", "c", 30.0)
    assert previous is not None and previous.etag == "e1"
    assert claims.forget_key_claims(time.time() + 1) == 0  # held: never forgotten
    claims.release_key("b", "k", "c", invocation="inv-2", etag="e2")
    assert claims.forget_key_claims(time.time() - 60) == 0  # too recent
    assert claims.forget_key_claims(time.time() + 1) == 1
    assert claims.claim_key("b", "k", "d", 30.0) == PreviousWrite(None, None, 0.0)


def test_run_out_claim_is_taken_over_and_node_restart_releases(engine: Engine) -> None:
    dead = KeyClaims(engine, "dead")
    assert dead.claim_key("b", "k", "a", 0.2) is not None
    assert KeyClaims(engine, "live").claim_key("b", "k", "b", 30.0) is None
    time.sleep(0.3)
    assert KeyClaims(engine, "live").claim_key("b", "k", "b", 30.0) is not None
    assert dead.claim_key("b", "other", "x", 3600.0) is not None
    assert dead.release_key_claims_of_node() == 1  # ``ferry serve`` at start
    assert KeyClaims(engine, "live").claim_key("b", "other", "y", 30.0) is not None


def test_write_conditions_judge_like_s3() -> None:
    none_match = WriteConditions.parse(None, "*")
    none_match.check(None)
    with pytest.raises(S3Error) as err:
        none_match.check("abc")
    assert (err.value.status, err.value.code) == (412, "PreconditionFailed")
    match = WriteConditions.parse('"abc"', None)
    match.check("abc")
    with pytest.raises(S3Error) as err:
        match.check("def")
    assert err.value.code == "PreconditionFailed"
    with pytest.raises(S3Error) as err:
        match.check(None)
    assert (err.value.status, err.value.code) == (404, "NoSuchKey")
    with pytest.raises(S3Error) as err:
        WriteConditions.parse(None, '"abc"')
    assert (err.value.status, err.value.code) == (501, "NotImplemented")
    assert not WriteConditions.parse("", " ").any
    retry = WriteConditions.parse(None, "*", "inv-1")
    assert retry.retried(PreviousWrite("inv-1", "e1", 1.0), "e1", "e1")
    assert not retry.retried(PreviousWrite("inv-2", "e1", 1.0), "e1", "e1")  # another request
    assert not retry.retried(PreviousWrite("inv-1", "e1", 1.0), "e2", "e1")  # overwritten since
    assert not retry.retried(PreviousWrite("inv-1", "e1", 1.0), "e1", "e9")  # another body
    assert not WriteConditions.parse(None, "*").retried(PreviousWrite(None, "e1", 1.0), "e1", "e1")


def test_a_release_committing_while_a_retry_claims_is_seen_by_the_retry(engine: Engine) -> None:
    """A retried conditional write claims the key as the first attempt releases it: the retry
    must read the result that release left (to repeat its success), not the row before it."""
    first, retry = KeyClaims(engine, "node-a"), KeyClaims(engine, "node-b")
    assert first.claim_key("b", "k", "first", 30.0) is not None
    release = lambda: first.release_key("b", "k", "first", invocation="inv-1", etag="etag-1")  # noqa: E731
    with other_commit_in_the_gap(engine, "UPDATE KEY_CLAIMS", release):  # commits now, or waits for the row lock
        previous = retry.claim_key("b", "k", "retry", 30.0)
    assert previous is not None, "the released claim was not taken"
    assert (previous.invocation, previous.etag) == ("inv-1", "etag-1"), "the retry missed the first attempt's result"
