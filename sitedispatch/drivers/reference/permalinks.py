"""Which routes a reference revision publishes and what each listing shows: a pure function of the revision.

The renderer asks a `SiteView`. `SiteIndex` answers for a revision in one document, from memory; a site in pages
is answered by `plan.PagedView`, from a route plan stored beside the revision and the pages a route shows. Both
derive permalinks with `Permalinks` and `claim`, so the same content gives the same paths either way.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

from sitedispatch.drivers.reference.content import Manifest, PostRef, Term
from sitedispatch.publication.routes import CATEGORY, FEED, HOME, SINGLE, SITEMAP, TAG, Route

TAXONOMY_BASE = {"category": "category", "post_tag": "tag"}
RESERVED = frozenset({"/", "/feed/", "/sitemap.xml"})  # listing routes no permalink may shadow
LISTING_PREFIXES = ("/page/", "/category/", "/tag/")
FEED_ITEMS = 10
HOME_LISTING = 0  # the listing id of the home page (a term's listing is its term id)
SITEMAP_TEMPLATE = "sitemap.xml"
SITEMAP_INDEX_TEMPLATE = "sitemap-index.xml"


def is_listed_post(post: PostRef) -> bool:
    return post.type == "post" and post.status == "publish"


def is_listed_page(post: PostRef) -> bool:
    return post.type == "page" and post.status == "publish"


def newest_first(posts: list[PostRef]) -> list[PostRef]:
    return sorted(posts, key=lambda p: (p.date_gmt, p.id), reverse=True)


def home_order(posts_newest_first: list[PostRef]) -> list[PostRef]:
    """The home listing: sticky posts first, each part newest first."""
    return [p for p in posts_newest_first if p.sticky] + [p for p in posts_newest_first if not p.sticky]


def term_path(term: Term, page: int = 1) -> str:
    base = f"/{TAXONOMY_BASE[term.taxonomy]}/{term.slug}/"
    return base if page == 1 else f"{base}page/{page}/"


def home_path(page: int) -> str:
    return "/" if page == 1 else f"/page/{page}/"


def page_count(n: int, per_page: int) -> int:
    return max(1, math.ceil(n / per_page))


def listing_route(term: Term | None, page: int) -> Route:
    """Page `page` of the home listing (term None) or of a term's archive."""
    if term is None:
        return Route(home_path(page), HOME, page=page)
    return Route(term_path(term, page), CATEGORY if term.taxonomy == "category" else TAG, ref=term.id, page=page)


def suffixed(path: str, post_id: int) -> str:
    return path.rstrip("/") + f"-{post_id}/"


def claim(path: str, post_id: int, reserved: set[str]) -> str:
    """The path a post is published under: its permalink, unless taken (by a listing route or a post claimed
    before it: newest posts first, then pages) or under a listing prefix; then the permalink suffixed with its id
    (again, while that is taken)."""
    if path.startswith(LISTING_PREFIXES):
        path = suffixed(path, post_id)
    while path in reserved:
        path = suffixed(path, post_id)
    reserved.add(path)
    return path


class Permalinks:
    """A post's permalink from the site's permalink structure (its date, slug, id, first category, author); a
    page's from its chain of parents."""

    def __init__(self, frame: Manifest) -> None:
        self.structure = frame.settings.permalink_structure
        self.categories = {t.id: t.slug for t in frame.terms if t.taxonomy == "category"}
        self.authors = {a.id: a.login for a in reversed(frame.authors)}  # the first of an id, as `next` finds it

    def post(self, post: PostRef) -> str:
        date = post.date_gmt
        first_term = next((self.categories[t] for t in post.term_ids if t in self.categories), "uncategorized")
        path = self.structure
        for token, value in (
            ("%year%", date[0:4]),
            ("%monthnum%", date[5:7]),
            ("%day%", date[8:10]),
            ("%hour%", date[11:13]),
            ("%minute%", date[14:16]),
            ("%second%", date[17:19]),
            ("%postname%", post.slug),
            ("%post_id%", str(post.id)),
            ("%category%", first_term),
            ("%author%", self.authors.get(post.author_id, "admin")),
        ):
            path = path.replace(token, value)
        return "/" + path.strip("/") + "/"

    @staticmethod
    def page(post: PostRef, parent_of: Callable[[int], tuple[str, int] | None]) -> str:
        """`parent_of(id)` is (slug, parent id) of any post, None for an id that is no post."""
        chain, seen, parent = [post.slug], {post.id}, post.parent
        while parent and parent not in seen and (found := parent_of(parent)) is not None:
            seen.add(parent)
            chain.insert(0, found[0])
            parent = found[1]
        return "/" + "/".join(chain) + "/"


