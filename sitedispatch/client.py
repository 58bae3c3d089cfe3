"""A client of the sitedispatch HTTP API (what the CLI is; a Python producer can use it too).

On AWS every request is signed with SigV4 (service `execute-api`) with the caller's own credentials, found as boto3
finds them; the caller is whoever those credentials are. Against the local runtime the caller names itself in the
`X-Sitedispatch-As` header (the local gateway's stand-in for the signature). Errors come back as the core's own
exceptions, rebuilt from the API's one error body, so a caller handles `Backpressure` or `NotFound` and never HTTP.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote, urlencode, urlsplit

import urllib3

from sitedispatch.domain.errors import Forbidden, Unreachable, error_from_document

if TYPE_CHECKING:
    from sitedispatch.domain.model import Operation

T = TypeVar("T")
IDENTITY_HEADER = "X-Sitedispatch-As"
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
NEXT_CURSOR = re.compile(r'<[^>]*[?&]cursor=([^&>]+)[^>]*>\s*;\s*rel="next"')


def is_local(url: str) -> bool:
    return (urlsplit(url).hostname or "") in LOCAL_HOSTS


@dataclass(frozen=True)
class Reply:
    status: int
    headers: Mapping[str, str]
    body: Any


class SigV4:
    """Signs requests for API Gateway with botocore's signer and the default credential chain."""

    def __init__(self, region: str | None = None) -> None:
        import boto3

        session = boto3.session.Session(region_name=region)
        credentials = session.get_credentials()
        if credentials is None:
            raise Unreachable("no AWS credentials found to sign with: configure them as for the AWS CLI")
        self.credentials = credentials
        self.region = session.region_name or "us-east-1"

    def headers(self, method: str, url: str, body: bytes, headers: dict[str, str]) -> dict[str, str]:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        request = AWSRequest(method=method, url=url, data=body, headers=headers)
        SigV4Auth(self.credentials.get_frozen_credentials(), "execute-api", self.region).add_auth(request)
        return dict(request.headers.items())


class ApiClient:
    def __init__(
        self,
        base_url: str,
        *,
        identity: str | None = None,
        signer: SigV4 | None = None,
        timeout_s: float = 35.0,
        forbidden_hint: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.identity = identity
        self.forbidden_hint = forbidden_hint  # added to a 403's message (how to act as another caller)
        self.signer = signer
        self.http = urllib3.PoolManager(timeout=urllib3.Timeout(connect=5.0, read=timeout_s), retries=False)

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """One call; the reply of any status (errors are not raised)."""
        pairs = [
            (k, _query_value(one))
            for k, v in (query or {}).items()
            if v is not None
            for one in (v if isinstance(v, list | tuple) else [v])
        ]
        url = f"{self.base_url}{path}" + (f"?{urlencode(pairs)}" if pairs else "")
        data = b"" if body is None else json.dumps(body).encode()
        sent = {"Accept": "application/json", **(headers or {})}
        if data:
            sent["Content-Type"] = "application/json"
        if self.identity is not None:
            sent[IDENTITY_HEADER] = self.identity
        if self.signer is not None:
            sent = self.signer.headers(method, url, data, sent)
        try:
            response = self.http.request(method, url, body=data or None, headers=sent)
        except urllib3.exceptions.HTTPError as exc:
            hint = (
                "the local runtime is not running: start it with `sitedispatch local up` (or `make demo`) here"
                if is_local(self.base_url)
                else _reason(exc)
            )
            raise Unreachable(f"nothing answers at {self.base_url}: {hint}") from None
        text = response.data.decode("utf-8", "replace")
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = {"error": "error", "message": text[:300]}
        return Reply(response.status, dict(response.headers.items()), parsed)

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """One call; its JSON body, or the core's exception the error body stands for."""
        return self._answered(self.request(method, path, **kwargs))

    def _answered(self, reply: Reply) -> Any:
        try:
            return _answered(reply)
        except Forbidden as exc:
            if self.forbidden_hint is None:
                raise
            raise Forbidden(f"{exc} ({self.forbidden_hint})") from None

    def page(self, path: str, query: Mapping[str, Any] | None = None) -> tuple[list[Any], str | None]:
        """One page of a paged listing and the cursor of the next (None: nothing follows), from its Link header."""
        reply = self.request("GET", path, query=query)
        self._answered(reply)
        link = {k.lower(): v for k, v in reply.headers.items()}.get("link", "")
        found = NEXT_CURSOR.search(link)
        return list(reply.body), (unquote(found.group(1)) if found else None)

    def every(self, path: str, query: Mapping[str, Any] | None = None, *, limit: int, pages: int = 100) -> list[Any]:
        """Up to `limit` items of a paged listing, following its next pages (at most `pages` of them)."""
        items: list[Any] = []
        cursor: str | None = None
        for _ in range(pages):
            found, cursor = self.page(path, {**(query or {}), "limit": limit - len(items), "cursor": cursor})
            items += found
            if cursor is None or len(items) >= limit:
                break
        return items[:limit]

    def upload(self, site_id: str, path: Path) -> dict[str, Any]:
        """Stage a file for an import (hash it, ask for an upload, PUT it unless the same file is there): the
        import's params."""
        from sitedispatch.operations.uploads import file_digest

        size, digest = file_digest(path)
        grant = self.call("POST", "/uploads", body={"site_id": site_id, "sha256": digest, "bytes": size})
        if not grant["present"]:
            upload = grant["upload"]
            with path.open("rb") as fh:
                try:
                    response = self.http.request(
                        upload["method"], upload["url"], body=fh, headers=upload["headers"], preload_content=True
                    )
                except urllib3.exceptions.HTTPError as exc:
                    raise Unreachable(f"the upload to S3 failed: {_reason(exc)}") from None
            if response.status >= 300:
                raise Unreachable(f"S3 refused the upload ({response.status}): {response.data[:300]!r}")
        return dict(grant["import_params"])


def _answered(reply: Reply) -> Any:
    """A reply's JSON body, or the core's exception its error body stands for."""
    if reply.status >= 400:
        body = reply.body if isinstance(reply.body, dict) else {}
        if "error" not in body and "message" in body:  # API Gateway's own refusals: {"message": "Forbidden"}
            body = {"error": "", "message": f"API Gateway: {body['message']}"}
        raise error_from_document(body, reply.status)
    return reply.body


def typed(cls: type[T], value: Any) -> T:
    """An API body as the core's dataclass it was serialized from."""
    from pydantic import TypeAdapter

    return TypeAdapter(cls).validate_python(value)


def operation_fields(body: dict[str, Any]) -> dict[str, Any]:
    """An operation's own fields of a body that may carry more (GET /operations/{id} adds the estimate)."""
    from dataclasses import fields

    from sitedispatch.domain.model import Operation

    names = {f.name for f in fields(Operation)}
    return {k: v for k, v in body.items() if k in names}


def operation_of(body: dict[str, Any]) -> Operation:
    from sitedispatch.domain.model import Operation

    return typed(Operation, operation_fields(body))


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(getattr(value, "value", value))


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or exc
    return str(reason).split(": ", 1)[-1][:200]
