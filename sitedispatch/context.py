"""What a handler sees: its site, operation, fence, input, clock and a heartbeat."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .model import Lease, Operation, Site
from .ports import BlobStore, Clock, SiteStore, Visibility
from .settings import Settings
from .wordpress.content import Manifest
from .wordpress.store import ContentStore

if TYPE_CHECKING:
    from .drivers import SiteDriver

# A heartbeat goes out once a third of the lease has passed, so one lost heartbeat never lets the lease lapse.
HEARTBEAT_FRACTION = 1 / 3


@dataclass
class HandlerContext:
    site: Site
    operation: Operation
    lease: Lease
    payload: Any
    settings: Settings
    clock: Clock
    blobs: BlobStore
    sites: SiteStore
    visibility: Visibility
    driver: SiteDriver
    _last_beat: float = field(default=0.0)

    def __post_init__(self) -> None:
        self._last_beat = self.clock.now()

    @property
    def fence(self) -> int:
        return self.lease.fence

    @property
    def content(self) -> ContentStore:
        return ContentStore(self.blobs, self.site.site_id)

    def head_manifest(self) -> Manifest | None:
        """The site's content at its head revision, or None before the first commit."""
        if self.site.head_revision is None:
            return None
        return self.content.manifest(self.site.head_revision)

    def heartbeat(self, force: bool = False) -> None:
        """Extend the lease (conditional on our fence: StaleFence if lost) and the message's visibility."""
        now = self.clock.now()
        if not force and now - self._last_beat < self.settings.lease_seconds * HEARTBEAT_FRACTION:
            return
        self.lease = self.sites.extend_lease(self.lease, now, self.settings.lease_seconds)
        self.visibility.change(self.settings.lease_seconds * 2)
        self._last_beat = now

    def work_for(self, seconds: float, slice_s: float = 0.25) -> None:
        """Spend `seconds` of wall time in a long step, heartbeating as it goes."""
        deadline = self.clock.now() + seconds
        while (remaining := deadline - self.clock.now()) > 0:
            self.clock.sleep(min(slice_s, remaining))
            self.heartbeat()
