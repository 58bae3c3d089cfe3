from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sitedispatch.domain.delivery import Result
from sitedispatch.domain.model import WORDPRESS_DRIVER, Kind
from sitedispatch.drivers.reference.driver import reference_only
from sitedispatch.drivers.wordpress.credentials import Credentials
from sitedispatch.drivers.wordpress.driver import WordPressDriver
from sitedispatch.flow.admission import message_for
from sitedispatch.flow.minute_counts import MinuteCounts
from sitedispatch.flow.outcomes import Outcomes
from sitedispatch.flow.pace import Pace
from sitedispatch.flow.retry_budget import RetryBudget
from sitedispatch.kinds.contract import HandlerContext, Mutation, SiteDriver
from sitedispatch.kinds.handlers import HandlerFn, handler_map
from sitedispatch.operations.submission import SubmitDeps, Submitter
from sitedispatch.operations.worker import OperationsWorker, WorkerDeps
from sitedispatch.operator.access import Caller, ControlDeps
from sitedispatch.operator.controls import Controls
from sitedispatch.publication.worker import PublicationDeps, PublicationWorker
from sitedispatch.reconciler import Reconciler, ReconcilerDeps, wp_cron_submitter
from tests.factories import PROVISION, settings
from tests.fakes import MemoryMinuteBuckets, MemoryWorld, RecordingVisibility

OPERATOR = Caller("ops-alice", operator=True)


def every_driver() -> dict[str, SiteDriver]:
    """The drivers registration checks connections with (the workers here have the reference driver only)."""
    return {**reference_only(), WORDPRESS_DRIVER: WordPressDriver(Credentials())}


