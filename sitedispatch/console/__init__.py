"""The operator console: server-rendered pages over the API, served on 127.0.0.1 (`sitedispatch console`)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sitedispatch.client import ApiClient
from sitedispatch.console.pages import Console
from sitedispatch.console.server import ConsoleServer


def console_server(api: ApiClient, *, port: int = 0, read_only: bool = False, caller: str = "") -> ConsoleServer:
    """A console for `api`'s caller on 127.0.0.1:`port` (0: a free one); `serve_forever` runs it."""
    pages = Console(api, read_only=read_only, caller=caller)
    return ConsoleServer(port, pages.route, pages.error_page)


@contextmanager
def running_console(api: ApiClient, **options: object) -> Iterator[ConsoleServer]:
    """A console serving in a thread of this process until the block ends (tests, the demo)."""
    server = console_server(api, **options)  # type: ignore[arg-type]
    thread = threading.Thread(target=server.serve_forever, name="console", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.wait_idle(timeout_s=10)
        server.server_close()
        thread.join(timeout=5)
