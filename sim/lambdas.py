"""Lambda's side of the queues, as `sitedispatch/functions/*` and SQS event source mappings behave: a poller per
queue receives while the function has concurrency to spare, each invocation runs in an execution environment (warm
ones are reused with what they cached; a crashed one is replaced), and the mapping deletes what the function
reports done."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from random import Random
from typing import Any

from sitedispatch.aws.sqs import MAX_VISIBILITY_S
from sitedispatch.domain.model import QueueMessage
from sitedispatch.functions.events_worker import RETRY_S
from sitedispatch.functions.webhooks_worker import FAILED_WAKE_S

from .faults import LOST_DELETE, FaultPlan
from .queues import Fifo, Message, SimVisibility
from .scheduler import Actor, Scheduler


@dataclass
class Environment:
    """An execution environment: the core object its init built (kept while it stays warm), and its queue."""

    worker: Any
    queue: Fifo
    gate: Callable[[Any], Any]  # puts a port (the visibility of a received message) behind the gate
    rng: Random

    def visibility(self, message: Message, handle: int) -> Any:
        return self.gate(SimVisibility(self.queue, message, handle))


@dataclass
class Function:
    """One function and its event source: `handle(environment, received)` runs one invocation."""

    name: str
    queue: Fifo
    timeout_s: float
    concurrency: int
    batch_size: int
    build: Callable[[], Environment]  # a new execution environment
    handle: Callable[[Environment, list[tuple[Message, int]], float], list[tuple[Message, int]]]  # -> to delete
    idle: list[Environment] = field(default_factory=list)
    running: int = 0
    invocations: int = 0


class Lambdas:
    def __init__(self, scheduler: Scheduler, faults: FaultPlan, unexpected: Callable[[str, Exception], None]):
        self.scheduler, self.faults, self.unexpected = scheduler, faults, unexpected
        self.functions: list[Function] = []

    def add(self, function: Function) -> None:
        self.functions.append(function)

    def poll(self) -> None:
        """Every function with concurrency to spare takes what its queue hands out."""
        for fn in self.functions:
            while fn.running < fn.concurrency:
                received = fn.queue.receive(fn.batch_size)
                if not received:
                    break
                self._invoke(fn, received)

    def _invoke(self, fn: Function, received: list[tuple[Message, int]]) -> None:
        environment = fn.idle.pop() if fn.idle else fn.build()
        fn.running += 1
        fn.invocations += 1
        deadline = self.scheduler.clock.now() + fn.timeout_s
        outcome: dict[str, list[tuple[Message, int]]] = {}

        def body() -> None:
            outcome["done"] = fn.handle(environment, received, deadline)

        def ended(actor: Actor) -> None:
            fn.running -= 1
            if actor.dead:
                return  # the environment died with it; its messages come back when their visibility ends
            fn.idle.append(environment)
            for message, handle in outcome.get("done", []):
                if self.faults.drawn(LOST_DELETE):
                    continue
                fn.queue.delete(message, handle)

        self.scheduler.spawn(fn.name, body, deadline, on_exit=ended)

    def failed(self, where: str, exc: Exception) -> None:
        """A record the function reports failed. The core answers what it knows with a Result and lets an AWS
        error through; anything else is a defect the simulation reports."""
        self.unexpected(where, exc)


def operations_handler(lambdas: Lambdas) -> Callable[..., list[tuple[Message, int]]]:
    """functions/operations_worker.py: one record at a time; a record not done stays with the visibility the
    core set; after a failure the group's later records in the batch are failed too (skip_group_on_error)."""

    def handle(env: Environment, received: list[tuple[Message, int]], deadline: float) -> list[tuple[Message, int]]:
        done, failed_groups = [], set()
        for message, handle in received:
            if message.group in failed_groups:
                continue
            body = message.body
            if not isinstance(body, QueueMessage):
                done.append((message, handle))  # malformed: dropped loudly
                continue
            try:
                result = env.worker.process(
                    body, env.visibility(message, handle), f"req-{handle}", deadline, receive_count=message.receives
                )
            except Exception as exc:
                lambdas.failed(f"operations worker on {body.operation_id}", exc)
                failed_groups.add(message.group)
                continue
            if result.outcome.delete_message:
                done.append((message, handle))
            else:
                failed_groups.add(message.group)
        return done

    return handle


def publications_handler(lambdas: Lambdas) -> Callable[..., list[tuple[Message, int]]]:
    """functions/publication_worker.py: a record is done unless the core raised."""

    def handle(env: Environment, received: list[tuple[Message, int]], deadline: float) -> list[tuple[Message, int]]:
        done = []
        for message, handle in received:
            try:
                env.worker.process(message.body, env.visibility(message, handle), message.receives)
            except Exception as exc:
                lambdas.failed(f"publication worker on {message.body}", exc)
                continue
            done.append((message, handle))
        return done

    return handle


def events_handler(lambdas: Lambdas) -> Callable[..., list[tuple[Message, int]]]:
    """functions/events_worker.py: the whole batch at once; a failure puts every record back after a short
    jittered wait."""

    def handle(env: Environment, received: list[tuple[Message, int]], deadline: float) -> list[tuple[Message, int]]:
        try:
            env.worker.process([message.body for message, _ in received])
        except Exception as exc:
            lambdas.failed("events worker", exc)
            for message, handle in received:
                env.visibility(message, handle).change(env.rng.uniform(1.0, RETRY_S))
            return []
        return received

    return handle


def webhooks_handler(lambdas: Lambdas) -> Callable[..., list[tuple[Message, int]]]:
    """functions/webhooks_worker.py: one wake of the endpoint; a wake that ends with an attempt due later keeps its
    message, invisible until then; one that raised comes back after a jittered wait."""

    def handle(env: Environment, received: list[tuple[Message, int]], deadline: float) -> list[tuple[Message, int]]:
        done = []
        for message, handle in received:
            try:
                wait = env.worker.wake(message.body).retry_in
            except Exception as exc:
                lambdas.failed(f"webhooks worker on {message.body.endpoint_id}", exc)
                wait = env.rng.uniform(*FAILED_WAKE_S)
            if wait is None:
                done.append((message, handle))
            else:
                env.visibility(message, handle).change(min(max(1.0, wait), MAX_VISIBILITY_S))
        return done

    return handle
