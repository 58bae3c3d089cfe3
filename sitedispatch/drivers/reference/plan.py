"""A site in pages, published in bounded memory: its route plan.

A revision in one document is routed from memory (`routes.SiteIndex`). A site in pages is not: its publication
first builds a route plan, reading each page once and keeping per listed post only what ordering needs (its id,
date, stickiness, terms and two 8-byte path hashes: ~60 bytes a post, transiently), and stores it beside the
revision (deterministic, so any worker building it writes the same bytes):

- the chunks: one of the feed and the sitemap index; listing chunks (`PLAN_CHUNK_ROUTES` pages of the home
  listing or of term archives each, with a blob naming the posts those pages show, in order); one chunk per
  content page (the single view of each listed post or page in it, and that page's sitemap `/sitemap-{n}.xml`);
- the feed's posts, the navigation, the paths that are not a post's own permalink (pages, and posts whose
  permalink another claimed first: found by sorting path hashes, then resolved in claim order as SiteIndex does),
  the home's last modification.

A chunk then reads what its routes show: a listing chunk its blob and the pages of the posts it lists, a content
page's chunk that page and its posts' bodies. Chunks are larger than a document's (the count of chunks is what the
publication's fan-in item and queue pay for: 300,000 posts make ~500 chunks, not 13,000).

The sitemap of a site in pages is a sitemap index of per-page sitemaps: a sitemap holds at most 50,000 URLs
(sitemaps.org protocol), which a site of this size exceeds.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import re
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterable
from itertools import pairwise
from typing import Any

from sitedispatch.domain.errors import NotFound
from sitedispatch.drivers.reference import content
from sitedispatch.drivers.reference.content import Manifest, PostRef, Term
from sitedispatch.drivers.reference.permalinks import (
    FEED_ITEMS,
    HOME_LISTING,
    LISTING_PREFIXES,
    RESERVED,
    SITEMAP_INDEX_TEMPLATE,
    SITEMAP_TEMPLATE,
    Permalinks,
    claim,
    is_listed_page,
    is_listed_post,
    listing_route,
    page_count,
    suffixed,
)
from sitedispatch.drivers.reference.store import ContentStore, Page
from sitedispatch.publication.live import canonical
from sitedispatch.publication.routes import FEED, SINGLE, SITEMAP, Route

PLAN_CHUNK_ROUTES = 1024  # listing pages a listing chunk holds (a content page's chunk holds its posts: up to PAGE_IDS)
PAGE_CACHE = 8  # parsed pages a view keeps
HEAD, LISTING, SINGLES = "head", "listing", "singles"
SITEMAP_INDEX = "/sitemap.xml"


def plan_key(site_id: str, revision_id: str) -> str:
    return f"sites/{site_id}/plans/{revision_id}.json"


def listing_key(site_id: str, revision_id: str, chunk: int) -> str:
    return f"sites/{site_id}/plans/{revision_id}/{chunk}.json"


def sitemap_path(page_number: int) -> str:
    return f"/sitemap-{page_number}.xml"


def _path_hash(path: str) -> int:
    return int.from_bytes(hashlib.blake2b(path.encode(), digest_size=8).digest(), "big")


class PageReader:
    """A paged revision's posts by id, through a small cache of parsed pages (shared by a chunk's render threads)."""

    def __init__(self, store: ContentStore, frame: Manifest, size: int = PAGE_CACHE) -> None:
        self.store = store
        self.refs = {ref.number: ref for ref in frame.pages}
        self.size = size
        self.cache: OrderedDict[int, Page] = OrderedDict()
        self.lock = threading.Lock()

    def page(self, number: int) -> Page:
        with self.lock:
            page = self.cache.get(number)
            if page is not None:
                self.cache.move_to_end(number)
                return page
            ref = self.refs.get(number)
            page = {} if ref is None else self.store.page(ref)
            self.cache[number] = page
            while len(self.cache) > self.size:
                self.cache.popitem(last=False)
            return page

    def posts(self, ids: Iterable[int]) -> dict[int, bytes]:
        """The stored bytes of these posts, each page holding any of them read once (and not cached)."""
        wanted: dict[int, set[int]] = {}
        for post_id in ids:
            wanted.setdefault(post_id // content.PAGE_IDS, set()).add(post_id)
        found: dict[int, bytes] = {}
        for number in sorted(wanted):
            ref = self.refs.get(number)
            page = {} if ref is None else self.store.page(ref)
            found.update((i, page[i]) for i in wanted[number] if i in page)
        return found

    def find(self, post_id: int) -> PostRef | None:
        data = self.page(post_id // content.PAGE_IDS).get(post_id)
        return None if data is None else PostRef.model_validate_json(data)

    def post(self, post_id: int) -> PostRef:
        post = self.find(post_id)
        if post is None:
            raise NotFound(f"post {post_id} is in no page of the revision")
        return post


_GMT = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
_DIGITS = str.maketrans("", "", "- :")
HASH_BUCKETS = 8  # duplicate hashes are found an eighth of the hash space at a time


class _Listed:
    """What the build keeps of each listed post while reading the pages: columns, not objects, ~50 bytes a post.
    Dates in WordPress's form are kept as integers (YYYYMMDDhhmmss orders as the string does); the first date in
    another form turns the column into strings, compared as SiteIndex compares them."""

    def __init__(self) -> None:
        self.ids = array("q")
        self.dates: array[int] | list[str] = array("q")
        self.sticky = bytearray()
        self.member_post = array("q")  # (index of a post, a term it is in), one pair per membership
        self.member_term = array("q")
        self.hashes = array("Q")  # per post: its permalink's hash, then the suffixed permalink's
        self.forced: set[int] = set()  # posts whose permalink is reserved or under a listing prefix

    def add(self, post: PostRef, path: str) -> None:
        at = len(self.ids)
        self.ids.append(post.id)
        self._date(post.date_gmt)
        self.sticky.append(post.sticky)
        for term_id in post.term_ids:
            self.member_post.append(at)
            self.member_term.append(term_id)
        self.hashes.append(_path_hash(path))
        self.hashes.append(_path_hash(suffixed(path, post.id)))
        if path in RESERVED or path.startswith(LISTING_PREFIXES):
            self.forced.add(post.id)

    def _date(self, date: str) -> None:
        if isinstance(self.dates, array) and _GMT.fullmatch(date):
            self.dates.append(int(date.translate(_DIGITS)))
            return
        if isinstance(self.dates, array):
            self.dates = [_gmt_of(d) for d in self.dates]
        self.dates.append(date)

    def newest_first(self) -> array[int]:
        """Indices by (date, id) newest first (the pages were read in id order: index order is id order)."""
        if isinstance(self.dates, array):
            keys = sorted((date << 32 | at for at, date in enumerate(self.dates)), reverse=True)
            return array("q", (key & 0xFFFFFFFF for key in keys))
        # a stable sort by date of the indices taken in descending order
        return array("q", sorted(range(len(self.ids) - 1, -1, -1), key=self.dates.__getitem__, reverse=True))


def _gmt_of(key: int) -> str:
    d = f"{key:014d}"
    return f"{d[0:4]}-{d[4:6]}-{d[6:8]} {d[8:10]}:{d[10:12]}:{d[12:14]}"


def _shared(hashes: array[int]) -> set[int]:
    """The hashes that occur more than once, sorted a bucket of the hash space at a time (transient memory: a
    bucket's, not all of them)."""
    shared: set[int] = set()
    for bucket in range(HASH_BUCKETS):
        part = sorted(h for h in hashes if h * HASH_BUCKETS >> 64 == bucket)
        shared.update(a for a, b in pairwise(part) if a == b)
    return shared


def build_plan(store: ContentStore, frame: Manifest) -> tuple[dict[str, Any], list[bytes]]:
    """The plan document of a paged revision and its listing chunks' blobs (chunk k's at index k of the blob list,
    empty bytes for a chunk with none). Reads every page once."""
    links, reader = Permalinks(frame), PageReader(store, frame, size=1)
    listed = _Listed()
    pages: list[PostRef] = []  # listed pages
    page_tree: dict[int, tuple[str, int]] = {}  # every page-type post: slug, parent
    per_content_page: dict[int, int] = {}
    newest: tuple[str, int, str] | None = None
    for ref in frame.pages:
        page = reader.page(ref.number)
        for post_id in sorted(page):
            post = PostRef.model_validate_json(page[post_id])
            if post.type == "page":
                page_tree[post.id] = (post.slug, post.parent)
            if is_listed_post(post):
                listed.add(post, links.post(post))
                if newest is None or (post.date_gmt, post.id) > newest[:2]:
                    newest = (post.date_gmt, post.id, post.modified_gmt)
            elif is_listed_page(post):
                pages.append(post)
            else:
                continue
            per_content_page[ref.number] = per_content_page.get(ref.number, 0) + 1
    reader.size = PAGE_CACHE
    order = listed.newest_first()
    paths = _resolve_paths(listed, order, pages, page_tree, links, reader)
    home = array("q", (listed.ids[i] for i in order if listed.sticky[i]))
    home.extend(listed.ids[i] for i in order if not listed.sticky[i])
    listings: list[tuple[int, array[int]]] = [(HOME_LISTING, home)]
    listings += _term_members(listed, order, {t.id for t in frame.terms})
    del home
    per = max(1, frame.settings.posts_per_page)
    chunks, blobs = _listing_chunks(listings, per)
    chunks.insert(0, {"kind": HEAD, "routes": 2})
    blobs.insert(0, b"")
    for number in sorted(per_content_page):
        chunks.append({"kind": SINGLES, "page": number, "routes": per_content_page[number] + 1})
        blobs.append(b"")
    document = {
        "chunks": chunks,
        "feed": [listed.ids[i] for i in order[:FEED_ITEMS]],
        "nav": [{"title": p.title, "path": paths[p.id]} for p in pages if p.parent == 0],
        "paths": {str(post_id): path for post_id, path in sorted(paths.items())},
        "lastmod": newest[2][:10] if newest else "",
        "sitemaps": sorted(per_content_page),
        "route_count": sum(int(c["routes"]) for c in chunks),
    }
    return document, blobs


def _resolve_paths(
    listed: _Listed,
    order: array[int],
    pages: list[PostRef],
    page_tree: dict[int, tuple[str, int]],
    links: Permalinks,
    reader: PageReader,
) -> dict[int, str]:
    """Each listed page's path, and each listed post's whose path is not its permalink. A post or page is
    contested when its permalink or suffixed permalink shares a hash with any other candidate (or is reserved);
    only those are claimed one by one, in claim order (newest posts first, then pages by menu order), exactly as
    SiteIndex claims everyone: an uncontested path can equal no other's, so it claims itself."""

    def parent_of(post_id: int) -> tuple[str, int] | None:
        if post_id in page_tree:
            return page_tree[post_id]
        post = reader.find(post_id)  # a page's parent that is not a page (rare)
        return None if post is None else (post.slug, post.parent)

    pages.sort(key=lambda p: (p.menu_order, p.id))
    page_paths = [links.page(p, parent_of) for p in pages]
    hashes = array("Q", listed.hashes)
    for page, path in zip(pages, page_paths, strict=True):
        hashes.append(_path_hash(path))
        hashes.append(_path_hash(suffixed(path, page.id)))
    shared = _shared(hashes)
    del hashes
    naturals: dict[int, str] = {}
    while True:
        contested = [
            listed.ids[i]
            for i in order
            if listed.ids[i] in listed.forced or listed.hashes[2 * i] in shared or listed.hashes[2 * i + 1] in shared
        ]
        claimed = [(post_id, naturals.get(post_id) or links.post(reader.post(post_id))) for post_id in contested]
        naturals.update(claimed)
        claimed += [
            (page.id, path)
            for page, path in zip(pages, page_paths, strict=True)
            if path in RESERVED
            or path.startswith(LISTING_PREFIXES)
            or {_path_hash(path), _path_hash(suffixed(path, page.id))} & shared
        ]
        reserved: set[str] = set(RESERVED)
        paths = {post_id: claim(natural, post_id, reserved) for post_id, natural in claimed}
        # a path suffixed twice is no candidate: if it is another's permalink, that one is contested too
        deeper = {_path_hash(paths[i]) for i, n in claimed if paths[i] not in (n, suffixed(n, i))} - shared
        if not deeper:
            break
        shared |= deeper
    paths = {post_id: path for post_id, path in paths.items() if path != naturals.get(post_id)}
    paths.update((page.id, path) for page, path in zip(pages, page_paths, strict=True) if page.id not in paths)
    return paths


def _term_members(listed: _Listed, order: array[int], terms: set[int]) -> list[tuple[int, array[int]]]:
    """Each known term's posts, newest first (a post in a term twice is listed twice, as SiteIndex lists it)."""
    rank = array("q", bytes(8 * len(order)))
    for r, i in enumerate(order):
        rank[i] = r
    ranks: dict[int, array[int]] = {}
    for at in range(len(listed.member_post)):
        term_id = listed.member_term[at]
        if term_id in terms:
            ranks.setdefault(term_id, array("q")).append(rank[listed.member_post[at]])
    return [
        (term_id, array("q", (listed.ids[order[r]] for r in sorted(ranks.pop(term_id))))) for term_id in sorted(ranks)
    ]


def _listing_chunks(listings: list[tuple[int, array[int]]], per: int) -> tuple[list[dict[str, Any]], list[bytes]]:
    """Listing pages cut into chunks of PLAN_CHUNK_ROUTES pages; each chunk's blob names the posts its pages show."""
    chunks: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    segments: list[list[Any]] = []
    room = PLAN_CHUNK_ROUTES

    def flush() -> None:
        nonlocal segments, room
        if segments:
            chunks.append({"kind": LISTING, "segments": [s[:4] for s in segments], "routes": PLAN_CHUNK_ROUTES - room})
            blobs.append(canonical({"segments": segments}))
        segments, room = [], PLAN_CHUNK_ROUTES

    for listing, members in listings:
        pages, first = page_count(len(members), per), 1
        while first <= pages:
            last = min(pages, first + room - 1)
            segments.append([listing, first, last, pages, members[(first - 1) * per : last * per].tolist()])
            room -= last - first + 1
            first = last + 1
            if room == 0:
                flush()
    flush()
    return chunks, blobs


def stored_plan(store: ContentStore, frame: Manifest, revision_id: str) -> dict[str, Any]:
    """The revision's plan as stored; built and stored first if it is not (its listing blobs before it, so a plan
    that is there names blobs that are)."""
    key = plan_key(store.site_id, revision_id)
    try:
        return dict(json.loads(store.blobs.get(key)))
    except NotFound:
        pass
    document, blobs = build_plan(store, frame)
    for chunk, blob in enumerate(blobs):
        if blob:
            store.blobs.put_if_absent(listing_key(store.site_id, revision_id, chunk), blob)
    store.blobs.put_if_absent(key, canonical(document))
    return document


class PagedView:
    """The renderer's view of a paged revision: the plan's paths and listings, posts read from their pages."""

    def __init__(self, store: ContentStore, frame: Manifest, revision_id: str, document: dict[str, Any]) -> None:
        self.store = store
        self.revision_id = revision_id
        self.document = document
        self.reader = PageReader(store, frame)
        self.links = Permalinks(frame)
        self.terms: dict[int, Term] = {t.id: t for t in frame.terms}
        self.per_page = max(1, frame.settings.posts_per_page)
        self.nav: list[dict[str, str]] = document["nav"]
        self.paths = {int(k): v for k, v in document["paths"].items()}
        self._segments: dict[int, list[tuple[int, int, int]]] = {}  # listing -> [(first, last, chunk)]
        for number, chunk in enumerate(document["chunks"]):
            for listing, first, last, _ in chunk.get("segments", ()):
                self._segments.setdefault(listing, []).append((first, last, number))
        self._listing: tuple[int, list[list[Any]], dict[int, bytes]] | None = None
        self._chunk_lock = threading.Lock()

    def permalink(self, post: PostRef) -> str:
        return self.paths.get(post.id) or self.links.post(post)

    def post(self, post_id: int) -> PostRef:
        return self.reader.post(post_id)

    def listing(self, listing: int, page: int) -> tuple[list[PostRef], int]:
        spans = self._segments.get(listing, [])
        at = bisect.bisect_right(spans, (page, float("inf"), 0)) - 1
        if at < 0 or not spans[at][0] <= page <= spans[at][1]:
            raise NotFound(f"page {page} of listing {listing} is not in the plan")
        segments, posts = self._chunk(spans[at][2])
        for listing_id, first, last, pages, ids in segments:
            if listing_id == listing and first <= page <= last:
                start = (page - first) * self.per_page
                return [PostRef.model_validate_json(posts[i]) for i in ids[start : start + self.per_page]], pages
        raise NotFound(f"page {page} of listing {listing} is not in its chunk")

    def _chunk(self, number: int) -> tuple[list[list[Any]], dict[int, bytes]]:
        """A listing chunk's segments and the posts they list (each page holding any read once): one chunk's
        worth, ~10,000 posts at most, kept while its routes render."""
        with self._chunk_lock:
            if self._listing is None or self._listing[0] != number:
                data = self.store.blobs.get(listing_key(self.store.site_id, self.revision_id, number))
                segments = list(json.loads(data)["segments"])
                self._listing = (number, segments, self.reader.posts(i for s in segments for i in s[4]))
            return self._listing[1], self._listing[2]

    def feed(self) -> list[PostRef]:
        return [self.reader.post(i) for i in self.document["feed"]]

    def listed(self, page_number: int) -> list[PostRef]:
        """The listed posts and pages of one content page, by id."""
        page = self.reader.page(page_number)
        posts = (PostRef.model_validate_json(page[i]) for i in sorted(page))
        return [p for p in posts if is_listed_post(p) or is_listed_page(p)]

    def sitemap(self, route: Route) -> tuple[str, list[dict[str, str]]]:
        if route.path == SITEMAP_INDEX:
            return SITEMAP_INDEX_TEMPLATE, [{"path": sitemap_path(n)} for n in self.document["sitemaps"]]
        entries = []
        if self.document["sitemaps"][:1] == [route.ref]:
            entries.append({"path": "/", "lastmod": self.document["lastmod"]})
        entries += [{"path": self.permalink(p), "lastmod": p.modified_gmt[:10]} for p in self.listed(route.ref)]
        return SITEMAP_TEMPLATE, entries

    def chunk(self, number: int) -> list[Route]:
        chunk = self.document["chunks"][number]
        if chunk["kind"] == HEAD:
            return [Route("/feed/", FEED), Route(SITEMAP_INDEX, SITEMAP)]
        if chunk["kind"] == LISTING:
            return [
                listing_route(self.terms[listing] if listing != HOME_LISTING else None, page)
                for listing, first, last, _ in chunk["segments"]
                for page in range(first, last + 1)
            ]
        singles = [Route(self.permalink(p), SINGLE, ref=p.id) for p in self.listed(chunk["page"])]
        return [*singles, Route(sitemap_path(chunk["page"]), SITEMAP, ref=chunk["page"])]
