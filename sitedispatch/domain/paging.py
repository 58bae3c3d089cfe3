"""Pages of a listing and their cursors: where the next page's read starts, opaque to callers.

A page is what one bounded read found: up to `limit` matches among at most a budget of rows read, so a page may be
short (or empty) while more follow, as DynamoDB's own pages are; the cursor names the read it belongs to (a
cursor of one listing given to another is refused) and the position after the last row read."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sitedispatch.domain.errors import InvalidInput

T = TypeVar("T")
MAX_CURSOR_CHARS = 2048
CURSOR = r"^[A-Za-z0-9_-]+$"  # base64url without padding


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    cursor: str | None  # None: nothing follows


def encode_cursor(read: str, position: dict[str, Any]) -> str:
    raw = json.dumps({"r": read, "p": position}, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, read: str) -> dict[str, Any]:
    """The position a cursor of `read` names (InvalidInput for anything this API did not give for that read)."""
    refused = InvalidInput("cursor: not one this listing gave (start again without it)", field="cursor")
    if len(cursor) > MAX_CURSOR_CHARS:
        raise refused
    try:
        document = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise refused from None
    if not isinstance(document, dict) or document.get("r") != read or not isinstance(document.get("p"), dict):
        raise refused
    return dict(document["p"])


def take(rows: Iterable[T], accept: Callable[[T], bool], limit: int, reads: int) -> tuple[list[T], T | None]:
    """The rows `accept` takes, up to `limit`, among at most `reads` read in order; and the last row read (where
    the next page starts after)."""
    found: list[T] = []
    last: T | None = None
    for seen, row in enumerate(rows, start=1):
        last = row
        if accept(row):
            found.append(row)
        if len(found) >= limit or seen >= reads:
            break
    return found, last
