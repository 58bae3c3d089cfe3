"""A site in pages is published from its stored route plan in bounded memory: the same routes and bytes as the same
content in one document (the sitemap split into an index of per-page sitemaps), each chunk reading only the pages
its routes show, and a receipt that names its chunks' receipts past the inline limit."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import Any

import pytest
from defusedxml import ElementTree

from sitedispatch.drivers.reference import content, plan
from sitedispatch.drivers.reference.content import Manifest, PostBody, PostRef, SiteSettings
from sitedispatch.drivers.reference.permalinks import SiteIndex
from sitedispatch.drivers.reference.source import PagedRoutes, route_source
from sitedispatch.drivers.reference.store import ContentStore
from sitedispatch.publication import worker
from sitedispatch.publication.live import object_key, read_live_route, receipt_key, receipt_routes
from sitedispatch.publication.routes import SITEMAP, Route
from sitedispatch.publication.sources import RouteSource
from tests.fakes import MemoryBlobStore
from tests.unit.conftest import THEME_TEST_DATA, Harness
from tests.unit.test_import import CountingBlobs, merged_theme

LOC = "{http://www.sitemaps.org/schemas/sitemap/0.9}loc"


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages of 16 ids, a site in pages past 20 posts, listing chunks of 7 pages: the theme test data (171 posts)
    spans 14 pages and its listings several chunks."""
    monkeypatch.setattr(content, "PAGE_IDS", 16)
    monkeypatch.setattr(content, "FLAT_MAX_POSTS", 20)
    monkeypatch.setattr(plan, "PLAN_CHUNK_ROUTES", 7)


def every_route(source: RouteSource) -> list[Route]:
    chunks = source.plan(25)
    routes = [route for n in range(chunks.chunk_count()) for route in chunks.chunk(n)]
    assert [chunks.chunk_size(n) for n in range(chunks.chunk_count())] == [
        len(chunks.chunk(n)) for n in range(chunks.chunk_count())
    ]
    return routes


def locs(document: bytes) -> list[str]:
    return [str(loc.text) for loc in ElementTree.fromstring(document).iter(LOC)]


def both_layouts(manifest: Manifest, store: ContentStore) -> tuple[RouteSource, RouteSource]:
    paged_revision = store.put_manifest(manifest)
    flat_revision = store.put_frame(manifest)  # the same content as one document
    assert store.stored_manifest(paged_revision).paged and not store.stored_manifest(flat_revision).paged
    return route_source(store, paged_revision), route_source(store, flat_revision)


def test_a_paged_site_publishes_the_routes_and_bytes_the_same_content_in_one_document_does(
    small_pages: None,
) -> None:
    store = ContentStore(MemoryBlobStore(), "acme-blog")
    paged, flat = both_layouts(merged_theme(store), store)

    paged_routes, flat_routes = every_route(paged), every_route(flat)

    def by_path(routes: list[Route]) -> list[Route]:
        return sorted((r for r in routes if r.template != SITEMAP), key=lambda r: r.path)

    assert by_path(paged_routes) == by_path(flat_routes) and len(flat_routes) > 100
    assert len({r.path for r in paged_routes}) == len(paged_routes)  # no route twice
    for route in by_path(flat_routes):
        assert paged.render(route) == flat.render(route), route
    # the sitemap: an index of one sitemap per content page, which together list the one document's URLs in order
    [flat_sitemap] = [r for r in flat_routes if r.template == SITEMAP]
    index = next(r for r in paged_routes if r.path == "/sitemap.xml")
    parts = [r for r in paged_routes if r.template == SITEMAP and r is not index]
    assert locs(paged.render(index)) == ["https://acme.example" + r.path for r in parts] and len(parts) > 5
    assert [u for r in parts for u in locs(paged.render(r))] == locs(flat.render(flat_sitemap))


def _post(post_id: int, slug: str, *, date: str = "2024-05-01 10:00:00", **fields: Any) -> PostRef:
    return PostRef(
        id=post_id,
        guid=f"g{post_id}",
        title=f"T{post_id}",
        slug=slug,
        date_gmt=date,
        modified_gmt=date,
        body=PostBody().digest,
        **fields,
    )


