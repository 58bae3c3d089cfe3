"""A WordPress revision's routes, crawled from the origin: home, the feed, wp-sitemap.xml and every URL its
sitemaps list. The route list is discovered once per revision and stored with it (the first plan stored wins), so
every chunk of every delivery renders the same list; each route is fetched as a visitor sees it."""

from __future__ import annotations

import json

from defusedxml import ElementTree

from sitedispatch.domain.errors import NotFound, TransientError
from sitedispatch.domain.ports import BlobStore
from sitedispatch.drivers.wordpress.origin import WordPressOrigin
from sitedispatch.publication.live import canonical, revision_prefix
from sitedispatch.publication.routes import FEED, SINGLE, SITEMAP, Route
from sitedispatch.publication.sources import ListedRoutes

SITEMAP_INDEX = "/wp-sitemap.xml"
ALWAYS = ("/", "/feed/", SITEMAP_INDEX)
SITEMAP_NS = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
MAX_ROUTES = 50_000


def crawl_plan_key(site_id: str, revision_id: str) -> str:
    return f"{revision_prefix(site_id, revision_id)}_crawl.json"


def route_for(path: str) -> Route:
    template = FEED if path.endswith("/feed/") else SITEMAP if path.endswith(".xml") else SINGLE
    return Route(path, template)


class CrawledRoutes:
    reuses_stored = True

    def __init__(self, origin: WordPressOrigin, blobs: BlobStore, site_id: str, revision_id: str) -> None:
        self.origin = origin
        self.blobs = blobs
        self.key = crawl_plan_key(site_id, revision_id)

    def routes(self) -> list[Route]:
        try:
            paths = json.loads(self.blobs.get(self.key))["routes"]
        except NotFound:
            self.blobs.put_if_absent(self.key, canonical({"routes": self.discover()}))
            paths = json.loads(self.blobs.get(self.key))["routes"]  # whoever stored first decided the list
        return [route_for(path) for path in paths]

    def plan(self, chunk_routes: int) -> ListedRoutes:
        return ListedRoutes(self.routes(), chunk_routes)

    def discover(self) -> list[str]:
        paths = set(ALWAYS)
        for sitemap_url in self._locs(SITEMAP_INDEX):
            sitemap = self.origin.path_of(sitemap_url)
            if sitemap is None:
                continue
            paths.add(sitemap)
            for url in self._locs(sitemap):
                path = self.origin.path_of(url)
                if path is not None and "?" not in path:
                    paths.add(path)
            if len(paths) > MAX_ROUTES:
                raise TransientError(
                    f"{self.origin.base_url} lists more than {MAX_ROUTES} routes", code="too_many_routes"
                )
        return sorted(paths)

    def _locs(self, path: str) -> list[str]:
        """The <loc> URLs of a sitemap index (its sitemaps) or of a sitemap (its pages)."""
        try:
            root = ElementTree.fromstring(self.render(route_for(path)))
        except ElementTree.ParseError as exc:
            raise TransientError(
                f"{self.origin.base_url}{path} is not a sitemap: {exc}", code="sitemap_unreadable"
            ) from None
        return [loc.text.strip() for loc in root.iter(f"{SITEMAP_NS}loc") if loc.text]

    def render(self, route: Route) -> bytes:
        fetched = self.origin.fetch(route.path)
        if fetched.status != 200:
            raise TransientError(
                f"{self.origin.base_url}{route.path}: HTTP {fetched.status}; the publication "
                f"waits (the previous one stays live)",
                code="route_unavailable",
            )
        return fetched.body
