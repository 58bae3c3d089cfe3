"""One seeded schedule of the whole dispatcher: a fleet drawn from the seed, its workload under faults, then the
faults stop and it settles; the invariants are checked after every step and at the end."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from random import Random
from typing import Any

from botocore.exceptions import ClientError

from chaos.invariants import DriverLedger, Violations, check_after
from sitedispatch import observability as obs
from sitedispatch.concurrency import run_serially
from sitedispatch.domain.errors import SiteDispatchError
from sitedispatch.domain.model import BULK, INTERACTIVE, RUNNABLE, PublicationStatus
from sitedispatch.domain.settings import Settings
from tests.factories import settings as base_settings
from tests.fakes import FakeClock, MemoryWorld

from .checks import StepChecks
from .faults import INDEX_LAG, LOST_SEND, REPLAY, FaultPlan, Gate
from .lambdas import Environment, Function, Lambdas, events_handler, operations_handler, publications_handler
from .queues import Fifo
from .scheduler import Scheduler, Trace
from .wiring import EVENTS, PUBLICATIONS, Core, make_queues
from .workload import Tenancy, Workload

START = 1_800_000_000.0
SETTLE_BOUND_S = 6 * 3600.0  # virtual time the fleet has to settle once faults stop
INDEX_LAG_S = 1.0  # the longest an index read lags the table
SCHEDULES = {"reconcile": 60.0, "wp-events": 60.0, "queue-repair": 300.0}  # resources.SCHEDULES' rates
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


def quiet_core() -> None:
    """The core's logs and metrics say nothing in a simulation (a hundred thousand schedules of them); its thread
    pools run serially."""
    run_serially()
    # Powertools prints a metric's hundredth value whatever POWERTOOLS_METRICS_DISABLED says: none is kept here
    obs.metrics.add_metric = lambda **_: None  # type: ignore[method-assign]
    obs.logger.setLevel(logging.CRITICAL)
    logging.disable(logging.CRITICAL)


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
        streams = {name: Random(root.getrandbits(64)) for name in ("shape", "schedule", "faults", "core", "work")}
        shape = streams["shape"]
        self.settings = drawn_settings(shape)
        self.tenancy = Tenancy.drawn(shape)
        self.work_s = shape.uniform(30.0, 300.0)
        submissions, actions = shape.randint(3, 16), shape.randint(0, 8)
        timeouts = {INTERACTIVE: shape.choice((30.0, 120.0)), BULK: shape.choice((60.0, 900.0)),
                    PUBLICATIONS: shape.choice((30.0, 120.0)), EVENTS: 30.0}  # fmt: skip
        concurrency = {INTERACTIVE: shape.randint(1, 4), BULK: shape.randint(1, 2),
                       PUBLICATIONS: shape.randint(1, 3), EVENTS: shape.randint(1, 2)}  # fmt: skip

        self.world = MemoryWorld(clock=FakeClock(START))
        self.clock = self.world.clock
        self.trace = Trace(keep=keep_trace)
        self.scheduler = Scheduler(streams["schedule"], self.clock, self.trace, self._failed)
        self.faults = FaultPlan.swarm(streams["faults"], self.settings.lease_seconds)
        self.violations = Violations()
        self.checks = StepChecks(self.world, self.tenancy.sites, self.violations)
        self.queues = make_queues(self.world, timeouts)
        self.core = Core(
            self.settings, self.world, self.queues, self.scheduler, self.faults, streams["core"], self.checks.seen
        )
        self.world.db.lagging_indexes = INDEX_LAG in self.faults.rates
        self.ledger = DriverLedger(started_at=START)
        self.workload = Workload(self.core, self.world, self.tenancy, streams["work"], self.ledger, self.violations)
        self.planned = self.workload.plan(self.work_s, submissions, actions)
        self.lambdas = Lambdas(self.scheduler, self.faults, self._failed)
        self._functions(timeouts, concurrency)
        self.shape = (
            f"{len(self.tenancy.sites)} sites, {len(set(self.tenancy.owner.values()))} principals, "
            f"{submissions} submissions, {actions} actions over {self.work_s:.0f} s; lease "
            f"{self.settings.lease_seconds:.0f} s, budget {self.settings.attempt_budget}, concurrency "
            f"{concurrency}; faults: {self.faults.describe()}"
        )

    def _functions(self, timeouts: dict[str, float], concurrency: dict[str, int]) -> None:
        core, rng = self.core, self.core.rng

        def environment(worker: Any, queue: Fifo) -> Environment:
            return Environment(worker, queue, lambda port: Gate("sqs", port, self.scheduler, self.faults), Random(rng.random()))

        for lane in (INTERACTIVE, BULK):
            queue = self.queues.lanes[lane]
            self.lambdas.add(Function(f"{lane}-worker", queue, timeouts[lane], concurrency[lane], 1,
                                      lambda queue=queue: environment(core.worker(), queue),
                                      operations_handler(self.lambdas)))  # fmt: skip
        self.lambdas.add(Function("publication-worker", self.queues.publications, timeouts[PUBLICATIONS],
                                  concurrency[PUBLICATIONS], 1,
                                  lambda: environment(core.publisher(), self.queues.publications),
                                  publications_handler(self.lambdas)))  # fmt: skip
        self.lambdas.add(Function("events-worker", self.queues.events, timeouts[EVENTS], concurrency[EVENTS], 10,
                                  lambda: environment(core.events_worker(), self.queues.events),
                                  events_handler(self.lambdas)))  # fmt: skip

    def _failed(self, where: str, exc: Exception) -> None:
        """An actor's call failed: an AWS error or the core's own refusal is an answer; anything else a defect."""
        if not isinstance(exc, ClientError | SiteDispatchError):
            self._unexpected(where, exc)

    def _unexpected(self, where: str, exc: BaseException) -> None:
        self.violations.add("the core raises only errors it knows", f"{where}: {type(exc).__name__}: {exc}")

    # -- the run -----------------------------------------------------------------------------------------------

    def run(self) -> Outcome:
        end_of_work = START + self.work_s
        timers = {name: START + self.scheduler.rng.uniform(0, every) for name, every in SCHEDULES.items()}
        planned = list(self.planned)
        settle_at = end_of_work
        last_propagated = START
        while True:
            now = self.clock.now()
            while planned and START + planned[0][0] <= now:
                _, what = planned.pop(0)
                self.scheduler.spawn(what.split(" ")[0], self.workload.body(what))
            if self.faults.on and now >= end_of_work:
                self.faults.on = False
            if not self.faults.on and now >= settle_at:
                self.scheduler.spawn("settle", self.workload.body("settle"))
                settle_at = now + SETTLE_EVERY_S
            for name, due in timers.items():
                if due <= now:
                    self.scheduler.spawn(name, self._sweep(name))
                    timers[name] = due + SCHEDULES[name]
            self.lambdas.poll()
            runnable = self.scheduler.runnable()
            if runnable:
                self.scheduler.step(self.scheduler.rng.choice(runnable))
                self._after_step()
                if self.world.db.lagging_indexes and (
                    self.clock.now() - last_propagated > INDEX_LAG_S or not self.faults.drawn(INDEX_LAG)
                ):
                    self.world.db.propagate()
                    last_propagated = self.clock.now()
                continue
            if not self.faults.on and not planned and self._settled():
                break
            if now - end_of_work > SETTLE_BOUND_S:
                break
            wakes = [self.scheduler.next_wake(), *(q.next_change() for q in self.queues.all())]
            wakes += [START + planned[0][0]] if planned else []
            wakes += [min(timers.values()), settle_at if not self.faults.on else end_of_work]
            self.clock.t = max(now, min(w for w in wakes if w is not None))
        return self._finish()

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
        if self.faults.drawn(REPLAY):
            queue = self.scheduler.rng.choice([*self.queues.lanes.values(), self.queues.publications])
            if queue.history:
                old = self.scheduler.rng.choice(queue.history)
                queue.send(old.body, old.group, f"replay-{self.trace.steps}")
        self.checks.after_step()

    def _settled(self) -> bool:
        db = self.world.db
        return (
            not self.scheduler.actors
            and all(op.status not in RUNNABLE for op in db.operations.values())
            and all(p.status in {PublicationStatus.PUBLISHED, PublicationStatus.SUPERSEDED}
                    for p in db.publications.values())  # fmt: skip
            and not db.undelivered
            and not any(q.depth() for q in (*self.queues.lanes.values(), self.queues.publications, self.queues.events))
        )

    def _finish(self) -> Outcome:
        self.scheduler.kill_all()
        self.world.db.lagging_indexes = False
        figures = check_after(self.world, self.settings, self.tenancy.sites, self.ledger, self.violations)
        figures.update(commits_checked=self.checks.commits, invocations=sum(f.invocations for f in self.lambdas.functions))
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
