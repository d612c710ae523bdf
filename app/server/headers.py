"""Bounds on what a connection may cost before it is authenticated (uvicorn's httptools has none).

* **Header time**: a client that sends a request line and then a header byte now and then
  (slowloris) would hold a connection for as long as it likes. The timer runs from a connection's
  start, or the end of its previous request, until the request's headers are complete; then the
  connection is closed. Body stalls are the application's (``FERRY_BODY_READ_TIMEOUT``).
* **Header size and count**: httptools buffers a header field until it ends, so one 150 MB header
  costs 150 MB of memory and the event loop's time. Past ``FERRY_HTTP_MAX_HEADER_BYTES`` bytes, or
  ``FERRY_HTTP_MAX_HEADERS`` fields, the request gets S3's ``400 RequestHeaderSectionTooLarge`` and
  the connection is closed (S3's front end answers 400 too).
* **Connections**: past ``limit_concurrency`` open connections a new connection first closes
  connections that hold no running request (idle keep-alive ones, then the oldest still sending
  headers), so idle connections can never starve real clients of file descriptors; if every one
  is busy, the newcomer is answered ``503 SlowDown`` at once and closed. uvicorn's own concurrency
  refusal (plain text) is replaced by the same S3 XML answer.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, cast

import httptools
from prometheus_client import Counter
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from app.s3.xml import error_document
from app.server.bodyflow import BodyPassProtocol

REFUSED = Counter("ferry_http_refused_total", "Connections or requests refused by the server's bounds "
                  "(header_bytes, header_count, bad_request, shed_idle, over_capacity)", ["reason"])
RETRY_AFTER = b"1"


def _bounds() -> tuple[float, int, int]:
    """(header timeout, max header bytes, max header fields) from this worker's settings."""
    from app.config import get_settings

    s = get_settings()
    return s.http_header_timeout, s.http_max_header_bytes, s.http_max_headers


def s3_error_bytes(status: int, reason: str, code: str, message: str,
                   extra: tuple[tuple[bytes, bytes], ...] = ()) -> bytes:
    """A whole HTTP/1.1 answer carrying an S3 error document, closing the connection."""
    body = error_document(code, message, None, uuid.uuid4().hex[:16].upper(), {})
    head = [f"HTTP/1.1 {status} {reason}".encode(), b"Content-Type: application/xml",
            b"Content-Length: " + str(len(body)).encode(), b"Connection: close"]
    head += [name + b": " + value for name, value in extra]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


SLOW_DOWN = ("SlowDown", "Please reduce your request rate: the gateway is at its connection limit.")


async def slow_down(scope: Any, receive: Any, send: Any) -> None:
    """What replaces uvicorn's plain-text 503 past ``limit_concurrency``: S3's 503 SlowDown."""
    REFUSED.labels("over_capacity").inc()
    body = error_document(*SLOW_DOWN, None, uuid.uuid4().hex[:16].upper(), {})
    await send({"type": "http.response.start", "status": 503, "headers": [
        (b"content-type", b"application/xml"), (b"content-length", str(len(body)).encode()),
        (b"retry-after", RETRY_AFTER), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": b"" if scope.get("method") == "HEAD" else body})


class HeaderSectionTooLarge(Exception):
    """Raised from a parser callback: too many header fields."""


class HeaderTimeoutProtocol(BodyPassProtocol):
    """HttpToolsProtocol with header time, size, count and connection bounds (module docstring),
    passing body pieces on uncopied (bodyflow.py)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._header_timer: asyncio.TimerHandle | None = None
        self._header_limit, self._max_header_bytes, self._max_headers = _bounds()
        self._header_bytes = 0
        self._header_count = 0
        self._in_body = False  # headers of the current request complete, its body may follow
        self._refused = False
        self._since = time.monotonic()
        super().connection_made(cast(asyncio.Transport, transport))  # what the event loop passes
        self._arm_header_timer()
        if self.limit_concurrency is not None and len(self.connections) >= self.limit_concurrency:
            self._shed()  # uvicorn refuses every request at the limit: stay below it

    # ---- connection cap ---------------------------------------------------------------------------

    def _holds_no_request(self) -> bool:
        return not self._in_body and (self.cycle is None or self.cycle.response_complete)

    def _shed(self) -> None:
        """Over the cap: close connections that hold no running request, idle ones first, then the
        oldest still sending headers; refuse this one (503 SlowDown) if there are none."""
        excess = len(self.connections) - int(self.limit_concurrency or 0) + 1
        spare = [c for c in self.connections
                 if c is not self and isinstance(c, HeaderTimeoutProtocol) and c._holds_no_request()]
        spare.sort(key=lambda c: (c._header_bytes > 0, c._since))  # idle before half-sent headers
        for victim in spare[:excess]:
            REFUSED.labels("shed_idle").inc()
            victim.transport.close()
            self.connections.discard(victim)  # its connection_lost comes later; count it gone now
        if len(spare) < excess:
            REFUSED.labels("over_capacity").inc()
            self.transport.write(s3_error_bytes(503, "Service Unavailable", *SLOW_DOWN,
                                                extra=((b"Retry-After", RETRY_AFTER),)))
            self.transport.close()

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        if app is service_unavailable:
            app = slow_down
        super()._start_asgi_task(cycle, app)

    # ---- header size and count --------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # refused behind a running request: the rest is dropped
        if not self._in_body:
            self._header_bytes += len(data)
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(400, "Bad Request", "InvalidRequest", "Protocol upgrades are not supported.", "bad_request")
            return
        except httptools.HttpParserError as exc:
            if isinstance(exc.__context__, HeaderSectionTooLarge):
                self._too_large("header_count")
            else:
                self._refuse(400, "Bad Request", "InvalidRequest", "The HTTP request is malformed.", "bad_request")
            return
        if not self._in_body and self._header_bytes > self._max_header_bytes > 0:
            self._too_large("header_bytes")

    def _too_large(self, reason: str) -> None:
        self._refuse(400, "Bad Request", "RequestHeaderSectionTooLarge",
                     "Your request header section exceeds the maximum allowed size.", reason)

    def _refuse(self, status: int, phrase: str, code: str, message: str, reason: str) -> None:
        """Answer an S3 error and close. Behind a request still being answered (bytes pipelined
        after its body), that answer goes out first, then the connection closes."""
        REFUSED.labels(reason).inc()
        self._cancel_header_timer()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.keep_alive = False  # uvicorn closes the connection after this response
            self._refused = True
            return
        self.transport.write(s3_error_bytes(status, phrase, code, message))
        self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_count = 0
        self._arm_header_timer()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self._max_headers > 0:
            raise HeaderSectionTooLarge()
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._cancel_header_timer()
        self._in_body = True
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_body = False
        self._header_bytes = 0
        self._since = time.monotonic()

    # ---- header time ------------------------------------------------------------------------------

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
