"""Starts on a site's dependencies through the deployed operations worker (its role, IAM judged): a full cap and a
paused dependency defer without an attempt, a rate reserves its place, and the slot taken is released."""

from __future__ import annotations

import time

from sitedispatch.aws.dependencies import DynamoDependencyStore
from sitedispatch.domain.dependencies import Rate
from sitedispatch.domain.model import Status
from sitedispatch.flow.dependencies import rate_key, running_shards
from tests.conftest import Cloud, pump
from tests.factories import PROVISION


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
