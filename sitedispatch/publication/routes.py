"""A route of a publication and its object key under the revision's prefix, for every driver."""

from __future__ import annotations

from dataclasses import dataclass

# What a route is: the templates of the reference driver, and what a crawl files a route under; it decides the
# object's content type.
SINGLE = "single"
HOME = "home"
CATEGORY = "category"
TAG = "tag"
FEED = "feed"
SITEMAP = "sitemap"
CONTENT_TYPES = {FEED: "application/rss+xml; charset=utf-8", SITEMAP: "application/xml; charset=utf-8"}


@dataclass(frozen=True)
class Route:
    path: str
    template: str
    ref: int = 0  # post id (single) or term id (archives)
    page: int = 1

    @property
    def key(self) -> str:
        return route_key(self.path)

    @property
    def content_type(self) -> str:
        return CONTENT_TYPES.get(self.template, "text/html; charset=utf-8")


def route_key(path: str) -> str:
    """Object key of a route under its revision prefix: "/" -> index.html, "/a/b/" -> a/b/index.html."""
    stripped = path.strip("/")
    if stripped.endswith(".xml"):
        return stripped
    if not stripped:
        return "index.html"
    if stripped == "feed":
        return "feed/index.xml"
    return f"{stripped}/index.html"


def normalise_route(route: str) -> str:
    """What a reader types ("sample-page", "/sample-page", "/") as a route path."""
    route = "/" + route.strip().lstrip("/")
    if not route.endswith((".xml", "/")):
        route += "/"
    return route