class SiteView(Protocol):
    """What the renderer reads of one revision."""

    terms: dict[int, Term]
    per_page: int
    nav: list[dict[str, str]]

    def permalink(self, post: PostRef) -> str: ...

    def post(self, post_id: int) -> PostRef: ...

    def listing(self, listing: int, page: int) -> tuple[list[PostRef], int]:
        """The posts page `page` of a listing shows (HOME_LISTING or a term id) and the listing's page count."""

    def feed(self) -> list[PostRef]:
        """The newest posts, newest first (the feed's items)."""

    def sitemap(self, route: Route) -> tuple[str, list[dict[str, str]]]:
        """The template and entries of a sitemap route."""


class SiteIndex:
    """A revision in one document: every listing, permalink and route derived once, in memory."""

    def __init__(self, manifest: Manifest) -> None:
        self.manifest = manifest
        self.terms = {t.id: t for t in manifest.terms}
        self.per_page = max(1, manifest.settings.posts_per_page)
        self.by_id = {p.id: p for p in manifest.posts}
        self.posts = newest_first([p for p in manifest.posts if is_listed_post(p)])
        self.pages = sorted((p for p in manifest.posts if is_listed_page(p)), key=lambda p: (p.menu_order, p.id))
        self.home_order = home_order(self.posts)
        self.term_posts: dict[int, list[PostRef]] = {}
        for post in self.posts:
            for term_id in post.term_ids:
                self.term_posts.setdefault(term_id, []).append(post)
        links, reserved = Permalinks(manifest), set(RESERVED)
        self.permalinks = {p.id: claim(links.post(p), p.id, reserved) for p in self.posts}
        for page in self.pages:
            self.permalinks[page.id] = claim(links.page(page, self._parent_of), page.id, reserved)
        self.nav = [{"title": p.title, "path": self.permalinks[p.id]} for p in self.pages if p.parent == 0]

    def _parent_of(self, post_id: int) -> tuple[str, int] | None:
        post = self.by_id.get(post_id)
        return None if post is None else (post.slug, post.parent)

    def permalink(self, post: PostRef) -> str:
        return self.permalinks[post.id]

    def post(self, post_id: int) -> PostRef:
        return self.by_id[post_id]

    def listing(self, listing: int, page: int) -> tuple[list[PostRef], int]:
        members = self.home_order if listing == HOME_LISTING else self.term_posts.get(listing, [])
        per = self.per_page
        return members[(page - 1) * per : page * per], page_count(len(members), per)

    def feed(self) -> list[PostRef]:
        return self.posts

    def sitemap(self, route: Route) -> tuple[str, list[dict[str, str]]]:
        entries = [{"path": "/", "lastmod": self.posts[0].modified_gmt[:10] if self.posts else ""}]
        entries += [
            {"path": self.permalinks[p.id], "lastmod": p.modified_gmt[:10]}
            for p in sorted([*self.posts, *self.pages], key=lambda p: p.id)
        ]
        return SITEMAP_TEMPLATE, entries

    def routes(self) -> list[Route]:
        """Every route of the revision, sorted by path (the order chunks are cut in)."""
        routes = [Route("/feed/", FEED), Route("/sitemap.xml", SITEMAP)]
        routes += [listing_route(None, n) for n in range(1, page_count(len(self.home_order), self.per_page) + 1)]
        routes += [Route(self.permalinks[p.id], SINGLE, ref=p.id) for p in [*self.posts, *self.pages]]
        for term_id, members in self.term_posts.items():
            term = self.terms.get(term_id)
            if term is not None:
                routes += [listing_route(term, n) for n in range(1, page_count(len(members), self.per_page) + 1)]
        return sorted(routes, key=lambda r: r.path)
