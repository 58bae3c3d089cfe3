"""The base of this package's HTTP servers (the local API gateway, the console, the local webhook receiver)."""

from __future__ import annotations

import socket
from http.server import BaseHTTPRequestHandler


class NoDelayHandler(BaseHTTPRequestHandler):
    """A handler whose replies are not held back: a reply goes out as two writes (head, then body), and with
    Nagle's algorithm the body would wait for the client's delayed ACK of the head (40 ms on Linux)."""

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
