"""A WordPress site over HTTP(S): its REST API (application password) and its public pages (for crawling).

Failures map to the dispatcher's classes: unreachable, timeouts, 429 and 5xx are transient (the attempt is retried);
401/403, a missing mu-plugin and a write WordPress rejects are permanent (dead, with evidence); a 409 from the
mu-plugin is a stale fence (this worker's lease is void: it must not commit). The credential never appears in a
message, a log line or an error.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import urllib3

from sitedispatch.domain.errors import PermanentError, StaleFence, TransientError

MU_PLUGIN = Path(__file__).with_name("mu-plugin") / "sitedispatch.php"  # what a site installs in mu-plugins/
FENCE_HEADER = "X-Sitedispatch-Fence"
STALE_FENCE_CODE = "sitedispatch_stale_fence"
INFO_PATH = "/wp-json/sitedispatch/v1/info"
CRON_PATH = "/sitedispatch/v1/cron"  # under /wp-json
TIMEOUT_S = 30.0
PAGE_SIZE = 100
USER_AGENT = "sitedispatch/1.0 (+https://github.com/sitedispatch)"


@dataclass(frozen=True)
class Credential:
    user: str
    application_password: str

    def __repr__(self) -> str:  # never printed, whatever logs the object
        return f"Credential(user={self.user!r}, application_password=***)"


class WordPressRejected(PermanentError):
    """WordPress refused a request for good (4xx); `detail` is its REST error document."""

    def __init__(self, message: str, code: str, detail: dict[str, Any]) -> None:
        super().__init__(message, code=code)
        self.detail = detail


@dataclass(frozen=True)
class Fetched:
    status: int
    body: bytes
    content_type: str


_POOL: urllib3.PoolManager | None = None


def http_pool() -> urllib3.PoolManager:
    """One connection pool per process, built on first use (no import-time side effects)."""
    global _POOL
    if _POOL is None:
        _POOL = urllib3.PoolManager(maxsize=16, retries=False, timeout=urllib3.Timeout(total=TIMEOUT_S))
    return _POOL


class WordPressOrigin:
    """One site: `base_url` is its home (http://host[:port][/path]). Writes carry `fence` when one is given."""

    def __init__(
        self,
        base_url: str,
        credential: Credential | None,
        fence: int | None = None,
        pool: urllib3.PoolManager | None = None,
    ) -> None:
        """`credential` None: public pages only (a crawl), no REST."""
        self.base_url = base_url.rstrip("/")
        self.fence = fence
        self._auth = (
            ""
            if credential is None
            else "Basic " + base64.b64encode(f"{credential.user}:{credential.application_password}".encode()).decode()
        )
        self.pool = pool or http_pool()
        self.requests = 0

    def __repr__(self) -> str:
        return f"WordPressOrigin({self.base_url!r}, fence={self.fence})"

    # -- REST -------------------------------------------------------------------------------------------------------

    def rest(
        self, method: str, route: str, body: dict[str, Any] | None = None, query: dict[str, Any] | None = None
    ) -> Any:
        """Call /wp-json`route`; the decoded JSON answer."""
        url = f"{self.base_url}/wp-json{route}" + (f"?{urlencode(query)}" if query else "")
        headers = {"Authorization": self._auth, "Accept": "application/json", "User-Agent": USER_AGENT}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if method != "GET" and self.fence is not None:
            headers[FENCE_HEADER] = str(self.fence)
        response = self._request(method, url, headers, json.dumps(body).encode() if body is not None else None)
        self._raise_for(response, f"{method} {route}")
        try:
            return json.loads(response.data or b"null")
        except ValueError:
            raise TransientError(
                f"{method} {route}: WordPress answered {response.status} with no JSON (a PHP error page?)",
                code="wordpress_bad_answer",
            ) from None

    def rest_pages(self, route: str, query: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """Every item of a paginated REST collection."""
        page = 1
        while True:
            items = self.rest("GET", route, query={**(query or {}), "per_page": PAGE_SIZE, "page": page})
            yield from items
            if len(items) < PAGE_SIZE:
                return
            page += 1

    def info(self) -> dict[str, Any]:
        """The mu-plugin's description of the site (version, permalinks, due events, content digest, imports)."""
        try:
            return dict(self.rest("GET", "/sitedispatch/v1/info"))
        except PermanentError as exc:
            if exc.code == "wordpress_not_found":
                raise PermanentError(
                    f"{self.base_url} has no sitedispatch mu-plugin (GET {INFO_PATH} is 404): "
                    "copy sitedispatch.php into wp-content/mu-plugins/",
                    code="mu_plugin_missing",
                ) from None
            raise

    def run_cron(self) -> None:
        """Run WordPress's due events now: the mu-plugin's REST route, authenticated and fenced like a write (never
        wp-cron.php, which authenticates no one)."""
        self.rest("POST", CRON_PATH, {})

    # -- public pages -----------------------------------------------------------------------------------------------

    def fetch(self, path: str) -> Fetched:
        """A public route as a visitor sees it (no credentials: a crawl must never render a logged-in page)."""
        response = self._request("GET", self.base_url + path, {"User-Agent": USER_AGENT}, None, redirect=True)
        return Fetched(response.status, response.data, response.headers.get("Content-Type", ""))

    def path_of(self, url: str) -> str | None:
        """The route path of an absolute URL on this site, or None if it points elsewhere."""
        base = urlsplit(self.base_url)
        parts = urlsplit(url)
        if (parts.scheme, parts.netloc) != (base.scheme, base.netloc) or not parts.path.startswith(base.path):
            return None
        path = parts.path[len(base.path) :] or "/"
        return path + (f"?{parts.query}" if parts.query else "")

    # -- transport --------------------------------------------------------------------------------------------------

    def _request(
        self, method: str, url: str, headers: dict[str, str], body: bytes | None, redirect: bool = False
    ) -> urllib3.BaseHTTPResponse:
        self.requests += 1
        started = time.monotonic()
        try:
            return self.pool.request(method, url, headers=headers, body=body, redirect=redirect)
        except urllib3.exceptions.HTTPError as exc:
            took = time.monotonic() - started
            raise TransientError(
                f"{method} {urlsplit(url).path}: {type(exc).__name__} after {took:.1f}s", code="wordpress_unreachable"
            ) from None

    def _raise_for(self, response: urllib3.BaseHTTPResponse, what: str) -> None:
        status = response.status
        if status < 400:
            return
        detail = _error_detail(response.data)
        if status == 409 and detail.get("code") == STALE_FENCE_CODE:
            raise StaleFence(f"{what}: WordPress refused fence {self.fence}: {detail.get('message', '')}")
        message = f"{what}: HTTP {status} {detail.get('code', '')}: {detail.get('message', '')}".rstrip(": ")
        if status == 429 or status >= 500:
            raise TransientError(message, code="wordpress_unavailable")
        if status in (401, 403):
            raise WordPressRejected(
                message + " (check the site's application password and its user's role)",
                "wordpress_unauthorized",
                detail,
            )
        if status == 404:
            raise WordPressRejected(message, "wordpress_not_found", detail)
        raise WordPressRejected(message, "wordpress_rejected", detail)


def _error_detail(data: bytes) -> dict[str, Any]:
    try:
        detail = json.loads(data)
    except ValueError:
        return {}
    return detail if isinstance(detail, dict) else {}
