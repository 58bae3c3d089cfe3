"""Where a publication's routes and their bytes come from: the port the publication worker renders through.

A source cuts a revision's routes into a plan of chunks (the same plan for every chunk of a publication, whichever
worker asks) and produces one route's bytes. The worker stores them immutably under the revision and describes in
the receipt the bytes that are stored, so a source that is not deterministic (a crawl) still yields a receipt that
matches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sitedispatch.publication.routes import Route


class RoutePlan(Protocol):
    """A revision's routes in chunks. A chunk's routes are read when it is rendered, so a plan need not hold them."""

    def chunk_count(self) -> int: ...

    def chunk(self, number: int) -> list[Route]:
        """The routes of chunk `number` (0 <= number < chunk_count())."""

    def chunk_size(self, number: int) -> int:
        """How many routes chunk `number` holds (what the fan-in checks a chunk's receipt against)."""


class RouteSource(Protocol):
    # True for a source that is not deterministic (a crawl): a route already stored under the revision is kept and
    # not produced again (a crawled revision is what the origin served when it was first taken; producing it again
    # would serve today's origin under its name), and after a lost race the stored bytes are what the receipt names.
    reuses_stored: bool

    def plan(self, chunk_routes: int) -> RoutePlan:
        """The revision's routes in chunks of about `chunk_routes` (a source of a very large revision may cut
        larger ones: see its own plan)."""

    def render(self, route: Route) -> bytes:
        """The route's bytes. Raises TransientError when they cannot be had now."""


@dataclass(frozen=True)
class ListedRoutes:
    """A plan cut from a whole list of routes held in memory, `size` routes a chunk, in the list's order."""

    routes: list[Route]
    size: int

    def chunk_count(self) -> int:
        return max(1, -(-len(self.routes) // self.size))

    def chunk(self, number: int) -> list[Route]:
        return self.routes[number * self.size : (number + 1) * self.size]

    def chunk_size(self, number: int) -> int:
        return len(self.chunk(number))
