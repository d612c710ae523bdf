"""Copies of catalog state refreshed in a thread of their own (app/refresher.py): a request finds
the policy book fresh and never reads the catalog itself while the refresher keeps up; a change
shows within the interval; the thread ends when the process is idle or its owner is gone; the
owner still reads the catalog itself when the refresher is behind."""

from __future__ import annotations

import gc
import threading
import time

from app import refresher as refresher_module
from app.domain.policy import Policy, PolicyRule
from app.refresher import Refresher
from app.services.control.policies import PolicyBook


class Rules:
    """A policy table that records which thread read its version."""

    def __init__(self) -> None:
        self.rules: list[PolicyRule] = []
        self.readers: list[int] = []

    def version(self) -> tuple[int, float]:
        self.readers.append(threading.get_ident())
        return len(self.rules), 0.0

    def list(self) -> list[PolicyRule]:
        return list(self.rules)

    def get(self, rule_id: int) -> PolicyRule | None:
        return None

    def upsert(self, rule: PolicyRule) -> PolicyRule:
        self.rules.append(rule)
        return rule

    def delete(self, rule_id: int) -> bool:
        return False


def test_requests_find_the_rules_fresh_and_see_a_change_within_the_interval() -> None:
    repo = Rules()
    # An interval long enough that a loaded runner does not stall the refresher past it.
    book = PolicyBook(repo, Policy(), refresh_seconds=0.5)
    me = threading.get_ident()
    assert book.for_key("b", "k").mode == Policy().mode and repo.readers == [me]  # the first rules: here
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        book.for_key("b", "k")
        time.sleep(0.01)
    assert repo.readers.count(me) == 1, "a request read the catalog while the refresher kept up"
    assert len(repo.readers) >= 5  # the refresher read it every half interval
    repo.rules.append(PolicyRule(bucket="b", mode="write-through"))  # another node changed a rule
    changed = time.monotonic()
    while book.for_key("b", "k").mode != "write-through":
        assert time.monotonic() - changed < 0.5 + 0.1, "the change did not show within the interval"
        time.sleep(0.005)
    assert repo.readers.count(me) == 1


def test_a_request_reads_the_catalog_itself_when_the_refresher_is_behind() -> None:
    repo = Rules()
    book = PolicyBook(repo, Policy(), refresh_seconds=0.1)
    book.rules()
    book._refresher.period = 10.0  # a refresher that has fallen behind (the catalog slow)
    time.sleep(0.15)
    repo.rules.append(PolicyRule(bucket="b", mode="write-through"))
    assert book.for_key("b", "k").mode == "write-through"  # no older than the interval, still


class Ticking:
    def __init__(self) -> None:
        self.ticks = 0

    def tick(self) -> None:
        self.ticks += 1


def test_the_thread_ends_when_idle_and_when_its_owner_is_gone() -> None:
    owner = Ticking()
    r = Refresher(owner, "tick", 0.01)
    r.used()
    thread = r._thread
    assert thread is not None and thread.is_alive()
    thread.join(timeout=refresher_module.IDLE_PERIODS * 0.01 + 1.0)
    assert not thread.is_alive() and 0 < owner.ticks <= refresher_module.IDLE_PERIODS + 1  # idle: it stopped
    r.used()  # used again: it starts again
    again = r._thread
    assert again is not None and again is not thread and again.is_alive()
    del owner
    gc.collect()
    again.join(timeout=1.0)
    assert not again.is_alive()
