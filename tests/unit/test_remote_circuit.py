"""The remote's attempts and circuit breaker against a real TCP listener that accepts and never
answers (a hung remote), through the real RemoteStore and its lean GET."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import botocore.exceptions
import pytest

from app.adapters.remote import RemoteConfig, RemoteStore
from app.adapters.remote.circuit import CircuitBreaker
from app.domain.errors import S3Error
from tests.support.listener import Listener


class SilentListener:
    """Accepts connections and never answers; counts them."""

    def __init__(self) -> None:
        self.accepted: list[socket.socket] = []
        self.listener = Listener(self.accepted.append)
        self.port = self.listener.port

    def close(self) -> None:
        self.listener.close()
        for conn in self.accepted:
            conn.close()


@pytest.fixture
def silent() -> Iterator[SilentListener]:
    listener = SilentListener()
    yield listener
    listener.close()


def store(port: int, **kw: float) -> RemoteStore:
    return RemoteStore(RemoteConfig(endpoint=f"http://127.0.0.1:{port}", region="us-east-1", access_key="a",
                                    secret_key="b", read_timeout=0.5, connect_timeout=0.5, **kw))  # type: ignore[arg-type]


def test_max_attempts_counts_the_first_attempt(silent: SilentListener) -> None:
    """botocore's retries={'max_attempts': n} means n retries (n + 1 attempts): 3 made 4 x 60 s."""
    remote = store(silent.port, max_attempts=2, circuit_failures=1000)
    started = time.monotonic()
    with pytest.raises(S3Error) as err:
        remote.head_object("b", "k")
    assert err.value.code == "ServiceUnavailable"
    assert len(silent.accepted) == 2, f"{len(silent.accepted)} attempts"
    assert time.monotonic() - started < 3


def test_open_circuit_refuses_without_touching_the_remote_then_probes(silent: SilentListener) -> None:
    remote = store(silent.port, max_attempts=1, circuit_cooldown=1.0)
    with pytest.raises(S3Error):
        remote.head_object("b", "k")
    assert remote.circuit.state == "open"
    tried = len(silent.accepted)
    for call in (lambda: remote.head_object("b", "k"), lambda: remote.lean.get(remote.lean.request_url("b", "k"), {}),
                 lambda: remote.list_objects("b", "", None, None, 10)):
        started = time.monotonic()
        with pytest.raises(S3Error) as err:
            call()
        assert time.monotonic() - started < 0.05
        assert err.value.status == 503 and err.value.headers.get("Retry-After")
    assert len(silent.accepted) == tried, "a refused call reached the remote"
    time.sleep(1.05)
    assert remote.circuit.state == "half-open"
    with pytest.raises(botocore.exceptions.ReadTimeoutError):  # the probe goes through, no answer: open again
        remote.lean.get(remote.lean.request_url("b", "k"), {})
    assert len(silent.accepted) == tried + 1 and remote.circuit.state == "open"


def test_half_open_admits_one_probe_and_an_answer_closes() -> None:
    breaker = CircuitBreaker("test://one-probe", failures=2, cooldown=0.2)
    breaker.record(False)
    assert breaker.state == "closed"  # one failure of two
    breaker.record(False)
    assert breaker.state == "open"
    time.sleep(0.25)
    breaker.before()  # the probe
    with pytest.raises(S3Error):
        breaker.before()  # everyone else waits for it
    breaker.record(True)
    assert breaker.state == "closed"
    breaker.before()


def test_a_lost_probe_is_replaced_after_a_cooldown() -> None:
    breaker = CircuitBreaker("test://lost-probe", failures=1, cooldown=0.2)
    breaker.record(False)
    time.sleep(0.25)
    breaker.before()  # a probe that never reports back
    with pytest.raises(S3Error):
        breaker.before()
    time.sleep(0.25)
    breaker.before()  # replaced
