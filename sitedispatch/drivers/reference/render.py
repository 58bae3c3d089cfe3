"""Deterministic rendering with Jinja2: the same revision gives byte-identical route objects."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from sitedispatch.drivers.reference.content import Manifest, PostBody, PostRef
from sitedispatch.drivers.reference.routes import SiteIndex
from sitedispatch.publication.routes import CATEGORY, FEED, HOME, SINGLE, SITEMAP, TAG, Route

FEED_ITEMS = 10


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("sitedispatch.drivers.reference", "templates"),
        autoescape=select_autoescape(["html", "xml"]),
        keep_trailing_newline=True,
    )
    env.filters["cdata"] = lambda text: str(text).replace("]]>", "]]]]><![CDATA[>")
    return env


def rfc822(gmt: str) -> str:
    return datetime.strptime(gmt, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).strftime("%a, %d %b %Y %H:%M:%S +0000")


class Renderer:
    """Renders routes of one revision. `load_body` fetches a post body by digest (only single views and the feed
    need bodies)."""

    def __init__(self, manifest: Manifest, load_body: Callable[[str], PostBody]) -> None:
        self.index = SiteIndex(manifest)
        self.manifest = manifest
        self.load_body = load_body
        base = manifest.settings.url.rstrip("/")
        self.common: dict[str, Any] = {
            "site": manifest,
            "url": lambda path: base + path,
            "rfc822": rfc822,
            "nav": [{"title": p.title, "path": self.index.permalinks[p.id]} for p in self.index.pages if p.parent == 0],
        }

    def render(self, route: Route) -> bytes:
        return getattr(self, f"_{route.template}")(route).encode()

    def _entries(self, posts: list[PostRef], with_body: bool = False) -> list[dict[str, Any]]:
        return [
            {"post": p, "path": self.index.permalinks[p.id], "body": self.load_body(p.body) if with_body else None}
            for p in posts
        ]

    def _listing(
        self, route: Route, posts: list[PostRef], heading: str, body_class: str, page_path: Callable[[int], str]
    ) -> str:
        per = self.index.per_page
        window = posts[(route.page - 1) * per : route.page * per]
        return (
            environment()
            .get_template("list.html")
            .render(
                **self.common,
                entries=self._entries(window),
                heading=heading,
                body_class=body_class,
                page=route.page,
                pages=self.index.page_count(len(posts)),
                page_path=page_path,
            )
        )

    def _home(self, route: Route) -> str:
        return self._listing(route, self.index.home_order, "", "home blog", lambda n: "/" if n == 1 else f"/page/{n}/")

    def _archive(self, route: Route) -> str:
        term = self.index.terms[route.ref]
        label = "Category" if term.taxonomy == "category" else "Tag"
        return self._listing(
            route,
            self.index.term_posts.get(term.id, []),
            f"{label}: {term.name}",
            f"archive {term.taxonomy}-{term.slug}",
            lambda n: self.index.term_path(term, n),
        )

    _category = _archive
    _tag = _archive

    def _single(self, route: Route) -> str:
        post = self.index.by_id[route.ref]
        author = next((a for a in self.manifest.authors if a.id == post.author_id), None)
        terms = [
            {"name": self.index.terms[t].name, "path": self.index.term_path(self.index.terms[t])}
            for t in post.term_ids
            if t in self.index.terms
        ]
        return (
            environment()
            .get_template("single.html")
            .render(**self.common, post=post, body=self.load_body(post.body), author=author, terms=terms)
        )

    def _feed(self, route: Route) -> str:
        return (
            environment()
            .get_template("feed.xml")
            .render(**self.common, entries=self._entries(self.index.posts[:FEED_ITEMS], with_body=True))
        )

    def _sitemap(self, route: Route) -> str:
        entries = [{"path": "/", "lastmod": self.index.posts[0].modified_gmt[:10] if self.index.posts else ""}]
        entries += [
            {"path": self.index.permalinks[p.id], "lastmod": p.modified_gmt[:10]}
            for p in sorted([*self.index.posts, *self.index.pages], key=lambda p: p.id)
        ]
        return environment().get_template("sitemap.xml").render(**self.common, entries=entries)


__all__ = ["CATEGORY", "FEED", "HOME", "SINGLE", "SITEMAP", "TAG", "Renderer", "rfc822"]
