"""The reference driver's route sources for publication: a revision in one document is routed from memory; a site in
pages from its stored route plan (plan.py), in bounded memory."""

from __future__ import annotations

from typing import Any

from sitedispatch.drivers.reference.content import Manifest
from sitedispatch.drivers.reference.permalinks import SiteIndex
from sitedispatch.drivers.reference.plan import PagedView, stored_plan
from sitedispatch.drivers.reference.render import Renderer
from sitedispatch.drivers.reference.store import ContentStore
from sitedispatch.publication.routes import Route
from sitedispatch.publication.sources import ListedRoutes, RouteSource


class ManifestRoutes:
    """A revision in one document: routes are a pure function of the manifest; rendering is deterministic."""

    reuses_stored = False

    def __init__(self, store: ContentStore, frame: Manifest) -> None:
        self.index = SiteIndex(frame)
        self.renderer = Renderer(frame, self.index, store.body)

    def routes(self) -> list[Route]:
        return self.index.routes()

    def plan(self, chunk_routes: int) -> ListedRoutes:
        return ListedRoutes(self.index.routes(), chunk_routes)

    def render(self, route: Route) -> bytes:
        return self.renderer.render(route)


class PagedPlan:
    """A paged revision's chunks as its stored plan cuts them (larger than a document's `chunk_routes`: the plan
    says why)."""

    def __init__(self, view: PagedView) -> None:
        self.view = view
        self.chunks: list[dict[str, Any]] = view.document["chunks"]

    def chunk_count(self) -> int:
        return len(self.chunks)

    def chunk(self, number: int) -> list[Route]:
        return self.view.chunk(number)

    def chunk_size(self, number: int) -> int:
        return int(self.chunks[number]["routes"])


class PagedRoutes:
    """A site in pages: each chunk reads only the pages and listing blob its routes show."""

    reuses_stored = False

    def __init__(self, store: ContentStore, frame: Manifest, revision_id: str) -> None:
        self.view = PagedView(store, frame, revision_id, stored_plan(store, frame, revision_id))
        self.renderer = Renderer(frame, self.view, store.body)

    def plan(self, chunk_routes: int) -> PagedPlan:
        return PagedPlan(self.view)

    def render(self, route: Route) -> bytes:
        return self.renderer.render(route)


def route_source(store: ContentStore, revision_id: str) -> RouteSource:
    frame = store.stored_manifest(revision_id)
    if frame.paged:
        return PagedRoutes(store, frame, revision_id)
    return ManifestRoutes(store, frame)
