"""A bound on how long a request's headers may take (uvicorn has none).

Without it a client that sends a request line and then a header byte now and then (slowloris)
holds a connection, and a slot of ``limit_concurrency``, for as long as it likes. The timer runs
from a connection's start, or a request's first byte, until the request's headers are complete;
then the connection is closed. Body stalls are the application's (``FERRY_BODY_READ_TIMEOUT``).
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


def header_timeout() -> float:
    """FERRY_HTTP_HEADER_TIMEOUT, in seconds (0: no bound); each worker reads its settings."""
    from app.config import get_settings

    return get_settings().http_header_timeout


class HeaderTimeoutProtocol(HttpToolsProtocol):
    """HttpToolsProtocol that closes a connection whose request headers do not arrive in time."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        self._header_limit = header_timeout()
        super().connection_made(transport)
        self._arm_header_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_header_timer()

    def on_headers_complete(self) -> None:
        self._cancel_header_timer()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        self._cancel_header_timer()
        if self._header_limit > 0:
            self._header_timer = self.loop.call_later(self._header_limit, self._headers_too_slow)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.cycle is None or self.cycle.response_complete:  # no request of ours is running
            self.transport.close()