class Harness:
    """The core wired to in-memory ports: submit, then deliver messages to one or more workers."""

    def __init__(self, **policy: Any) -> None:
        self.world = MemoryWorld()
        self.settings = settings(**policy)
        self.handlers = dict(handler_map())
        self.drivers: dict[str, SiteDriver] = reference_only()  # the workers' (a deployment of reference sites)
        w = self.world
        self.submitter = Submitter(
            SubmitDeps(self.settings, w.operations, w.sites, w.blobs, w.queue, w.clock, self.pace(), every_driver())
        )

    def worker(self, seed: int = 7) -> OperationsWorker:
        w = self.world
        return OperationsWorker(
            WorkerDeps(
                self.settings,
                w.operations,
                w.sites,
                w.commits,
                w.blobs,
                w.queue,
                w.clock,
                self.handlers,
                random.Random(seed),
                w.publications,
                w.publication_queue,
                self.retry_budget(),
                self.pace(),
                self.drivers,
                Outcomes(MinuteCounts(MemoryMinuteBuckets(self.world.db))),
                w.dependency_store,
            )
        )

    def pace(self) -> Pace:
        return Pace(MinuteCounts(MemoryMinuteBuckets(self.world.db)))

    def retry_budget(self) -> RetryBudget:
        return RetryBudget(
            MinuteCounts(MemoryMinuteBuckets(self.world.db)),
            self.settings.retry_budget_ratio,
            self.settings.retry_budget_min_retries,
        )

    def controls(self) -> Controls:
        w = self.world
        return Controls(
            ControlDeps(
                self.settings,
                w.operations,
                w.sites,
                w.blobs,
                w.queue,
                w.audit,
                w.clock,
                w.quotas,
                w.commits,
                w.publications,
                w.dependency_store,
            )
        )

    def publisher(self) -> PublicationWorker:
        w = self.world
        return PublicationWorker(
            PublicationDeps(
                self.settings, w.sites, w.publications, w.blobs, w.publication_queue, w.clock, reference_only()
            )
        )

    def drain_publications(self, order: Callable[[list[Any]], list[Any]] | None = None) -> int:
        """Deliver every queued publication message (in `order`, default FIFO) until none is left."""
        delivered = 0
        publisher = self.publisher()
        while self.world.publication_queue.sent:
            batch = list(self.world.publication_queue.sent)
            self.world.publication_queue.sent.clear()
            for message in order(batch) if order else batch:
                publisher.process(message)
                delivered += 1
        return delivered

    def submit(
        self,
        site: str = "acme-blog",
        kind: str = "provision",
        key: str | None = None,
        params: dict[str, Any] | None = None,
        principal: str = "tenant-a",
    ) -> str:
        return self.submitter.submit(
            kind=kind,
            site_id=site,
            principal=principal,
            params=PROVISION if params is None else params,
            idempotency_key=key,
        ).operation.operation_id

    def deliver(
        self,
        operation_id: str,
        worker: OperationsWorker | None = None,
        request_id: str = "",
        timeout_s: float | None = None,
    ) -> tuple[Result, RecordingVisibility]:
        """One delivery; `timeout_s`: the invocation's function timeout, from now on the fake clock."""
        op = self.world.operations.get(operation_id)
        assert op is not None
        visibility = RecordingVisibility()
        deadline = None if timeout_s is None else self.world.clock.now() + timeout_s
        result = (worker or self.worker()).process(message_for(op), visibility, request_id, deadline)
        return result, visibility

    def provisioned(self, site: str = "acme-blog") -> str:
        """A provisioned site with its first publication live."""
        result, _ = self.deliver(self.submit(site=site, key=f"provision-{site}"))
        assert result.outcome.value == "succeeded", result
        self.drain_publications()
        return site

    def run(self, kind: str, site: str = "acme-blog", key: str | None = None, **params: Any) -> Result:
        """Submit one operation of `kind` and deliver it once."""
        return self.deliver(self.submit(site=site, kind=kind, key=key, params=params))[0]

    def registered(self, site: str = "acme-blog", principal: str = "tenant-a") -> str:
        """A site registered (`sites register`), not provisioned: work other than a provision may be submitted."""
        self.world.sites.register(site, principal, self.world.clock.now())
        return site

    def import_file(self, path: Path, site: str = "acme-blog", key: str | None = None) -> Result:
        return self.run("import", site=site, key=key, **self.submitter.stage_upload(site, path, "tenant-a"))

    def fail_first(self, kind: Kind, *errors: Exception) -> None:
        """The kind's handler raises `errors` one per attempt, then works."""
        pending = iter(errors)

        def flaky(inner: Callable[..., Any], ctx: Any, payload: Any) -> Any:
            error = next(pending, None)
            if error:
                raise error
            return inner(ctx, payload)

        self.wrap(kind, flaky)

    def wrap(self, kind: Kind, around: Callable[[HandlerFn, HandlerContext, Any], Mutation]) -> None:
        inner = self.handlers[kind]
        self.handlers[kind] = lambda ctx, payload: around(inner, ctx, payload)


UNIT = Path(__file__).parent


def reconciler(harness: Harness) -> Reconciler:
    w = harness.world
    return Reconciler(
        ReconcilerDeps(
            harness.settings,
            w.operations,
            w.sites,
            w.publications,
            w.queue,
            w.publication_queue,
            w.blobs,
            w.clock,
            wp_cron_submitter(harness.submitter),
            w.events,
            w.event_queue,
            w.webhooks,
            w.webhook_queue,
        )
    )


def sweep(harness: Harness, schedule: str = "reconcile") -> dict[str, int]:
    result = reconciler(harness).run(schedule)
    assert result is not None and not result.truncated
    return result.repaired


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Unit tests run without the network (pytest-socket): one that reaches for a socket fails at once."""
    for item in items:
        if Path(str(item.path)).is_relative_to(UNIT):
            item.add_marker(pytest.mark.disable_socket)


@pytest.fixture
def harness() -> Harness:
    return Harness()


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "wxr"
THEME_TEST_DATA = FIXTURES / "themeunittestdata.wordpress.xml"  # WordPress's theme unit test data (see README)
