"""kombu's Redis transport, with channels that survive the close of their connection.

Why: when Redis restarts while a late-acked task runs (a destage), Celery closes the broken
connection; kombu first drops the transport's connection info (``transport.client = None``),
then closing the channel tries to give the unacknowledged message back, which builds a new
Redis pool from that info: ``AttributeError: 'NoneType' object has no attribute 'hostname'``
(kombu 5.7, ``Channel._connparams``). Celery ignores only connection errors there, so the
worker died ("Unrecoverable error") and its node's queue went unconsumed. These channels
remember the broker they were opened on, so that restore (and the late ack of the running
task) either works or fails with a connection error, which Celery handles by reconnecting.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kombu.transport import redis

TRANSPORT = f"{__name__}:Transport"


class Channel(redis.Channel):
    def __init__(self, connection: Any, **kwargs: Any) -> None:
        self._opened_on = SimpleNamespace(client=connection.client, default_port=connection.default_port)
        super().__init__(connection, **kwargs)

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        transport = self.connection
        if transport is not None and transport.client is not None:
            return super()._connparams(asynchronous=asynchronous)
        self.connection = self._opened_on  # closed: the broker this channel was opened on
        try:
            return super()._connparams(asynchronous=asynchronous)
        finally:
            self.connection = transport


class Transport(redis.Transport):
    Channel = Channel
