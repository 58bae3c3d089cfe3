"""One thread, many actors: each actor (a Lambda invocation, the producer, the operator, the reconciler) is a greenlet
that runs until its next port call, where it hands control back; the seeded loop then picks who goes next and how far
virtual time moves. Nothing else decides an interleaving, so a seed replays its schedule exactly."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from random import Random
from typing import Any

from greenlet import greenlet

from tests.fakes import FakeClock

STEP_MEAN_S = 0.01  # how long a port call takes, on average, in virtual time


class Crash(BaseException):
    """The death of an actor (a SIGKILL, Lambda stopping an invocation at its timeout): not an Exception, so the
    core's handlers never catch it, and every port call it would make on its way out is refused."""


@dataclass(eq=False)
class Actor:
    name: str
    body: Callable[[], None]
    wake_at: float
    deadline: float | None = None  # Lambda stops the invocation here (its function timeout)
    dead: bool = False
    glet: greenlet | None = None
    on_exit: Callable[[Actor], None] | None = None
    leases: set[tuple[str, int]] = field(default_factory=set)  # (site, fence) granted to this actor


@dataclass
class Trace:
    """Every step, as the digest sees it; the last `keep` kept in full for a failure's account."""

    keep: int = 0
    steps: int = 0
    lines: list[str] = field(default_factory=list)
    _hash: Any = field(default_factory=hashlib.sha256)

    def add(self, line: str) -> None:
        self.steps += 1
        self._hash.update(line.encode())
        self._hash.update(b"\n")
        if self.keep:
            self.lines.append(line)
            if len(self.lines) > 2 * self.keep:
                del self.lines[: -self.keep]

    def digest(self) -> str:
        return self._hash.hexdigest()


class Scheduler:
    def __init__(self, rng: Random, clock: FakeClock, trace: Trace, failed: Callable[[str, Exception], None]) -> None:
        self.rng, self.clock, self.trace, self.failed = rng, clock, trace, failed
        self.hub = greenlet.getcurrent()
        self.actors: list[Actor] = []
        self.current: Actor | None = None
        self.spawned = 0

    def spawn(self, name: str, body: Callable[[], None], deadline: float | None = None, **kw: Any) -> Actor:
        self.spawned += 1
        actor = Actor(f"{name}#{self.spawned}", body, self.clock.now(), deadline, **kw)
        actor.glet = greenlet(self._main(actor), parent=self.hub)
        self.actors.append(actor)
        return actor

    def _main(self, actor: Actor) -> Callable[[], None]:
        def run() -> None:
            try:
                actor.body()
            except Crash:
                actor.dead = True
            except Exception as exc:  # what a caller of the API would see as its answer (or a defect: `failed` says)
                self.failed(actor.name, exc)

        return run

    def point(self, label: str) -> Actor | None:
        """An actor's port call: back to the loop, which resumes it when it chooses. Raises Crash for an actor
        killed meanwhile or past its deadline (outside any actor, for the checker and the set-up: nothing)."""
        actor = self.current
        if actor is None:
            return None
        if actor.dead:
            raise Crash
        self.trace.add(f"{self.clock.now():.3f} {actor.name} {label}")
        self.hub.switch()
        if actor.dead or (actor.deadline is not None and self.clock.now() >= actor.deadline):
            actor.dead = True
            raise Crash
        return actor

    def park(self, actor: Actor, until: float) -> None:
        """The current actor stops until `until` (a pause past its lease: a stalled process, a long GC)."""
        actor.wake_at = until
        self.hub.switch()
        if actor.dead or (actor.deadline is not None and self.clock.now() >= actor.deadline):
            actor.dead = True
            raise Crash

    def runnable(self) -> list[Actor]:
        now = self.clock.now()
        return [a for a in self.actors if a.wake_at <= now]

    def next_wake(self) -> float | None:
        return min((a.wake_at for a in self.actors), default=None)

    def step(self, actor: Actor) -> None:
        """Run `actor` to its next port call (or its end), then move virtual time on a little."""
        self.current = actor
        assert actor.glet is not None
        actor.glet.switch()
        self.current = None
        if actor.glet.dead:
            self.actors.remove(actor)
            if actor.on_exit is not None:
                actor.on_exit(actor)
        self.clock.advance(self.rng.expovariate(1 / STEP_MEAN_S))

    def kill_all(self) -> None:
        """Every actor dies where it stands (each is resumed once to unwind: it makes no port call on its way)."""
        for actor in list(self.actors):
            actor.dead = True
            actor.wake_at = 0.0
        while self.actors:
            self.step(self.actors[0])
