"""The reference driver's route source for publication."""

from __future__ import annotations

from sitedispatch.drivers.reference.render import Renderer
from sitedispatch.drivers.reference.store import ContentStore
from sitedispatch.publication.routes import Route


class ManifestRoutes:
    """A reference-driver revision: routes are a pure function of the manifest; rendering is deterministic."""

    reuses_stored = False

    def __init__(self, content: ContentStore, revision_id: str) -> None:
        self.renderer = Renderer(content.manifest(revision_id), content.body)
        self._routes = self.renderer.index.routes()

    def routes(self) -> list[Route]:
        return self._routes

    def render(self, route: Route) -> bytes:
        return self.renderer.render(route)
