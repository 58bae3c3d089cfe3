"""A webhook receiver on 127.0.0.1 for the demo and the tests: it checks each delivery's signature with the
`standardwebhooks` package's own verifier (not sitedispatch's code), keeps what it received, and answers with the
statuses it is told to (then 204)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from sitedispatch.http_handler import NoDelayHandler


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes
    verified: bool  # its signature checked out against one of the receiver's secrets
    status: int  # what the receiver answered

    @property
    def data(self) -> dict[str, Any]:
        return dict(json.loads(self.body)["data"])


@dataclass
class WebhookReceiver:
    secrets: list[str] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)  # the next answers, in order; then `then`
    then: int = 204
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def verify(self, body: bytes, headers: dict[str, str]) -> bool:
        for secret in self.secrets:
            try:
                Webhook(secret).verify(body, headers)
                return True
            except WebhookVerificationError:
                continue
        return False

    def accepted(self) -> list[Received]:
        with self.lock:
            return [r for r in self.received if 200 <= r.status < 300]

    @contextmanager
    def serving(self, port: int = 0) -> Iterator[str]:
        """Listen on 127.0.0.1 (`port`, or a free one) until the block ends; yields the URL to register."""
        receiver = self

        class Handler(NoDelayHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver.lock:
                    status = receiver.answers.pop(0) if receiver.answers else receiver.then
                    receiver.received.append(Received(headers, body, receiver.verify(body, headers), status))
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/hook"
        finally:
            server.shutdown()
            server.server_close()
            thread.join(5)
