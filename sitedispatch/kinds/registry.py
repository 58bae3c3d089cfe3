"""Site drivers by name: a site names its own (`reference`, `wordpress`); each is built on first use."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from sitedispatch.domain.errors import PermanentError
from sitedispatch.domain.model import Site
from sitedispatch.kinds.contract import SiteDriver


class DriverRegistry(Mapping[str, SiteDriver]):
    """Drivers by name, each built on first use: a fleet of reference sites never loads the WordPress client (part of
    a cold start it does not need)."""

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
        raise PermanentError(
            f"site {site.site_id} names driver {site.driver!r}, which this deployment does not "
            f"have (drivers: {', '.join(sorted(drivers))})",
            code="unknown_driver",
        ) from None
