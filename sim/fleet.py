"""One seeded schedule of the whole dispatcher: a fleet drawn from the seed, its workload under faults, then the
faults stop and it settles; the invariants are checked after every step and at the end."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from random import Random
from typing import Any

from botocore.exceptions import ClientError

from chaos.invariants import DriverLedger, Violations, check_after
from sitedispatch import observability as obs
from sitedispatch.concurrency import serially
from sitedispatch.domain.errors import SiteDispatchError
from sitedispatch.domain.events import EventType
from sitedispatch.domain.model import BULK, INTERACTIVE, RUNNABLE, PublicationStatus
from sitedispatch.domain.resources import FUNCTIONS
from sitedispatch.domain.resources import SCHEDULES as RESOURCE_SCHEDULES
from sitedispatch.domain.settings import Settings
from sitedispatch.domain.webhooks import Endpoint
from tests.factories import settings as base_settings
from tests.fakes import FakeClock, MemoryWorld

from .checks import StepChecks
from .dependencies import PAUSE_S, DependencyPlan, DependencyWatch, OutageDriver
from .faults import INDEX_LAG, LOST_SEND, REPLAY, SWEEP_NOW, FaultPlan, Gate
from .lambdas import (
    Environment,
    Function,
    Lambdas,
    events_handler,
    operations_handler,
    publications_handler,
    webhooks_handler,
)
from .queues import Fifo
from .receivers import Receivers, check_webhooks
from .scheduler import Scheduler, Trace
from .wiring import EVENTS, PUBLICATIONS, WEBHOOKS, Core, make_queues
from .workload import Tenancy, Workload

START = 1_800_000_000.0
SETTLE_BOUND_S = 6 * 3600.0  # virtual time the fleet has to settle once faults stop
INDEX_LAG_S = 1.0  # the longest an index read lags the table
SCHEDULES = {name: float(spec.rate_s) for name, spec in RESOURCE_SCHEDULES.items()}  # as the stack schedules them
SETTLE_EVERY_S = 300.0  # the operator looks again (a site auto-paused meanwhile is resumed)


@dataclass
class Outcome:
    seed: int
    digest: str = ""
    steps: int = 0
    virtual_s: float = 0.0
    operations: int = 0
    violations: list[str] = field(default_factory=list)
    faults: dict[str, int] = field(default_factory=dict)
    figures: dict[str, int] = field(default_factory=dict)
    shape: str = ""
    trace: list[str] = field(default_factory=list)


class VirtualClock(FakeClock):
    """The fake clock without its lock: one thread reads it, and it is read at almost every line of the core."""

    def now(self) -> float:
        return self.t


@contextmanager
def quiet() -> Iterator[None]:
    """The core as the simulation runs it: its thread pools run serially, and its logs and metrics say nothing (a
    hundred thousand schedules of them). Everything is as it was after."""
    level = obs.logger.log_level
    # Powertools prints a metric's hundredth value whatever POWERTOOLS_METRICS_DISABLED says: none is kept here
    obs.metrics.add_metric = lambda **_: None  # type: ignore[method-assign]
    obs.logger.setLevel(logging.CRITICAL)
    logging.disable(logging.CRITICAL)
    try:
        with serially():
            yield
    finally:
        logging.disable(logging.NOTSET)
        obs.logger.setLevel(level)
        del obs.metrics.add_metric


def drawn_settings(rng: Random) -> Settings:
    lease = rng.choice((5.0, 15.0, 60.0))
    return base_settings(
        lease_seconds=lease,
        attempt_budget=rng.randint(2, 5),
        backoff_base_s=rng.choice((0.5, 2.0)),
        backoff_cap_s=60.0,
        defer_max_s=rng.choice((5.0, 30.0)),
        pause_deferral_s=rng.choice((30.0, 120.0)),
        publication_chunk_routes=rng.choice((2, 3, 5, 25)),
        import_step_items=rng.choice((3, 10, 50)),
        max_running_per_principal=rng.randint(1, 4),
        max_outstanding_per_principal=rng.choice((8, 50, 1000)),
        max_queued_per_site=rng.choice((3, 50)),
        auto_pause_failures=rng.randint(2, 6),
    )


class Simulation:
    def __init__(self, seed: int, keep_trace: int = 0) -> None:
        self.seed = seed
        root = Random(seed)
        names = ("shape", "schedule", "faults", "core", "work", "dependencies", "key_rates")
        streams = {name: Random(root.getrandbits(64)) for name in names}
        shape = streams["shape"]
        self.settings = drawn_settings(shape)
        self.tenancy = Tenancy.drawn(shape)
        self.work_s = shape.uniform(30.0, 300.0)
        submissions, actions = shape.randint(3, 16), shape.randint(0, 8)
        timeouts = {INTERACTIVE: shape.choice((30.0, 120.0)), BULK: shape.choice((60.0, 900.0)),
                    PUBLICATIONS: shape.choice((30.0, 120.0)), EVENTS: float(FUNCTIONS[EVENTS].timeout_s),
                    WEBHOOKS: float(FUNCTIONS[WEBHOOKS].timeout_s)}  # fmt: skip
        concurrency = {INTERACTIVE: shape.randint(1, 4), BULK: shape.randint(1, 2),
                       PUBLICATIONS: shape.randint(1, 3), EVENTS: shape.randint(1, 2),
                       WEBHOOKS: shape.randint(1, 2)}  # fmt: skip
        webhook_scale, failing = shape.choice((0.01, 0.1)), shape.choice((0.0, 0.1, 0.3))

        self.dependencies = DependencyPlan.drawn(streams["dependencies"], self.tenancy.sites).with_key_rates(
            streams["key_rates"], self.tenancy.tenants
        )
        self.settings = self.dependencies.settings_for(self.settings)
        self.world = MemoryWorld(clock=VirtualClock(START))
        self.dependencies.apply(self.world, self.tenancy.owner, START)
        self.clock = self.world.clock
        self.trace = Trace(keep=keep_trace)
        self.scheduler = Scheduler(streams["schedule"], self.clock, self.trace, self._failed)
        self.faults = FaultPlan.swarm(streams["faults"], self.settings.lease_seconds)
        self.violations = Violations()
        self.checks = StepChecks(self.world, self.tenancy.sites, self.violations)
        self.dependency_watch = DependencyWatch(self.world, self.dependencies, self.violations)
        self.queues = make_queues(self.world, timeouts)
        self.receivers = Receivers(Random(shape.getrandbits(64)), failing, self.faults)
        self.core = Core(
            self.settings,
            self.world,
            self.queues,
            self.scheduler,
            self.faults,
            streams["core"],
            self.checks.seen,
            self.receivers,
            webhook_scale,
        )
        if self.dependencies.outage is not None:
            self.core.drivers = {
                name: OutageDriver(driver, self.dependencies, self.clock, START)
                for name, driver in self.core.drivers.items()
            }
        self._endpoints(shape)
        self.world.db.lagging_indexes = INDEX_LAG in self.faults.rates
        self.ledger = DriverLedger(started_at=START)
        self.workload = Workload(self.core, self.world, self.tenancy, streams["work"], self.ledger, self.violations)
        self.planned = self.workload.plan(self.work_s, submissions, actions)
        self.planned = sorted([*self.planned, *self._dependency_pauses(streams["dependencies"])])
        self.lambdas = Lambdas(self.scheduler, self.faults, self._failed)
        self._functions(timeouts, concurrency)
        self.shape = (
            f"sites {len(self.tenancy.sites)}, principals {len(set(self.tenancy.owner.values()))}, "
            f"submissions {submissions}, operator actions {actions} over {self.work_s:.0f} s; lease "
            f"{self.settings.lease_seconds:.0f} s, budget {self.settings.attempt_budget}, concurrency "
            f"{concurrency}; faults: {self.faults.describe()}; dependencies: {self.dependencies.describe()}"
        )

    def _dependency_pauses(self, rng: Random) -> list[tuple[float, str]]:
        """An operator pauses a dependency now and then, and resumes it ten virtual minutes later; an owner moves a
        site to other dependencies (or none) now and then, its work outstanding or not."""
        if not self.dependencies.on:
            return []
        planned = []
        for _ in range(rng.randint(0, 2)):
            at, dependency_id = rng.uniform(1.0, self.work_s), rng.choice(sorted(self.dependencies.settings))
            planned += [(at, f"dependency_pause {dependency_id}"), (at + PAUSE_S, f"dependency_resume {dependency_id}")]
        for _ in range(rng.randint(0, 2)):
            planned.append((rng.uniform(1.0, self.work_s), f"dependency_move {rng.choice(self.tenancy.sites)}"))
        return planned

    def _functions(self, timeouts: dict[str, float], concurrency: dict[str, int]) -> None:
        """Each queue's consumer, as resources.FUNCTIONS defines it: (queue, batch size, what an environment's
        init builds, how an invocation handles its records)."""
        core, queues = self.core, self.queues
        consumers: dict[str, tuple[Fifo, int, Callable[[], Any], Callable[..., Any]]] = {
            INTERACTIVE: (queues.lanes[INTERACTIVE], 1, core.worker, operations_handler(self.lambdas)),
            BULK: (queues.lanes[BULK], 1, core.worker, operations_handler(self.lambdas)),
            PUBLICATIONS: (queues.publications, 1, core.publisher, publications_handler(self.lambdas)),
            EVENTS: (queues.events, FUNCTIONS[EVENTS].batch_size, core.events_worker, events_handler(self.lambdas)),
            WEBHOOKS: (queues.webhooks, 1, core.deliverer, webhooks_handler(self.lambdas)),
        }
        for name, (queue, batch, init, handle) in consumers.items():

            def build(queue: Fifo = queue, init: Callable[[], Any] = init) -> Environment:
                return Environment(init(), queue, self._sqs_gate, Random(core.rng.random()))

            self.lambdas.add(Function(f"{name}-worker", queue, timeouts[name], concurrency[name], batch, build, handle))

    def _sqs_gate(self, port: Any) -> Gate:
        return Gate("sqs", port, self.scheduler, self.faults)

    def _endpoints(self, shape: Random) -> None:
        """Some principals have webhook endpoints (every type, or some; every tenant, or one), made as the API
        makes them, before the workload starts."""
        for principal in sorted(set(self.tenancy.owner.values())):
            for _ in range(shape.choice((0, 1, 1, 2))):
                number = len(self.world.db.endpoints) + 1
                types = shape.choice([(), (EventType.OPERATION_SUCCEEDED, EventType.PUBLICATION_LIVE)])
                tenant = shape.choice([None, *[t for t in self.tenancy.tenants[principal] if t]])
                endpoint = Endpoint(f"whk_{number:024x}", principal, f"https://receiver-{number}.example/hook",
                                    START, 0, types, tenant)  # fmt: skip
                self.world.webhooks.create(endpoint)
                self.world.webhook_secrets.create(endpoint.endpoint_id)

    def _failed(self, where: str, exc: Exception) -> None:
        """An actor's call failed: an AWS error or the core's own refusal is an answer; anything else a defect."""
        if not isinstance(exc, ClientError | SiteDispatchError):
            self._unexpected(where, exc)

    def _unexpected(self, where: str, exc: BaseException) -> None:
        self.violations.add("the core raises only errors it knows", f"{where}: {type(exc).__name__}: {exc}")

    # -- the run -----------------------------------------------------------------------------------------------

    def run(self) -> Outcome:
        """Until the fleet has settled after the faults stopped (or the bound passed): start what is due, let the
        functions take their messages, then one step of an actor the seed picks, or on to the next thing due."""
        self._end_of_work = START + self.work_s
        self._timers = {name: START + self.scheduler.rng.uniform(0, every) for name, every in SCHEDULES.items()}
        self._planned = list(self.planned)
        self._settle_at = self._end_of_work
        self._propagated = START
        while True:
            self._start_due(self.clock.now())
            self.lambdas.poll()
            runnable = self.scheduler.runnable()
            if runnable:
                self.scheduler.step(self.scheduler.rng.choice(runnable))
                self._after_step()
            elif self._over():
                return self._finish()
            else:
                self.clock.t = max(self.clock.now(), self._next_due())

    def _start_due(self, now: float) -> None:
        while self._planned and START + self._planned[0][0] <= now:
            _, what = self._planned.pop(0)
            self.scheduler.spawn(what.split(" ")[0], self.workload.body(what))
        if self.faults.on and now >= self._end_of_work:
            self.faults.on = False
        if not self.faults.on and now >= self._settle_at:
            self.scheduler.spawn("settle", self.workload.body("settle"))
            self._settle_at = now + SETTLE_EVERY_S
        for name, due in self._timers.items():
            if due <= now:
                self.scheduler.spawn(name, self._sweep(name))
                self._timers[name] = due + SCHEDULES[name]

    def _over(self) -> bool:
        if self.clock.now() - self._end_of_work > SETTLE_BOUND_S:
            return True
        return not self.faults.on and not self._planned and self._settled()

    def _next_due(self) -> float:
        wakes = [self.scheduler.next_wake(), *(q.next_change() for q in self.queues.all())]
        wakes += [START + self._planned[0][0]] if self._planned else []
        wakes += [min(self._timers.values()), self._settle_at if not self.faults.on else self._end_of_work]
        return min(w for w in wakes if w is not None)

    def _sweep(self, schedule: str) -> Any:
        return lambda: self.core.reconciler().run(schedule)

    def _after_step(self) -> None:
        """What happens between steps: the events the step's transitions wrote are sent (or lost with their
        sender), a stray old message is sent again, and the step checks."""
        announced = self.world.db.announced
        while announced:
            message = announced.pop(0)
            if not self.faults.drawn(LOST_SEND):
                self.queues.events.send(message, message.principal, message.event_id)
        if self.world.db.lagging_indexes and (
            self.clock.now() - self._propagated > INDEX_LAG_S or not self.faults.drawn(INDEX_LAG)
        ):
            self.world.db.propagate()  # the indexes catch up (they lag by a step or two, never past INDEX_LAG_S)
            self._propagated = self.clock.now()
        if self.faults.drawn(SWEEP_NOW):
            self.scheduler.spawn("reconcile", self._sweep("reconcile"))
        if self.faults.drawn(REPLAY):
            queue = self.scheduler.rng.choice([*self.queues.lanes.values(), self.queues.publications])
            if queue.history:
                old = self.scheduler.rng.choice(queue.history)
                queue.send(old.body, old.group, f"replay-{self.trace.steps}")
        self.checks.after_step()
        self.dependency_watch.after_step()

    def _settled(self) -> bool:
        db = self.world.db
        return (
            not self.scheduler.actors
            and all(op.status not in RUNNABLE for op in db.operations.values())
            and all(
                p.status in {PublicationStatus.PUBLISHED, PublicationStatus.SUPERSEDED}
                for p in db.publications.values()
            )
            and not db.undelivered
            and not any(q.depth() for q in self.queues.main())
        )

    def _finish(self) -> Outcome:
        self.scheduler.kill_all()
        self.world.db.lagging_indexes = False
        figures = check_after(self.world, self.settings, self.tenancy.sites, self.ledger, self.violations)
        figures.update(check_webhooks(self.world, self.receivers, self.violations))
        figures.update(self.dependency_watch.final_figures())
        figures["invocations"] = sum(f.invocations for f in self.lambdas.functions)
        obs.metrics.clear_metrics()
        return Outcome(
            self.seed,
            self.trace.digest(),
            self.trace.steps,
            self.clock.now() - START,
            figures["operations"],
            list(self.violations.found),
            dict(self.faults.counts),
            figures,
            self.shape,
            list(self.trace.lines[-self.trace.keep :]) if self.trace.keep else [],
        )
