"""One webhook POST: to the address the guard checked (pinned, with the URL's host in `Host` and in TLS's SNI and
certificate check), no redirect followed, `ATTEMPT_TIMEOUT_S` for the whole of it."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from typing import Any

import urllib3

from sitedispatch.domain.webhooks import ATTEMPT_TIMEOUT_S, RESPONSE_KEPT_CHARS, AttemptResult
from sitedispatch.webhooks.destination import (
    DestinationRefused,
    Resolver,
    checked_address,
    parse,
    system_resolver,
)


def retry_after(value: str | None, now: float) -> float | None:
    """A Retry-After header's wait in seconds (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


class HttpSender:
    def __init__(
        self,
        allow_loopback: bool = False,
        resolve: Resolver = system_resolver,
        timeout_s: float = ATTEMPT_TIMEOUT_S,
    ) -> None:
        self.allow_loopback = allow_loopback
        self.resolve = resolve
        self.timeout_s = timeout_s

    def send(self, url: str, headers: Mapping[str, str], body: bytes) -> AttemptResult:
        started = time.monotonic()
        try:
            destination = parse(url, self.allow_loopback)
            address = checked_address(destination, self.allow_loopback, self.resolve)
        except DestinationRefused as exc:
            return AttemptResult(None, time.monotonic() - started, error=f"refused: {exc}")
        pool = self._pool(destination.scheme, address, destination.port, destination.host)
        try:
            response = pool.urlopen(
                "POST",
                destination.target,
                body=body,
                headers={**headers, "host": destination.host_header},
                redirect=False,
                retries=False,
                preload_content=False,
                assert_same_host=False,
            )
            try:
                answer = response.read(RESPONSE_KEPT_CHARS * 4, decode_content=False)
            finally:
                response.release_conn()
            return AttemptResult(
                response.status,
                time.monotonic() - started,
                response=answer.decode("utf-8", "replace")[:RESPONSE_KEPT_CHARS],
                retry_after_s=retry_after(response.headers.get("retry-after"), time.time()),
            )
        except urllib3.exceptions.HTTPError as exc:
            return AttemptResult(None, time.monotonic() - started, error=_described(exc))
        finally:
            pool.close()

    def _pool(self, scheme: str, address: str, port: int, host: str) -> Any:
        timeout = urllib3.Timeout(total=self.timeout_s)
        if scheme == "https":
            from botocore.httpsession import get_cert_path

            return urllib3.HTTPSConnectionPool(
                address,
                port,
                timeout=timeout,
                maxsize=1,
                cert_reqs="CERT_REQUIRED",
                ca_certs=get_cert_path(True),
                server_hostname=host,
                assert_hostname=host,
            )
        return urllib3.HTTPConnectionPool(address, port, timeout=timeout, maxsize=1)


def _described(exc: Exception) -> str:
    reason = getattr(exc, "reason", None) or exc
    return f"{type(reason).__name__}: {reason}"[:RESPONSE_KEPT_CHARS]
