"""Site drivers: the port through which the operation kinds reach a site's content, whoever holds it.

- `reference`: the built-in content store (sites that live entirely in this system);
- `wordpress`: a real WordPress over HTTP(S) (REST with an application password, crawl for publication, wp-cron.php).

Both share the leases, commits, revisions, receipts and promotion; only how content is changed and rendered differs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import PermanentError
from ..model import REFERENCE_DRIVER, Site

if TYPE_CHECKING:
    from ..context import HandlerContext
    from ..handlers import Mutation
    from ..ports import BlobStore
    from ..publication.sources import RouteSource

class SiteDriver(Protocol):
    """What each kind needs from a site. Called with the site's lease held; writes carry the lease's fence."""

    def provision(self, ctx: HandlerContext, payload: Any) -> Mutation: ...

    def import_wxr(self, ctx: HandlerContext, payload: Any) -> Mutation: ...

    def publish(self, ctx: HandlerContext, payload: Any) -> Mutation: ...

    def wp_cron(self, ctx: HandlerContext, payload: Any) -> Mutation: ...

    def recover(self, ctx: HandlerContext, payload: Any) -> Mutation: ...

    def route_source(self, blobs: BlobStore, site: Site, revision_id: str) -> RouteSource:
        """The routes of a stored revision and how to produce each one's bytes (publication)."""


class DriverRegistry(Mapping[str, "SiteDriver"]):
    """Drivers by name, each built on first use: a fleet of reference sites never loads the WordPress client (35 ms
    of a cold start)."""

    def __init__(self, factories: dict[str, Callable[[], SiteDriver]]) -> None:
        self._factories = factories
        self._built: dict[str, SiteDriver] = {}

    def __getitem__(self, name: str) -> SiteDriver:
        if name not in self._built:
            self._built[name] = self._factories[name]()  # KeyError for a name this deployment does not have
        return self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._factories)

    def __len__(self) -> int:
        return len(self._factories)


def driver_for(drivers: Mapping[str, SiteDriver], site: Site) -> SiteDriver:
    try:
        return drivers[site.driver]
    except KeyError:
        raise PermanentError(f"site {site.site_id} names driver {site.driver!r}, which this deployment does not "
                             f"have (drivers: {', '.join(sorted(drivers))})", code="unknown_driver") from None


def reference_only() -> dict[str, SiteDriver]:
    from .reference import ReferenceDriver

    return {REFERENCE_DRIVER: ReferenceDriver()}
