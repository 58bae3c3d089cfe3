"""Each core of the service built from one set of ports: `Dependencies` is the set over AWS, the deterministic
simulation (sim/) the set over the in-memory ports. Both build every core here, so a core is wired one way."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # each core is imported where it is built: a cold start pays only for its own
    from sitedispatch.domain.ports import (
        AuditLog,
        BlobStore,
        Clock,
        CommitStore,
        DependencyStore,
        EventBus,
        EventLog,
        EventQueue,
        OperationQueue,
        OperationStore,
        PublicationQueue,
        PublicationStore,
        QuotaStore,
        SiteStore,
        WebhookQueue,
        WebhookSecrets,
        WebhookSender,
        WebhookStore,
    )
    from sitedispatch.domain.settings import Settings
    from sitedispatch.domain.webhooks import RetryPolicy
    from sitedispatch.events.worker import EventsWorker
    from sitedispatch.flow.outcomes import Outcomes
    from sitedispatch.flow.pace import Pace
    from sitedispatch.flow.retry_budget import RetryBudget
    from sitedispatch.flow.shares import SiteLabels
    from sitedispatch.kinds.contract import SiteDriver
    from sitedispatch.operations.submission import Submitter
    from sitedispatch.operations.worker import OperationsWorker
    from sitedispatch.operator.controls import Controls
    from sitedispatch.publication.worker import PublicationWorker
    from sitedispatch.reconciler import Reconciler
    from sitedispatch.webhooks.deliverer import WebhookDeliverer


class Ports(Protocol):
    """What the cores are built from (read-only: a set may build each port on first use)."""

    @property
    def settings(self) -> Settings: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def operations(self) -> OperationStore: ...
    @property
    def sites(self) -> SiteStore: ...
    @property
    def commits(self) -> CommitStore: ...
    @property
    def blobs(self) -> BlobStore: ...
    @property
    def publications(self) -> PublicationStore: ...
    @property
    def quotas(self) -> QuotaStore: ...
    @property
    def audit(self) -> AuditLog: ...
    @property
    def queue(self) -> OperationQueue: ...
    @property
    def publication_queue(self) -> PublicationQueue: ...
    @property
    def events(self) -> EventLog: ...
    @property
    def event_queue(self) -> EventQueue: ...
    @property
    def event_bus(self) -> EventBus: ...
    @property
    def webhooks(self) -> WebhookStore: ...
    @property
    def webhook_queue(self) -> WebhookQueue: ...
    @property
    def webhook_secrets(self) -> WebhookSecrets: ...
    @property
    def drivers(self) -> Mapping[str, SiteDriver]: ...
    @property
    def retry_budget(self) -> RetryBudget: ...
    @property
    def pace(self) -> Pace: ...
    @property
    def outcomes(self) -> Outcomes: ...
    @property
    def dependency_store(self) -> DependencyStore: ...
    @property
    def site_labels(self) -> SiteLabels: ...


def submitter(p: Ports, new_key: Callable[[], str] | None = None) -> Submitter:
    """`new_key`: the idempotency key of a submit without one (default: a random UUID)."""
    from sitedispatch.operations.submission import SubmitDeps, Submitter

    deps = SubmitDeps(
        p.settings, p.operations, p.sites, p.blobs, p.queue, p.clock, p.pace, p.drivers, labels=p.site_labels
    )
    if new_key is not None:
        deps.new_key = new_key
    return Submitter(deps)


def controls(p: Ports) -> Controls:
    from sitedispatch.operator.access import ControlDeps
    from sitedispatch.operator.controls import Controls

    return Controls(
        ControlDeps(
            p.settings,
            p.operations,
            p.sites,
            p.blobs,
            p.queue,
            p.audit,
            p.clock,
            p.quotas,
            p.commits,
            p.publications,
            p.dependency_store,
        )
    )


def reconciler(p: Ports, submits: Submitter) -> Reconciler:
    from sitedispatch.reconciler import Reconciler, ReconcilerDeps, wp_cron_submitter

    return Reconciler(
        ReconcilerDeps(
            p.settings,
            p.operations,
            p.sites,
            p.publications,
            p.queue,
            p.publication_queue,
            p.blobs,
            p.clock,
            wp_cron_submitter(submits),
            p.events,
            p.event_queue,
            p.webhooks,
            p.webhook_queue,
        )
    )


def worker(p: Ports, rng: random.Random) -> OperationsWorker:
    """`rng`: the jitter of the worker's retries."""
    from sitedispatch.kinds.handlers import handler_map
    from sitedispatch.operations.worker import OperationsWorker, WorkerDeps

    return OperationsWorker(
        WorkerDeps(
            p.settings,
            p.operations,
            p.sites,
            p.commits,
            p.blobs,
            p.queue,
            p.clock,
            handler_map(),
            rng,
            p.publications,
            p.publication_queue,
            p.retry_budget,
            p.pace,
            p.drivers,
            p.outcomes,
            p.dependency_store,
        )
    )


def publisher(p: Ports, rng: random.Random) -> PublicationWorker:
    from sitedispatch.publication.worker import PublicationDeps, PublicationWorker

    return PublicationWorker(
        PublicationDeps(p.settings, p.sites, p.publications, p.blobs, p.publication_queue, p.clock, p.drivers, rng)
    )


def events_worker(p: Ports) -> EventsWorker:
    from sitedispatch.events.worker import EventsDeps, EventsWorker

    return EventsWorker(EventsDeps(p.events, p.event_bus, p.webhooks, p.webhook_queue))


def deliverer(p: Ports, sender: WebhookSender, policy: RetryPolicy, rng: random.Random) -> WebhookDeliverer:
    from sitedispatch.webhooks.deliverer import WebhookDeliverer, WebhookDeps

    return WebhookDeliverer(
        WebhookDeps(p.webhooks, p.events, p.webhook_secrets, sender, p.webhook_queue, p.clock, policy, rng)
    )
