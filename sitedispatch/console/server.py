"""`sitedispatch console`: the operator console, a web server on 127.0.0.1 and a client of the API.

It holds no data and no AWS access of its own: every page is what the API answers the console's caller (signed with
the operator's own credentials on AWS, `--as` locally), every action is an API call the server authorizes and
audits, exactly as the CLI's. What it adds is what a browser needs to be safe on a shared machine:

- it listens on 127.0.0.1 only, and answers only a Host naming that address or `localhost` with its port, so a page
  of another site cannot reach it through DNS rebinding;
- the URL it prints carries a fresh random token; the token is exchanged for a session cookie (HttpOnly,
  SameSite=Strict) and never appears again; nothing is served without that cookie;
- every request but a read carries the session's CSRF token and an Origin (or Referer) of the console itself;
- every response has a Content-Security-Policy with no inline script and no other origin, and is not cached; the
  browser never sees an AWS credential (the console signs its API calls itself).
"""

from __future__ import annotations

import hmac
import mimetypes
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.cookies import CookieError, SimpleCookie
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from sitedispatch import observability as obs
from sitedispatch.domain.errors import SiteDispatchError, TooLarge, http_status
from sitedispatch.http_handler import NoDelayHandler

STATIC = Path(__file__).parent / "static"
COOKIE = "sitedispatch_console"
TOKEN_PARAMETER = "token"
MAX_FORM_BYTES = 64 * 1024
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
# A site's page rendered as a preview inside the console: its own styles, no script, no request anywhere.
PREVIEW_CSP = "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'"
SAFE_METHODS = frozenset({"GET", "HEAD"})


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    form: dict[str, str]
    session: Session

    def arg(self, name: str) -> str | None:
        value = self.query.get(name, "").strip()
        return value or None


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def redirect(cls, location: str) -> Response:
        return cls(HTTPStatus.SEE_OTHER, b"", headers={"Location": location})


@dataclass
class Session:
    csrf: str
    flash: list[tuple[str, str]] = field(default_factory=list)  # (level, message) shown once on the next page

    def say(self, level: str, message: str) -> None:
        self.flash.append((level, message))

    def take_flash(self) -> list[tuple[str, str]]:
        shown, self.flash = self.flash, []
        return shown


Handler = Callable[[Request], Response]


