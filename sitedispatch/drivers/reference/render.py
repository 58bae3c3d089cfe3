"""Deterministic rendering with Jinja2: the same revision gives byte-identical route objects."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from sitedispatch.drivers.reference.content import Manifest, PostBody, PostRef
from sitedispatch.drivers.reference.permalinks import FEED_ITEMS, SiteView, home_path, term_path
from sitedispatch.publication.routes import CATEGORY, FEED, HOME, SINGLE, SITEMAP, TAG, Route


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
    """A feed item's date; one not in WordPress's form (an import keeps what the file said) is shown as it is
    rather than failing the publication."""
    try:
        parsed = datetime.strptime(gmt, "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return gmt
    return parsed.replace(tzinfo=UTC).strftime("%a, %d %b %Y %H:%M:%S +0000")


class Renderer:
    """Renders routes of one revision from what its view says. `load_body` fetches a post body by digest (only
    single views and the feed need bodies)."""

    def __init__(self, frame: Manifest, view: SiteView, load_body: Callable[[str], PostBody]) -> None:
        self.view = view
        self.frame = frame
        self.load_body = load_body
        base = frame.settings.url.rstrip("/")
        self.common: dict[str, Any] = {
            "site": frame,
            "url": lambda path: base + path,
            "rfc822": rfc822,
            "nav": view.nav,
        }

    def render(self, route: Route) -> bytes:
        return getattr(self, f"_{route.template}")(route).encode()

    def _entries(self, posts: list[PostRef], with_body: bool = False) -> list[dict[str, Any]]:
        return [
            {"post": p, "path": self.view.permalink(p), "body": self.load_body(p.body) if with_body else None}
            for p in posts
        ]

    def _listing(self, route: Route, heading: str, body_class: str, page_path: Callable[[int], str]) -> str:
        window, pages = self.view.listing(route.ref, route.page)
        return (
            environment()
            .get_template("list.html")
            .render(
                **self.common,
                entries=self._entries(window),
                heading=heading,
                body_class=body_class,
                page=route.page,
                pages=pages,
                page_path=page_path,
            )
        )

    def _home(self, route: Route) -> str:
        return self._listing(route, "", "home blog", home_path)

    def _archive(self, route: Route) -> str:
        term = self.view.terms[route.ref]
        label = "Category" if term.taxonomy == "category" else "Tag"
        return self._listing(
            route, f"{label}: {term.name}", f"archive {term.taxonomy}-{term.slug}", lambda n: term_path(term, n)
        )

    _category = _archive
    _tag = _archive

    def _single(self, route: Route) -> str:
        post = self.view.post(route.ref)
        author = next((a for a in self.frame.authors if a.id == post.author_id), None)
        terms = [
            {"name": self.view.terms[t].name, "path": term_path(self.view.terms[t])}
            for t in post.term_ids
            if t in self.view.terms
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
            .render(**self.common, entries=self._entries(self.view.feed()[:FEED_ITEMS], with_body=True))
        )

    def _sitemap(self, route: Route) -> str:
        template, entries = self.view.sitemap(route)
        return environment().get_template(template).render(**self.common, entries=entries)


__all__ = ["CATEGORY", "FEED", "HOME", "SINGLE", "SITEMAP", "TAG", "Renderer", "rfc822"]
