"""Which routes a reference revision publishes: a pure function of the manifest (permalinks, archives, pages)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

from sitedispatch.drivers.reference.content import Manifest, PostRef, Term
from sitedispatch.publication.routes import CATEGORY, FEED, HOME, SINGLE, SITEMAP, TAG, Route

TAXONOMY_BASE = {"category": "category", "post_tag": "tag"}


@dataclass
class SiteIndex:
    """Everything listing routes need, derived once per manifest: visible posts, permalinks, term memberships."""

    manifest: Manifest
    permalinks: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        reserved = {"/", "/feed/", "/sitemap.xml"}
        for post in [*self.posts, *self.pages]:
            path = self._permalink(post)
            if path in reserved or path.startswith(("/page/", "/category/", "/tag/")):
                path = path.rstrip("/") + f"-{post.id}/"  # never shadow a listing route
            reserved.add(path)
            self.permalinks[post.id] = path

    @cached_property
    def posts(self) -> list[PostRef]:
        visible = [p for p in self.manifest.posts if p.type == "post" and p.status == "publish"]
        return sorted(visible, key=lambda p: (p.date_gmt, p.id), reverse=True)

    @cached_property
    def pages(self) -> list[PostRef]:
        return sorted(
            (p for p in self.manifest.posts if p.type == "page" and p.status == "publish"),
            key=lambda p: (p.menu_order, p.id),
        )

    @cached_property
    def home_order(self) -> list[PostRef]:
        return [p for p in self.posts if p.sticky] + [p for p in self.posts if not p.sticky]

    @cached_property
    def by_id(self) -> dict[int, PostRef]:
        return {p.id: p for p in self.manifest.posts}

    @cached_property
    def terms(self) -> dict[int, Term]:
        return {t.id: t for t in self.manifest.terms}

    @cached_property
    def term_posts(self) -> dict[int, list[PostRef]]:
        members: dict[int, list[PostRef]] = {}
        for post in self.posts:
            for term_id in post.term_ids:
                members.setdefault(term_id, []).append(post)
        return members

    def term_path(self, term: Term, page: int = 1) -> str:
        base = f"/{TAXONOMY_BASE[term.taxonomy]}/{term.slug}/"
        return base if page == 1 else f"{base}page/{page}/"

    @property
    def per_page(self) -> int:
        return max(1, self.manifest.settings.posts_per_page)

    def page_count(self, n: int) -> int:
        return max(1, math.ceil(n / self.per_page))

    def _permalink(self, post: PostRef) -> str:
        if post.type == "page":
            chain, seen, parent = [post.slug], {post.id}, post.parent
            while parent and parent in self.by_id and parent not in seen:
                seen.add(parent)
                chain.insert(0, self.by_id[parent].slug)
                parent = self.by_id[parent].parent
            return "/" + "/".join(chain) + "/"
        date = post.date_gmt
        first_term = next(
            (self.terms[t].slug for t in post.term_ids if t in self.terms and self.terms[t].taxonomy == "category"),
            "uncategorized",
        )
        author = next((a.login for a in self.manifest.authors if a.id == post.author_id), "admin")
        path = self.manifest.settings.permalink_structure
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
            ("%author%", author),
        ):
            path = path.replace(token, value)
        return "/" + path.strip("/") + "/"

    def routes(self) -> list[Route]:
        """Every route of the revision, sorted by path (the order chunks are cut in)."""
        routes = [Route("/", HOME), Route("/feed/", FEED), Route("/sitemap.xml", SITEMAP)]
        routes += [Route(f"/page/{n}/", HOME, page=n) for n in range(2, self.page_count(len(self.posts)) + 1)]
        routes += [Route(self.permalinks[p.id], SINGLE, ref=p.id) for p in [*self.posts, *self.pages]]
        for term_id, members in self.term_posts.items():
            term = self.terms.get(term_id)
            if term is None:
                continue
            for n in range(1, self.page_count(len(members)) + 1):
                routes.append(
                    Route(
                        self.term_path(term, n), CATEGORY if term.taxonomy == "category" else TAG, ref=term_id, page=n
                    )
                )
        return sorted(routes, key=lambda r: r.path)
