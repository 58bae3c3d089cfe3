"""The DynamoDB dependency store on the local cloud: settings, the breaker's states and flags, failure windows."""

from __future__ import annotations

from sitedispatch.aws.dependencies import DynamoDependencyStore
from sitedispatch.domain.dependencies import BreakerState, Rate
from sitedispatch.domain.model import Kind
from sitedispatch.flow.dependencies import rate_key, running_shards
from tests.conftest import Cloud


def _store(cloud: Cloud) -> DynamoDependencyStore:
    return DynamoDependencyStore(cloud.deps.models.Counter, cloud.deps.outbox)


def test_settings_are_kept_listed_and_read_with_the_running_shards_and_buckets_in_one_reading(cloud: Cloud) -> None:
    store = _store(cloud)
    rate = Rate(20, 60.0, 5)
    store.named(["db:a", "php:p"], "alice", "s-1", 1.0)
    dep = store.put_settings("db:a", 4, (rate, Rate(30, 3600.0, kind=Kind.IMPORT)), "ops", "protect the cluster", 2.0)
    assert dep.max_running == 4 and dep.rates[0] == rate and dep.principals == frozenset({"alice"})
    assert [d.dependency_id for d in store.list()] == ["db:a", "php:p"]
    C = cloud.deps.models.Counter
    C(running_shards("db:a")[1], value=2).save()
    C(rate_key("db:a", rate), tat=12.5).save()
    reading = store.read(["db:a", "php:p"], Kind.PUBLISH)
    assert reading.running == {"db:a": 2, "php:p": 0}
    assert reading.tats == {rate_key("db:a", rate): 12.5}
    assert reading.dependency("db:a").max_running == 4 and reading.dependency("php:p").max_running is None


def test_a_pause_blocks_every_running_shard_and_tells_each_principal_and_a_resume_clears_it(cloud: Cloud) -> None:
    store = _store(cloud)
    store.named(["db:a"], "alice", "s-1", 1.0)
    store.named(["db:a"], "bob", "s-2", 1.0)
    paused = store.pause("db:a", "maintenance", "ops", 5.0)
    assert paused is not None and paused.state == BreakerState.PAUSED and paused.reason == "maintenance"
    assert store.pause("db:a", "again", "ops", 6.0) is None  # already paused: no second event
    C = cloud.deps.models.Counter
    assert all(C.get(shard).blocked for shard in running_shards("db:a"))
    events = {(e.principal, e.type) for e in cloud.deps.models.Event.scan()}
    assert {("alice", "dependency.paused"), ("bob", "dependency.paused")} <= events
    resumed = store.resume("db:a", "ops", 7.0)
    assert resumed is not None and resumed.state == BreakerState.CLOSED
    assert not any(C.get(shard).blocked for shard in running_shards("db:a"))
    assert store.resume("db:a", "ops", 8.0) is None


def test_the_breaker_opens_elects_one_probe_and_a_failed_probe_doubles_the_cooldown(cloud: Cloud) -> None:
    store = _store(cloud)
    for i, site in enumerate(["s1", "s2", "s1"]):
        failure = {"principal": "p", "site_id": site, "operation_id": f"op-{i}", "code": "unreachable", "at": 100.0 + i}
        count, sites, recent = store.record_failure("db:a", failure, 100.0 + i, window_s=60)
    assert (count, sites) == (3, 2) and [r["operation_id"] for r in recent] == ["op-0", "op-1", "op-2"]
    opened = store.open("db:a", "3 failures from 2 sites", recent, 103.0, 30.0)
    assert opened is not None and opened.state == BreakerState.OPEN and opened.reopen_at == 133.0
    assert store.open("db:a", "again", recent, 104.0, 30.0) is None
    assert not store.elect_probe("db:a", "op-9", 120.0, 60.0)  # still cooling down
    assert store.elect_probe("db:a", "op-9", 133.0, 60.0)
    assert not store.elect_probe("db:a", "op-8", 134.0, 60.0)  # one probe at a time
    C = cloud.deps.models.Counter
    assert {C.get(shard).probe for shard in running_shards("db:a")} == {"op-9"}
    assert store.probe_failed("db:a", "op-9", 140.0, 600.0)
    again = store.get("db:a")
    assert again is not None and again.state == BreakerState.OPEN and again.reopen_at == 200.0  # 60 s: doubled
    assert store.elect_probe("db:a", "op-8", 200.0, 60.0)
    closed = store.resume("db:a", "breaker", 201.0, probe="op-8")
    assert closed is not None and closed.state == BreakerState.CLOSED