def test_permalinks_claimed_twice_resolve_as_they_do_in_one_document(small_pages: None) -> None:
    """Posts sharing a permalink (the same slug and day, the same slug under /%postname%/ as a page), one whose
    permalink is a listing route or under a listing prefix, a page whose parent chain crosses a post, one whose
    suffixed path is another's permalink: every path as SiteIndex claims it, in claim order."""
    store = ContentStore(MemoryBlobStore(), "s")
    store.put_body(PostBody())
    posts = [
        _post(1, "same"),
        _post(2, "same"),  # same day, same slug: the newer (by id, dates equal) keeps it
        _post(3, "same", date="2024-05-02 09:00:00"),  # newest: claims /same/ under /%postname%/
        _post(4, "feed"),  # /feed/ is reserved
        _post(5, "page"),  # under /page/
        _post(6, "same-2"),  # its permalink is post 2's suffixed path: post 2 is suffixed twice
        _post(12, "same-2-2", date="2019-01-01 00:00:00"),  # and that is this one's permalink: it is suffixed
        _post(7, "about", type="page"),  # collides with post 8's /about/, pages claim after posts
        _post(8, "about"),
        _post(9, "child", type="page", parent=10),
        _post(10, "attachment-parent", type="attachment", status="inherit"),
        _post(11, "sticky", sticky=True, date="2020-01-01 00:00:00"),
        _post(13, "odd-date", date="2024-05-01T10:00"),  # not WordPress's form: dates compared as strings
    ]
    posts += [_post(i, f"filler-{i}", date=f"2023-01-{1 + i % 28:02d} 00:00:00") for i in range(40, 80)]
    for structure in ("/%postname%/", "/%year%/%monthnum%/%day%/%postname%/"):
        manifest = Manifest(
            site_id="s",
            settings=SiteSettings(
                title="S", url="https://s.example", admin_email="a@s.co", permalink_structure=structure
            ),
            posts=tuple(posts),
        ).normalised()
        paged, flat = both_layouts(manifest, store)
        assert isinstance(paged, PagedRoutes)
        index = SiteIndex(manifest)
        listed = [p for p in manifest.posts if p.id in index.permalinks]
        assert [paged.view.permalink(p) for p in listed] == [index.permalinks[p.id] for p in listed]
        routes = sorted((r for r in every_route(flat) if r.template != SITEMAP), key=lambda r: r.path)
        assert sorted((r for r in every_route(paged) if r.template != SITEMAP), key=lambda r: r.path) == routes
        for route in routes:  # listings in the same order, every page
            assert paged.render(route) == flat.render(route), route
        if structure == "/%postname%/":  # the cases are there: reserved, prefixed, shared, a suffix taken
            assert index.permalinks[4] == "/feed-4/" and index.permalinks[5] == "/page-5/"
            assert index.permalinks[3] == "/same/" and index.permalinks[6] == "/same-2/"
            assert index.permalinks[2] == "/same-2-2/" and index.permalinks[1] == "/same-1/"
            assert index.permalinks[7] == "/about-7/" and index.permalinks[9] == "/attachment-parent/child/"


def test_each_chunk_reads_only_the_pages_its_routes_show(small_pages: None) -> None:
    """The plan is built reading every page once; then a content page's chunk reads that one page, a listing chunk
    its blob and the pages holding the posts it lists, the head chunk the pages of the feed's ten posts."""
    blobs = CountingBlobs()
    store = ContentStore(blobs, "acme-blog")
    whole = merged_theme(store)
    revision = store.put_manifest(whole)
    frame = store.stored_manifest(revision)
    index = SiteIndex(whole)
    with_listed = {post_id // content.PAGE_IDS for post_id in index.permalinks}
    blobs.reads.clear()

    source = route_source(store, revision)
    assert blobs.reads["pages"] == len(frame.pages) and blobs.reads["plans"] == 1  # looked for, then built

    built = route_source(store, revision)  # another worker: reads the stored plan, no page
    assert isinstance(built, PagedRoutes) and blobs.reads["pages"] == len(frame.pages)
    chunks = built.plan(25)
    kinds = Counter(c["kind"] for c in built.view.document["chunks"])
    assert (
        kinds[plan.SINGLES] == len(with_listed) < len(frame.pages) and kinds[plan.LISTING] > 3 and kinds[plan.HEAD] == 1
    )
    for number in range(chunks.chunk_count()):
        fresh = route_source(store, revision)
        assert isinstance(fresh, PagedRoutes)
        blobs.reads.clear()
        routes = fresh.plan(25).chunk(number)
        for route in routes:
            fresh.render(route)
        kind = fresh.view.document["chunks"][number]["kind"]
        shown = {
            p.id // content.PAGE_IDS
            for route in routes
            if route.template in {"home", "category", "tag"}
            for p in fresh.view.listing(route.ref, route.page)[0]
        }
        if kind == plan.SINGLES:
            assert blobs.reads["pages"] == 1, number
        elif kind == plan.LISTING:
            assert blobs.reads["plans"] == 1 and blobs.reads["pages"] == len(shown), number
        else:
            assert blobs.reads["pages"] <= 10
    del source


def test_a_paged_site_goes_live_through_the_worker_with_a_receipt_naming_its_chunks(
    small_pages: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past RECEIPT_INLINE_ROUTES the receipt names each chunk's receipt (digest, count, bytes): every route it
    describes is stored with those bytes and is what a reader of the live site gets."""
    monkeypatch.setattr(worker, "RECEIPT_INLINE_ROUTES", 50)
    harness = Harness()
    harness.provisioned()
    result = harness.import_file(THEME_TEST_DATA)
    assert result.outcome.value == "succeeded" and result.commit is not None
    revision = result.commit.revision_id
    store = ContentStore(harness.world.blobs, "acme-blog")
    assert store.stored_manifest(revision).paged

    harness.drain_publications()

    site = harness.world.sites.get("acme-blog")
    assert site is not None and site.live_revision == revision
    document = json.loads(harness.world.blobs.get(receipt_key("acme-blog", revision)))
    assert "routes" not in document and len(document["chunks"]) > 10
    for part in document["chunks"]:
        assert hashlib.sha256(harness.world.blobs.get(part["key"])).hexdigest() == part["sha256"]
    entries = list(receipt_routes(harness.world.blobs, document))
    assert len(entries) == document["route_count"] == sum(p["routes"] for p in document["chunks"]) > 100
    assert sum(int(e["size"]) for e in entries) == document["bytes"]
    for entry in entries:
        body = harness.world.blobs.get(object_key("acme-blog", revision, entry["route"]))
        assert hashlib.sha256(body).hexdigest() == entry["sha256"]
        assert read_live_route(harness.world.sites, harness.world.blobs, "acme-blog", entry["route"])[0] == body
    flat = route_source(store, store.put_frame(store.manifest(revision)))
    home = harness.world.blobs.get(object_key("acme-blog", revision, "/"))
    assert home == flat.render(Route("/", "home"))
