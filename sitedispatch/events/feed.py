"""Reading a principal's feed: after a cursor (the last place a reader saw), filtered by type and tenant, as a
bounded long poll.

The cursor is a feed place. Places are given in order by one writer per principal at a time and read consistently,
so every place up to the last one returned exists when it is read: a reader that continues from the returned cursor
skips nothing, whatever writers run at once. A filter only chooses what is returned; the cursor passes the places it
read, so a reader that filters still moves on.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sitedispatch.domain.errors import Forbidden
from sitedispatch.domain.events import EventType, FeedEntry
from sitedispatch.domain.ports import Clock, EventLog
from sitedispatch.operator.access import Caller

MAX_WAIT_S = 20.0  # a long poll well inside API Gateway's 30 s integration timeout
POLL_S = 0.5


@dataclass(frozen=True)
class FeedPage:
    events: list[dict[str, Any]]  # each Event.wire(seq)
    after: int  # the cursor to continue from


@dataclass(frozen=True)
class FeedFilter:
    types: Collection[EventType] = ()
    tenant: str | None = None

    def matches(self, entry: FeedEntry) -> bool:
        return (not self.types or entry.event.type in self.types) and (
            self.tenant is None or entry.event.tenant == self.tenant
        )


class FeedReader:
    def __init__(self, events: EventLog, clock: Clock) -> None:
        self.events = events
        self.clock = clock

    def page(
        self,
        caller: Caller,
        principal: str | None,
        after: int,
        limit: int,
        where: FeedFilter = FeedFilter(),
        wait_s: float = 0.0,
    ) -> FeedPage:
        """Up to `limit` places after `after` that match `where`: at once when there are some (or a full page was
        read), else waiting up to `wait_s` for some. A principal reads its own feed; an operator names whose."""
        owner = self._owner(caller, principal)
        deadline = self.clock.now() + min(wait_s, MAX_WAIT_S)
        while True:
            read = self.events.read(owner, after, limit)
            if read:
                after = read[-1].seq
            matched = [entry.event.wire(entry.seq) for entry in read if where.matches(entry)]
            if matched or len(read) == limit or self.clock.now() >= deadline:
                return FeedPage(matched, after)
            self.clock.sleep(min(POLL_S, max(0.0, deadline - self.clock.now())))

    @staticmethod
    def _owner(caller: Caller, principal: str | None) -> str:
        if principal is None or principal == caller.identity:
            return caller.identity
        if not caller.sees_all:
            raise Forbidden(f"{caller.identity} may only read its own events")
        return principal