class Gate:
    """What a request must show before a page or an action is served: a Host of this console, a session (from the
    printed token), and for an action the session's CSRF token and this console's Origin."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.token = secrets.token_urlsafe(32)
        self.sessions: dict[str, Session] = {}
        self.lock = threading.Lock()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.origin}/?{TOKEN_PARAMETER}={self.token}"

    def host_allowed(self, host: str | None) -> bool:
        return host in {f"127.0.0.1:{self.port}", f"localhost:{self.port}"}

    def origin_allowed(self, origin: str | None, referer: str | None) -> bool:
        allowed = {f"http://127.0.0.1:{self.port}", f"http://localhost:{self.port}"}
        if origin is not None:
            return origin in allowed
        if referer:
            parts = urlsplit(referer)
            return f"{parts.scheme}://{parts.netloc}" in allowed
        return False

    def token_matches(self, offered: str | None) -> bool:
        return offered is not None and hmac.compare_digest(offered.encode(), self.token.encode())

    def open_session(self) -> str:
        session_id = secrets.token_urlsafe(32)
        with self.lock:
            self.sessions[session_id] = Session(csrf=secrets.token_urlsafe(32))
        return session_id

    def session(self, cookie_header: str | None) -> Session | None:
        if not cookie_header:
            return None
        try:
            cookies = SimpleCookie(cookie_header)
        except CookieError:
            return None
        morsel = cookies.get(COOKIE)
        if morsel is None:
            return None
        with self.lock:
            return self.sessions.get(morsel.value)


class ConsoleServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, route: Callable[[Request], Response], render_error: Callable[..., bytes]) -> None:
        super().__init__(("127.0.0.1", port), _ConsoleHandler)
        self.gate = Gate(self.server_address[1])
        self.route = route
        self.render_error = render_error
        self.in_flight = 0
        self.idle = threading.Condition()

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait for the requests being answered to end (after `shutdown`, so that none calls the API later)."""
        with self.idle:
            return self.idle.wait_for(lambda: self.in_flight == 0, timeout=timeout_s)

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _ConsoleHandler(NoDelayHandler):
    server: ConsoleServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # the console prints its URL, not every request
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_HEAD(self) -> None:
        self._serve("HEAD")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, method: str) -> None:
        with self.server.idle:
            self.server.in_flight += 1
        try:
            self._respond(method)
        finally:
            with self.server.idle:
                self.server.in_flight -= 1
                self.server.idle.notify_all()

    def _respond(self, method: str) -> None:
        try:
            response = self._answer(method)
        except SiteDispatchError as exc:
            response = self._error(http_status(exc), str(exc))
        except Exception as exc:  # a page must never show a traceback: one line, and the console goes on
            obs.logger.exception("console page failed", extra={"path": self.path})
            response = self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"the console failed: {type(exc).__name__}")
        self._send(response, head=method == "HEAD")

    def _answer(self, method: str) -> Response:
        gate = self.server.gate
        if not gate.host_allowed(self.headers.get("Host")):
            self.close_connection = True
            return self._error(HTTPStatus.MISDIRECTED_REQUEST, "this console answers only at 127.0.0.1 or localhost")
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        if parts.path.startswith("/static/"):
            return _static(parts.path.removeprefix("/static/"))
        if TOKEN_PARAMETER in query and method in SAFE_METHODS:
            if not gate.token_matches(query.pop(TOKEN_PARAMETER)):
                return self._error(
                    HTTPStatus.FORBIDDEN, "this link's token is not this console's: open the URL it printed"
                )
            session_id = gate.open_session()
            rest = parts.path + (f"?{urlencode(query)}" if query else "")
            cookie = f"{COOKIE}={session_id}; HttpOnly; SameSite=Strict; Path=/"
            return Response(HTTPStatus.SEE_OTHER, b"", headers={"Location": rest, "Set-Cookie": cookie})
        session = gate.session(self.headers.get("Cookie"))
        if session is None:
            self.close_connection = True  # its body (if any) is not read
            return self._error(
                HTTPStatus.UNAUTHORIZED, "no console session: open the URL `sitedispatch console` printed"
            )
        form: dict[str, str] = {}
        if method not in SAFE_METHODS:
            form = self._form()  # read first: a refused request's body must not be read as the next request
            if not gate.origin_allowed(self.headers.get("Origin"), self.headers.get("Referer")):
                return self._error(HTTPStatus.FORBIDDEN, "refused: this form was not sent from this console")
            offered = form.get("csrf") or self.headers.get("X-CSRF-Token") or ""
            if not hmac.compare_digest(offered.encode(), session.csrf.encode()):
                return self._error(HTTPStatus.FORBIDDEN, "refused: the form's CSRF token is missing or stale (reload)")
        return self.server.route(Request(method, parts.path, query, form, session))

    def _form(self) -> dict[str, str]:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_FORM_BYTES:
            self.close_connection = True
            raise TooLarge(f"a form over {MAX_FORM_BYTES} bytes")
        body = self.rfile.read(length).decode("utf-8", "replace")
        return {k: v[-1] for k, v in parse_qs(body, keep_blank_values=True).items()}

    def _error(self, status: int, message: str) -> Response:
        return Response(status, self.server.render_error(status, message))

    def _send(self, response: Response, head: bool = False) -> None:
        self.send_response(response.status)
        headers = {
            "Content-Type": response.content_type,
            "Content-Length": str(len(response.body)),
            "Content-Security-Policy": CSP,
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "same-origin",  # an action's Origin stays this console's (no-referrer would send null)
            "Cross-Origin-Opener-Policy": "same-origin",
            "Cross-Origin-Resource-Policy": "same-origin",
            "Cache-Control": "no-store",
            **response.headers,
        }
        if self.close_connection:
            headers["Connection"] = "close"
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.wfile.write(response.body)


def _static(name: str) -> Response:
    root = STATIC.resolve()
    path = (root / name).resolve()
    if root not in path.parents or not path.is_file():
        return Response(HTTPStatus.NOT_FOUND, b"not found", "text/plain; charset=utf-8")
    kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    if kind.startswith("text/") or kind.endswith("javascript"):
        kind += "; charset=utf-8"
    return Response(HTTPStatus.OK, path.read_bytes(), kind, {"Cache-Control": "max-age=3600"})
