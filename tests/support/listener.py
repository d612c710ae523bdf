"""A TCP listener on 127.0.0.1 for tests that script how a remote behaves on the wire (answers
nothing, answers a script, hangs up): the accept loop runs in a daemon thread and hands each
connection to the caller."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable


class Listener:
    def __init__(self, on_connection: Callable[[socket.socket], None], backlog: int = 128) -> None:
        self.on_connection = on_connection
        self.connections = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(backlog)
        self.port: int = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            self.connections += 1
            self.on_connection(conn)

    def close(self) -> None:
        self.sock.close()


def closed_port() -> int:
    """A port nothing listens on: bound for a moment, then closed, so connections are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
