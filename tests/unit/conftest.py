from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from sitedispatch.handlers import handler_map
from sitedispatch.model import Kind, QueueMessage
from sitedispatch.submission import SubmitDeps, Submitter
from sitedispatch.worker import OperationsWorker, Result, WorkerDeps
from tests.factories import PROVISION, settings
from tests.fakes import MemoryWorld, RecordingVisibility


class Harness:
    """The core wired to in-memory ports: submit, then deliver messages to one or more workers."""

    def __init__(self, **policy: Any) -> None:
        self.world = MemoryWorld()
        self.settings = settings(**policy)
        self.handlers = dict(handler_map())
        w = self.world
        self.submitter = Submitter(SubmitDeps(self.settings, w.operations, w.sites, w.blobs, w.queue, w.clock))

    def worker(self, seed: int = 7) -> OperationsWorker:
        w = self.world
        return OperationsWorker(WorkerDeps(self.settings, w.operations, w.sites, w.commits, w.blobs, w.queue,
                                           w.clock, self.handlers, random.Random(seed)))

    def submit(self, site: str = "acme-blog", kind: str = "provision", key: str | None = None,
               params: dict[str, Any] | None = None, principal: str = "tenant-a") -> str:
        return self.submitter.submit(kind=kind, site_id=site, principal=principal, params=params or PROVISION,
                                     idempotency_key=key).operation.operation_id

    def deliver(self, operation_id: str, worker: OperationsWorker | None = None) -> tuple[Result, RecordingVisibility]:
        op = self.world.operations.get(operation_id)
        assert op is not None
        visibility = RecordingVisibility()
        return (worker or self.worker()).process(QueueMessage(operation_id, op.site_id), visibility), visibility

    def wrap(self, kind: Kind, around: Callable[..., Any]) -> None:
        inner = self.handlers[kind]
        self.handlers[kind] = lambda ctx, payload: around(inner, ctx, payload)


@pytest.fixture
def harness() -> Harness:
    return Harness()
