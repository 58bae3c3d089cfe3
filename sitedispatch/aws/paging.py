"""A page of a DynamoDB read (domain/paging.py): at most `reads` rows read, in DynamoDB requests of at most
`request_rows`, stopped at `limit` accepted; the cursor is the key of the last row read (pynamodb rebuilds it when the
read stops mid-page), so the next page's read starts right after it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from sitedispatch.domain.errors import InvalidInput
from sitedispatch.domain.paging import Page, decode_cursor, encode_cursor, take

T = TypeVar("T")
FIRST_ROWS = 10  # rows a search for the first match reads first (then ten times more each request)
PAGE_ROWS = 100  # rows each DynamoDB request of a page reads at most, for a page of at most this many
BULK_PAGE_ROWS = 1000  # ... for a page of more (a redrive's selection): one request where ten would do


def request_rows(limit: int, reads: int) -> int:
    """Rows each DynamoDB request reads for a page of `limit` reading at most `reads`: about what the page needs,
    so a large page is not read in many small requests (each a round trip, and on moto a walk of the table)."""
    return min(reads, max(PAGE_ROWS, min(limit, BULK_PAGE_ROWS)))


def start_key(cursor: str | None, read: str, keys: Mapping[str, str]) -> dict[str, dict[str, str]] | None:
    """A cursor of `read` as DynamoDB's ExclusiveStartKey: exactly the read's key attributes (name -> S or N),
    each a string of its type; anything else is a cursor this API did not give."""
    if cursor is None:
        return None
    position = decode_cursor(cursor, read)
    if set(position) != set(keys) or not all(
        isinstance(value, dict) and set(value) == {kind} and isinstance(value[kind], str) and len(value[kind]) <= 300
        for value, kind in ((position[name], keys[name]) for name in keys)
    ):
        raise InvalidInput("cursor: not one this listing gave (start again without it)", field="cursor")
    return dict(position)


def read_page(
    items: Any, convert: Callable[[Any], T], accept: Callable[[T], bool], limit: int, reads: int, read: str
) -> Page[T]:
    """The page of `items` (a pynamodb query or scan iterator started at the cursor's key)."""
    found, _ = take((convert(item) for item in items), accept, limit, reads)
    following = items.last_evaluated_key
    return Page(found, encode_cursor(read, following) if following else None)
