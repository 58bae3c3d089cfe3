"""The core as a deployment builds it (`sitedispatch/dependencies.py`), over the in-memory ports, each behind its
gate, and every source of randomness drawn from the seed."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from random import Random
from typing import Any

from sitedispatch.domain.model import BULK, INTERACTIVE
from sitedispatch.domain.ports import WebhookSender
from sitedispatch.domain.settings import Settings
from sitedispatch.domain.webhooks import RetryPolicy
from sitedispatch.drivers.reference.driver import reference_only
from sitedispatch.events.worker import EventsDeps, EventsWorker
from sitedispatch.flow.minute_counts import MinuteCounts
from sitedispatch.flow.outcomes import Outcomes
from sitedispatch.flow.pace import Pace
from sitedispatch.flow.retry_budget import RetryBudget
from sitedispatch.kinds.handlers import handler_map
from sitedispatch.operations.batch import BatchSubmitter
from sitedispatch.operations.submission import SubmitDeps, Submitter
from sitedispatch.operations.worker import OperationsWorker, WorkerDeps
from sitedispatch.operator.access import ControlDeps
from sitedispatch.operator.controls import Controls
from sitedispatch.publication.worker import PublicationDeps, PublicationWorker
from sitedispatch.reconciler import Reconciler, ReconcilerDeps, wp_cron_submitter
from sitedispatch.webhooks.deliverer import WebhookDeliverer, WebhookDeps
from tests.fakes import MemoryMinuteBuckets, MemoryWorld

from .faults import FaultPlan, Gate
from .queues import Fifo, SimEventQueue, SimOperationQueue, SimPublicationQueue, SimWebhookQueue
from .scheduler import Scheduler

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
        visibility = 6 * timeouts[name]  # VISIBILITY_PER_TIMEOUT
        return Fifo(name, world.clock, visibility, Fifo(f"{name}-dlq", world.clock, visibility))

    lanes = {lane: fifo(lane) for lane in (INTERACTIVE, BULK)}
    return Queues(lanes, fifo(PUBLICATIONS), fifo(EVENTS), fifo(WEBHOOKS))


class Core:
    """Builds each piece of the core the way `Dependencies` does, from gated ports. Every Random it hands out is
    drawn from `rng`, and ids from a counter, so a seed builds the same core every time."""

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

    def minute_counts(self) -> MinuteCounts:
        return MinuteCounts(self.buckets, rng=Random(self.rng.random()))

    def pace(self) -> Pace:
        return Pace(self.minute_counts())

    def submitter(self) -> Submitter:
        return Submitter(
            SubmitDeps(
                self.settings,
                self.operations,
                self.sites,
                self.blobs,
                self.queue,
                self.clock,
                self.pace(),
                self.drivers,
                new_key=self.new_key,
            )
        )

    def batch(self) -> BatchSubmitter:
        return BatchSubmitter(self.submitter())

    def worker(self) -> OperationsWorker:
        s = self.settings
        return OperationsWorker(
            WorkerDeps(
                s,
                self.operations,
                self.sites,
                self.commits,
                self.blobs,
                self.queue,
                self.clock,
                handler_map(),
                Random(self.rng.random()),
                self.publications,
                self.publication_queue,
                RetryBudget(self.minute_counts(), s.retry_budget_ratio, s.retry_budget_min_retries),
                self.pace(),
                self.drivers,
                Outcomes(self.minute_counts()),
            )
        )

    def publisher(self) -> PublicationWorker:
        return PublicationWorker(
            PublicationDeps(
                self.settings,
                self.sites,
                self.publications,
                self.blobs,
                self.publication_queue,
                self.clock,
                self.drivers,
                Random(self.rng.random()),
            )
        )

    def events_worker(self) -> EventsWorker:
        return EventsWorker(EventsDeps(self.events, self.event_bus, self.webhooks, self.webhook_queue))

    def deliverer(self) -> WebhookDeliverer:
        return WebhookDeliverer(
            WebhookDeps(
                self.webhooks,
                self.events,
                self.webhook_secrets,
                self.receiver,
                self.webhook_queue,
                self.clock,
                self.webhook_policy,
                Random(self.rng.random()),
            )
        )

    def reconciler(self) -> Reconciler:
        return Reconciler(
            ReconcilerDeps(
                self.settings,
                self.operations,
                self.sites,
                self.publications,
                self.queue,
                self.publication_queue,
                self.blobs,
                self.clock,
                wp_cron_submitter(self.submitter()),
                self.events,
                self.event_queue,
                self.webhooks,
                self.webhook_queue,
            )
        )

    def controls(self) -> Controls:
        return Controls(
            ControlDeps(
                self.settings,
                self.operations,
                self.sites,
                self.blobs,
                self.queue,
                self.audit,
                self.clock,
                self.quotas,
                self.commits,
                self.publications,
            )
        )
