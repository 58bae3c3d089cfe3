"""Starts on a site's dependencies through the deployed operations worker (its role, IAM judged): a full cap and a
paused dependency defer without an attempt, a rate reserves its place, and the slot taken is released."""

from __future__ import annotations

import time
from typing import Any

import pytest

from sitedispatch.aws.dependencies import DynamoDependencyStore
from sitedispatch.domain.dependencies import BreakerState, Dependency, Rate
from sitedispatch.domain.errors import TransientError
from sitedispatch.domain.events import EventType
from sitedispatch.domain.model import Status
from sitedispatch.drivers.reference.driver import ReferenceDriver
from sitedispatch.flow.dependencies import rate_key, running_shards
from tests.conftest import Cloud, pump, wait_for
from tests.factories import PROVISION, present


def _site_on(cloud: Cloud, site: str, *dependencies: str) -> str:
    cloud.deps.sites.register(site, "p", time.time())
    cloud.deps.sites.set_dependencies(site, dependencies)
    return site


def _submit(cloud: Cloud, site: str) -> str:
    return (
        cloud.deps.submitter()
        .submit(kind="provision", site_id=site, principal="p", params=PROVISION)
        .operation.operation_id
    )


def test_a_full_cap_defers_without_an_attempt_and_a_start_takes_then_releases_its_slot(cloud: Cloud) -> None:
    store = DynamoDependencyStore(cloud.deps.models.Counter, cloud.deps.outbox)
    store.put_settings("db:a", 1, (), "ops", "one writer", time.time())
    C = cloud.deps.models.Counter
    C(running_shards("db:a")[0], value=1).save()  # an attempt of another site runs on it
    op_id = _submit(cloud, _site_on(cloud, "dep-s1", "db:a"))
    pump(cloud)
    waiting = cloud.deps.operations.get(op_id)
    assert waiting is not None and waiting.status == Status.QUEUED and waiting.attempt == 0
    C(running_shards("db:a")[0], value=0).save()  # it ended (the deferred delivery comes back in its own time)
    next_id = _submit(cloud, _site_on(cloud, "dep-s1b", "db:a"))
    pump(cloud)
    done = cloud.deps.operations.get(next_id)
    assert done is not None and done.status == Status.SUCCEEDED and done.attempt == 1
    assert store.running(["db:a"]) == {"db:a": 0}  # its slot released with the commit


def test_a_paused_dependency_holds_work_and_a_rate_reserves_the_next_place(cloud: Cloud) -> None:
    store = DynamoDependencyStore(cloud.deps.models.Counter, cloud.deps.outbox)
    store.named(["db:b"], "p", "s-b", time.time())
    store.pause("db:b", "maintenance", "ops", time.time())
    held = _submit(cloud, _site_on(cloud, "dep-s2", "db:b"))
    pump(cloud)
    op = cloud.deps.operations.get(held)
    assert op is not None and op.status == Status.QUEUED and op.attempt == 0
    rate = Rate(1, 3600.0)
    store.put_settings("db:c", None, (rate,), "ops", "one an hour", time.time())
    first, second = _submit(cloud, _site_on(cloud, "dep-s3", "db:c")), _submit(cloud, _site_on(cloud, "dep-s4", "db:c"))
    pump(cloud)
    ran = cloud.deps.operations.get(first)
    later = cloud.deps.operations.get(second)
    assert ran is not None and ran.status == Status.SUCCEEDED
    assert later is not None and later.status == Status.QUEUED and later.attempt == 0
    assert later.not_before is not None and later.not_before > time.time() + 3500
    assert later.rate_reserved == {rate_key("db:c", rate): later.not_before}


def test_a_dependency_failing_for_every_site_opens_its_breaker_and_its_probe_closes_it(
    cloud: Cloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Publishes on three sites of db:x fail while it is down: the fourth failure (from more than one site) opens
    it, no attempt is spent while it is open, its sites' owner is told; once it is back the probe's commit closes
    it and every publish succeeds."""
    # the cooldown outlasts the pump that sees it open (on LocalStack a pump of deferrals takes over a second): no
    # probe runs while the dependency is still down
    policy = {"DEPENDENCY_FAILURES_TO_OPEN": "4", "DEPENDENCY_COOLDOWN_S": "5", "BACKOFF_BASE_S": "0.2"}
    for name, value in (policy | {"BACKOFF_CAP_S": "0.5"}).items():
        monkeypatch.setenv(f"SITEDISPATCH_{name}", value)  # read by the functions' settings
    store = DynamoDependencyStore(cloud.deps.models.Counter, cloud.deps.outbox)
    sites = [f"brk-{n}" for n in range(3)]
    for site in sites:
        _submit(cloud, site)
    pump(cloud)
    for site in sites:
        cloud.deps.sites.set_dependencies(site, ("db:x",))
        store.named(["db:x"], "p", site, time.time())
    down = {"now": True}
    publish = ReferenceDriver.publish

    def unavailable(self: ReferenceDriver, ctx: Any, payload: Any) -> Any:
        if down["now"]:
            raise TransientError("db:x unavailable")
        return publish(self, ctx, payload)

    monkeypatch.setattr(ReferenceDriver, "publish", unavailable)
    submitter = cloud.deps.submitter()
    ops = [
        submitter.submit(kind="publish", site_id=site, principal="p", params={}).operation.operation_id
        for site in sites
    ]

    def state() -> BreakerState:
        return (store.get("db:x") or Dependency("db:x")).state

    wait_for(lambda: pump(cloud) >= 0 and state() == BreakerState.OPEN, timeout_s=60, what="the breaker open")
    attempts = [present(cloud.deps.operations.get(op)).attempt for op in ops]
    assert sum(attempts) == 4 and max(attempts) <= 2, attempts  # the threshold, spread over the sites
    opened = present(store.get("db:x"))
    assert opened.changed_by == "breaker" and len(opened.evidence) == 4 and "4 failures from" in (opened.reason or "")
    down["now"] = False
    done = wait_for(
        lambda: (
            pump(cloud) >= 0 and all(present(cloud.deps.operations.get(op)).status == Status.SUCCEEDED for op in ops)
        ),
        timeout_s=60,
        what="every publish succeeded",
    )
    assert done and state() == BreakerState.CLOSED
    assert sum(present(cloud.deps.operations.get(op)).attempt for op in ops) == 4 + 3  # one more each, the probe's
    told = [entry.event.type for entry in cloud.deps.events.read("p", 0, 100)]
    assert EventType.DEPENDENCY_PAUSED in told and EventType.DEPENDENCY_RESUMED in told
