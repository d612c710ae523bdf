"""Request bodies handed from httptools to the application without uvicorn's two copies.

uvicorn appends every body piece httptools parses to a ``bytearray`` and ``receive()`` returns
``bytes(that)``: two copies of every uploaded byte on the event loop, each costing about as much
CPU as the body's CRC32. Here a piece that arrives while nothing is buffered is kept as the
``bytes`` httptools made, which ``bytes()`` returns as is; only pieces that arrive before the
application asked for the previous one are joined as before. Flow control is uvicorn's.
"""

from __future__ import annotations

from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class BodyPassProtocol(HttpToolsProtocol):
    """HttpToolsProtocol whose request body pieces reach ``receive()`` uncopied when they can."""

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if (self.parser.should_upgrade() and self._should_upgrade()) or cycle.response_complete:
            return
        if not cycle.body:
            cycle.body = body  # type: ignore[assignment]  # uvicorn types it bytearray; bytes avoids a copy (bytes(bytes) is the same object)
        elif isinstance(cycle.body, bytearray):
            cycle.body += body
        else:
            cycle.body = bytearray(cycle.body) + body
        if len(cycle.body) > HIGH_WATER_LIMIT:
            self.flow.pause_reading()
        cycle.message_event.set()
