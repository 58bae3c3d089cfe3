"""The kind contract: what a handler sees (HandlerContext), what it returns (Mutation) and the port through which it
reaches a site's content (SiteDriver). Nothing here knows how a driver stores content: a driver writes its revision
itself and returns its id, so the worker, the commit and publication are the same for every kind of site."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from sitedispatch.domain.model import Lease, Operation, Site, SiteConnection
from sitedispatch.domain.ports import BlobStore, Clock, SiteStore, Visibility
from sitedispatch.domain.settings import Settings
from sitedispatch.publication.sources import RouteSource

# A heartbeat goes out once a third of the lease has passed, so one lost heartbeat never lets the lease lapse.
HEARTBEAT_FRACTION = 1 / 3
# A long operation starts another step in this invocation only with this many step times left before its deadline:
# a step runs at most `import_step_s` (plus its last item), and what follows the last step (the commit) needs time
# too. An invocation shorter than that runs one step, of `step_s()`, then hands over.
STEPS_OF_TIME_LEFT = 1.5
MIN_STEP_S = 1.0  # however short the invocation, a step is allowed this long (so that it makes progress)


class ContinueLater(Exception):  # not an error: how a handler hands its attempt to the next invocation
    """Raised by `HandlerContext.step_done` when the invocation has no time for another step: the checkpoint is
    recorded with the continuation, and the next delivery continues the same attempt from it."""


@dataclass(frozen=True)
class Mutation:
    """A handler's result: the id of the site's next head revision (stored by the driver before it returns), a
    summary recorded with the commit, and what follows the commit."""

    revision_id: str
    summary: dict[str, Any] = field(default_factory=dict)
    publish_revision: str | None = None  # the revision to publish after the commit (default: the new head)
    publish: bool = True  # False: nothing visible changed, so no publication follows the commit
    next_due_at: float | None = None  # of the new head: when WordPress's cron next has work (wp-events reads it)


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
    # Records a long operation's checkpoint under this attempt's fence (StaleFence once another holds the site).
    checkpoints: Callable[[dict[str, Any], bool], None] | None = None
    last_checkpoint: dict[str, Any] | None = None  # the last one recorded in this attempt
    deadline: float | None = None  # when this invocation must have returned (the function's timeout), if bounded
    _last_beat: float = field(default=0.0)
    _began: float = field(default=0.0)

    def __post_init__(self) -> None:
        self._last_beat = self._began = self.clock.now()

    def step_s(self) -> float:
        """How long one step of a long operation runs: `import_step_s`, or less when this invocation has less time
        (a function whose timeout is short, as locally): the step and what follows it fit before the deadline."""
        limit = self.settings.import_step_s
        if self.deadline is None:
            return limit
        return max(MIN_STEP_S, min(limit, (self.deadline - self._began) / (1 + STEPS_OF_TIME_LEFT)))

    @property
    def fence(self) -> int:
        return self.lease.fence

    def heartbeat(self, force: bool = False) -> None:
        """Extend the lease (conditional on our fence: StaleFence if lost) and the message's visibility."""
        now = self.clock.now()
        if not force and now - self._last_beat < self.settings.lease_seconds * HEARTBEAT_FRACTION:
            return
        self.lease = self.sites.extend_lease(self.lease, now, self.settings.lease_seconds)
        self.visibility.change(self.settings.lease_seconds * 2)
        self._last_beat = now

    def save_checkpoint(self, checkpoint: dict[str, Any], continues: bool = False) -> None:
        """Record where a long operation is, so the next attempt continues from it (never from the start)."""
        if self.checkpoints is not None:
            self.checkpoints(checkpoint, continues)
            self.last_checkpoint = checkpoint

    def step_done(self, checkpoint: dict[str, Any]) -> None:
        """A step of a long operation is complete: record its checkpoint, then go on in this invocation if another
        step fits before the deadline (heartbeating), else hand over: the checkpoint is recorded as a continuation
        and ContinueLater raised, so the next delivery continues this attempt from it without spending another.
        Without a recorder (a store that keeps no checkpoints) there is nothing to continue from: it goes on."""
        out_of_time = (
            self.checkpoints is not None
            and self.deadline is not None
            # (the configured step time, not a shortened one: a short invocation does one step, then hands over)
            and self.deadline - self.clock.now() < STEPS_OF_TIME_LEFT * self.settings.import_step_s
        )
        self.save_checkpoint(checkpoint, continues=out_of_time)
        if out_of_time:
            raise ContinueLater(checkpoint)
        self.heartbeat(force=True)

    def work_for(self, seconds: float, slice_s: float = 0.25) -> None:
        """Spend `seconds` of wall time in a long step, heartbeating as it goes."""
        deadline = self.clock.now() + seconds
        while (remaining := deadline - self.clock.now()) > 0:
            self.clock.sleep(min(slice_s, remaining))
            self.heartbeat()


class SiteDriver(Protocol):
    """What each kind needs from a site. Called with the site's lease held; writes carry the lease's fence."""

    # Error codes that are the destination's fault, not the operation's: they count towards pausing the site.
    destination_failures: frozenset[str]

    def connection(self, given: SiteConnection) -> SiteConnection:
        """The connection as a site of this driver is registered with it, or InvalidInput naming the field at
        fault (checked before anything is stored)."""
        ...

    def provision(self, ctx: HandlerContext, payload: Any) -> Mutation: ...

    def import_wxr(self, ctx: HandlerContext, payload: Any) -> Mutation: ...

    def publish(self, ctx: HandlerContext, payload: Any) -> Mutation: ...

    def wp_cron(self, ctx: HandlerContext, payload: Any) -> Mutation: ...

    def recover(self, ctx: HandlerContext, payload: Any) -> Mutation: ...

    def route_source(self, blobs: BlobStore, site: Site, revision_id: str) -> RouteSource:
        """The routes of a stored revision and how to produce each one's bytes (publication)."""
        ...
