"""The simulation's set of ports: the in-memory ones, each behind its gate, every source of randomness drawn from
the seed; every core is built from it by `sitedispatch.cores`, as a deployment's are from `Dependencies`."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from random import Random
from typing import TYPE_CHECKING, Any

from sitedispatch import cores
from sitedispatch.domain.model import BULK, INTERACTIVE
from sitedispatch.domain.ports import WebhookSender
from sitedispatch.domain.resources import VISIBILITY_PER_TIMEOUT
from sitedispatch.domain.settings import Settings
from sitedispatch.domain.webhooks import RetryPolicy
from sitedispatch.drivers.reference.driver import reference_only
from sitedispatch.flow.minute_counts import SHARDS, MinuteCounts
from sitedispatch.flow.outcomes import Outcomes
from sitedispatch.flow.pace import Pace
from sitedispatch.flow.retry_budget import RetryBudget
from sitedispatch.flow.shares import SiteLabels
from sitedispatch.operations.batch import BatchSubmitter
from tests.fakes import MemoryMinuteBuckets, MemoryWorld

from .faults import FaultPlan, Gate
from .queues import Fifo, SimEventQueue, SimOperationQueue, SimPublicationQueue, SimWebhookQueue
from .scheduler import Scheduler

if TYPE_CHECKING:
    from sitedispatch.events.worker import EventsWorker
    from sitedispatch.operations.submission import Submitter
    from sitedispatch.operations.worker import OperationsWorker
    from sitedispatch.operator.controls import Controls
    from sitedispatch.publication.worker import PublicationWorker
    from sitedispatch.reconciler import Reconciler
    from sitedispatch.webhooks.deliverer import WebhookDeliverer

EVENTS = "events"
PUBLICATIONS = "publications"
WEBHOOKS = "webhooks"


@dataclass
class Queues:
    lanes: dict[str, Fifo]
    publications: Fifo
    events: Fifo
    webhooks: Fifo

    def main(self) -> list[Fifo]:
        return [*self.lanes.values(), self.publications, self.events, self.webhooks]

    def all(self) -> list[Fifo]:
        return self.main() + [q.dlq for q in self.main() if q.dlq is not None]


def make_queues(world: MemoryWorld, timeouts: dict[str, float]) -> Queues:
    def fifo(name: str) -> Fifo:
        visibility = VISIBILITY_PER_TIMEOUT * timeouts[name]
        return Fifo(name, world.clock, visibility, Fifo(f"{name}-dlq", world.clock, visibility))

    lanes = {lane: fifo(lane) for lane in (INTERACTIVE, BULK)}
    return Queues(lanes, fifo(PUBLICATIONS), fifo(EVENTS), fifo(WEBHOOKS))


class Core:
    """The in-memory ports, each behind its gate: the set of ports (`sitedispatch.cores.Ports`) every core of the
    simulation is built from, as `Dependencies` is over AWS. Every Random it hands out is drawn from `rng`, and ids
    from a counter, so a seed builds the same cores every time."""

    def __init__(
        self,
        settings: Settings,
        world: MemoryWorld,
        queues: Queues,
        scheduler: Scheduler,
        faults: FaultPlan,
        rng: Random,
        seen: Callable[..., None],
        receiver: WebhookSender,
        webhook_scale: float,
    ) -> None:
        self.settings, self.world, self.rng = settings, world, rng
        ids = itertools.count(1)
        self.new_key = lambda: f"k{next(ids):06d}"

        def gate(name: str, port: Any, refuses: bool = True) -> Any:
            return Gate(name, port, scheduler, faults, seen, refuses)

        w = world
        self.operations = gate("operations", w.operations)
        self.sites = gate("sites", w.sites)
        self.commits = gate("commits", w.commits)
        self.blobs = gate("blobs", w.blobs)
        self.publications = gate("publications", w.publications)
        self.quotas = gate("quotas", w.quotas)
        self.audit = gate("audit", w.audit)
        self.events = gate("events", w.events)
        self.event_bus = gate("bus", w.event_bus)
        self.webhooks = gate("webhooks", w.webhooks)
        self.dependency_store = gate("dependencies", w.dependency_store)
        self.webhook_queue = gate("sqs", SimWebhookQueue(queues.webhooks))
        self.webhook_secrets = gate("secrets", w.webhook_secrets)
        self.receiver = gate("receiver", receiver, refuses=False)
        self.webhook_policy = RetryPolicy.scaled(webhook_scale)
        self.queue = gate("sqs", SimOperationQueue(queues.lanes))
        self.publication_queue = gate("sqs", SimPublicationQueue(queues.publications))
        self.event_queue = gate("sqs", SimEventQueue(queues.events))
        self.buckets = gate("buckets", MemoryMinuteBuckets(w.db))
        self.drivers = reference_only()
        self.clock = w.clock

    def _counts(self, shards: int = SHARDS) -> MinuteCounts:
        return MinuteCounts(self.buckets, shards, rng=Random(self.rng.random()))

    # Built anew for each core that asks (each with its own shard choices from the seed), as each Lambda
    # environment builds its own.
    @property
    def retry_budget(self) -> RetryBudget:
        s = self.settings
        return RetryBudget(self._counts(), s.retry_budget_ratio, s.retry_budget_min_retries)

    @property
    def site_labels(self) -> SiteLabels:
        return SiteLabels()  # as each Lambda environment starts with its own

    @property
    def pace(self) -> Pace:
        return Pace(self._counts(shards=1))  # as Dependencies.pace: a principal's own bucket

    @property
    def outcomes(self) -> Outcomes:
        return Outcomes(self._counts())

    def submitter(self) -> Submitter:
        return cores.submitter(self, self.new_key)

    def batch(self) -> BatchSubmitter:
        return BatchSubmitter(self.submitter())

    def worker(self) -> OperationsWorker:
        return cores.worker(self, Random(self.rng.random()))

    def publisher(self) -> PublicationWorker:
        return cores.publisher(self, Random(self.rng.random()))

    def events_worker(self) -> EventsWorker:
        return cores.events_worker(self)

    def deliverer(self) -> WebhookDeliverer:
        return cores.deliverer(self, self.receiver, self.webhook_policy, Random(self.rng.random()))

    def reconciler(self) -> Reconciler:
        return cores.reconciler(self, self.submitter())

    def controls(self) -> Controls:
        return cores.controls(self)
