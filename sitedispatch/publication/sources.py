"""Where a publication's routes and their bytes come from: the port the publication worker renders through.

A source lists a revision's routes (the same list for every chunk of a publication, whichever worker asks) and
produces one route's bytes. The worker stores them immutably under the revision and describes in the receipt the
bytes that are stored, so a source that is not deterministic (a crawl) still yields a receipt that matches.
"""

from __future__ import annotations

from typing import Protocol

from sitedispatch.publication.routes import Route


class RouteSource(Protocol):
    # True for a source that is not deterministic (a crawl): a route already stored under the revision is kept and
    # not produced again (a crawled revision is what the origin served when it was first taken; producing it again
    # would serve today's origin under its name), and after a lost race the stored bytes are what the receipt names.
    reuses_stored: bool

    def routes(self) -> list[Route]:
        """Every route of the revision, sorted by path (the order chunks are cut in)."""

    def render(self, route: Route) -> bytes:
        """The route's bytes. Raises TransientError when they cannot be had now."""
