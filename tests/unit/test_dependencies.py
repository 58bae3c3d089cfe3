"""Dependencies in the core, on the in-memory ports: a cap defers a start without spending an attempt, a rate
reserves a start's exact time, the breaker opens on failures spread over its sites, one probe closes it."""

from __future__ import annotations

from typing import Any

from sitedispatch.domain.delivery import Outcome
from sitedispatch.domain.dependencies import BreakerState, Dependency, Rate
from sitedispatch.domain.errors import TransientError
from sitedispatch.domain.events import EventType
from sitedispatch.domain.model import Kind, Operation, Status
from sitedispatch.flow.admission import message_for
from sitedispatch.flow.counters import share_group, share_label
from sitedispatch.flow.shares import SiteLabels
from sitedispatch.operator.access import Caller
from tests.factories import present
from tests.fakes import RecordingVisibility
from tests.unit.conftest import OPERATOR, Harness

SITES = ("site-1", "site-2", "site-3")


def _on(harness: Harness, dependency: str, *sites: str) -> None:
    """Sites provisioned, then naming `dependency` (their owner's change)."""
    for site in sites:
        harness.provisioned(site)
        harness.controls().set_site_dependencies(Caller("tenant-a", False), site, [dependency], "on the cluster")


def _attempts(harness: Harness, operation_ids: list[str]) -> int:
    return sum(op.attempt for op in map(harness.world.operations.get, operation_ids) if op is not None)


def _due(harness: Harness, operation_id: str) -> None:
    """The clock at the operation's retry time (its backoff spent)."""
    row = harness.world.operations.get(operation_id)
    assert row is not None
    harness.world.clock.advance(max((row.not_before or 0.0) - harness.world.clock.now(), 0.0))


def _two_on_one_writer(h: Harness) -> tuple[str, str]:
    """Two publishes on sites of db:a, capped at one attempt at a time."""
    _on(h, "db:a", *SITES)
    h.world.dependency_store.put_settings("db:a", 1, (), "ops-alice", "one writer", 0.0)
    return (
        h.submit(site="site-1", kind="publish", params={}, key="p1"),
        h.submit(site="site-2", kind="publish", params={}, key="p2"),
    )


def test_a_full_cap_defers_a_start_with_no_attempt_spent_and_the_slot_is_free_again_at_the_commit() -> None:
    h = Harness()
    first, second = _two_on_one_writer(h)
    seen: dict[str, Any] = {}

    def meanwhile(inner: Any, ctx: Any, payload: Any) -> Any:
        if ctx.site.site_id == "site-1":  # while the first runs on db:a, the second is delivered
            seen["running"] = h.world.dependency_store.running(("db:a",))["db:a"]
            seen["second"] = h.deliver(second)[0]
        return inner(ctx, payload)

    h.wrap(Kind.PUBLISH, meanwhile)
    result, _ = h.deliver(first)
    assert result.outcome == Outcome.SUCCEEDED, result
    assert seen["running"] == 1
    assert seen["second"].outcome == Outcome.DEFERRED and seen["second"].reason == "dependency_cap"
    waiting = h.world.operations.get(second)
    assert waiting is not None and waiting.attempt == 0 and waiting.status == Status.QUEUED
    assert h.world.dependency_store.running(("db:a",))["db:a"] == 0  # released by the commit
    assert h.deliver(second)[0].outcome == Outcome.SUCCEEDED


def test_a_rate_reserves_the_next_start_at_its_exact_time_and_it_starts_then() -> None:
    h = Harness()
    _on(h, "db:a", "site-1", "site-2")
    h.world.dependency_store.put_settings("db:a", None, (Rate(1, 60.0),), "ops-alice", "one a minute", 0.0)
    assert h.deliver(h.submit(site="site-1", kind="publish", params={}, key="p1"))[0].outcome == Outcome.SUCCEEDED
    second = h.submit(site="site-2", kind="publish", params={}, key="p2")
    result, visibility = h.deliver(second)
    assert result.outcome == Outcome.DEFERRED and result.reason == "dependency_rate"
    row = h.world.operations.get(second)
    assert row is not None and row.attempt == 0 and row.not_before is not None
    assert 59.0 <= row.not_before - h.world.clock.now() <= 60.0  # one interval after the first start
    assert visibility.changes and visibility.changes[-1] >= row.not_before - h.world.clock.now()
    h.world.clock.advance(row.not_before - h.world.clock.now())
    assert h.deliver(second)[0].outcome == Outcome.SUCCEEDED


def test_failures_spread_over_its_sites_open_the_breaker_and_its_one_probe_closes_it() -> None:
    h = Harness()
    _on(h, "db:a", *SITES)
    down = {"down": True}

    def flaky(inner: Any, ctx: Any, payload: Any) -> Any:
        if down["down"]:
            raise TransientError("database cluster unavailable")
        return inner(ctx, payload)

    h.wrap(Kind.PUBLISH, flaky)
    ops = [h.submit(site=site, kind="publish", params={}, key=f"p-{site}") for site in SITES]
    threshold = h.settings.dependency_failures_to_open
    failures = 0
    while (h.world.dependency_store.get("db:a") or Dependency("db:a")).state == BreakerState.CLOSED:
        op = ops[failures % len(ops)]
        _due(h, op)
        result, _ = h.deliver(op)
        assert result.outcome == Outcome.RETRYING, result
        failures += 1
        assert failures <= threshold, "the breaker did not open at its threshold"
    dependency = h.world.dependency_store.get("db:a")
    assert dependency is not None and dependency.state == BreakerState.OPEN and len(dependency.evidence) == threshold
    assert failures == threshold
    paused = [e for e in h.world.db.events.values() if e.event.type == EventType.DEPENDENCY_PAUSED]
    assert [e.event.principal for e in paused] == ["tenant-a"]
    attempts = _attempts(h, ops)

    # Open: every site's work waits, no attempt spent; past the cooldown one start probes, and its success closes it.
    for op in ops:
        _due(h, op)
        result, _ = h.deliver(op)
        assert result.outcome == Outcome.DEFERRED and result.reason == "dependency_open", result
    down["down"] = False
    h.world.clock.advance(h.settings.dependency_cooldown_s + h.settings.backoff_cap_s)
    assert h.deliver(ops[0])[0].outcome == Outcome.SUCCEEDED
    closed = h.world.dependency_store.get("db:a")
    assert closed is not None and closed.state == BreakerState.CLOSED
    resumed = [e for e in h.world.db.events.values() if e.event.type == EventType.DEPENDENCY_RESUMED]
    assert [e.event.detail["by"] for e in resumed] == ["breaker"]
    for op in ops[1:]:
        assert h.deliver(op)[0].outcome == Outcome.SUCCEEDED
    assert _attempts(h, ops) == attempts + len(ops)


def test_an_operators_pause_holds_every_sites_work_and_its_resume_lets_it_start() -> None:
    h = Harness()
    _on(h, "db:a", "site-1")
    paused = h.world.dependency_store.pause("db:a", "cluster maintenance", "ops-alice", 0.0)
    assert paused is not None and paused.state == BreakerState.PAUSED
    assert h.world.dependency_store.pause("db:a", "again", "ops-alice", 0.0) is None
    op = h.submit(site="site-1", kind="publish", params={}, key="p1")
    for _ in range(3):
        result, _ = h.deliver(op)
        assert result.outcome == Outcome.DEFERRED and result.reason == "dependency_paused"
    assert h.world.operations.get(op).attempt == 0  # type: ignore[union-attr]
    assert h.world.dependency_store.resume("db:a", "ops-alice", 1.0) is not None
    assert h.deliver(op)[0].outcome == Outcome.SUCCEEDED


def test_a_dependency_slot_leaked_by_a_bug_is_repaired_by_the_recount_and_one_held_is_not() -> None:
    from tests.unit.conftest import reconciler

    h = Harness()
    _on(h, "db:a", "site-1")
    h.world.dependency_store.put_settings("db:a", 2, (), "ops-alice", "two writers", 0.0)
    held: dict[str, Any] = {}

    def look(inner: Any, ctx: Any, payload: Any) -> Any:
        held["slots"] = ctx.operation.dependency_slots
        held["repaired"] = reconciler(h).repair_counters()  # while it runs: its slot is what its row holds
        return inner(ctx, payload)

    h.wrap(Kind.PUBLISH, look)
    leaked = "deprun#db:a#1"
    h.world.db.bump(leaked, +1, h.world.clock.now())
    h.world.clock.advance(600)  # quiet
    assert h.deliver(h.submit(site="site-1", kind="publish", params={}, key="p1"))[0].outcome == Outcome.SUCCEEDED
    assert len(held["slots"]) == 1 and held["repaired"] == 1  # the leaked one, not the one held
    assert h.world.dependency_store.running(("db:a",))["db:a"] == 0


def test_a_site_deleted_or_moved_off_a_dependency_is_no_longer_among_its_sites_nor_its_owner_told() -> None:
    h = Harness()
    owner = Caller("tenant-a", False)
    for site in ("site-1", "site-2"):
        h.registered(site)
        h.controls().set_site_dependencies(owner, site, ["db:a"], "on the cluster")
    store = h.world.dependency_store
    assert (store.get("db:a") or Dependency("db:a")).sites == {"site-1", "site-2"}
    h.controls().delete_site(owner, "site-1", "registered by mistake")
    after = store.get("db:a") or Dependency("db:a")
    assert after.sites == {"site-2"} and after.principals == {"tenant-a"}  # its other site still names it
    h.controls().set_site_dependencies(owner, "site-2", [], "moved")
    gone = store.get("db:a") or Dependency("db:a")
    assert gone.sites == frozenset() and gone.principals == frozenset()


def test_a_fairness_keys_rate_set_through_quotas_reserves_its_next_start_and_leaves_other_keys_alone() -> None:
    h = Harness()
    for site in ("site-1", "site-2"):
        h.provisioned(site)
    h.provisioned("site-b")
    operator = Caller("ops-alice", operator=True)
    limits = h.controls().set_quota(
        operator, "tenant-a", max_outstanding=None, max_running=None, reason="one a minute", rates=(Rate(1, 60.0),)
    )
    assert limits.rates == ["1 per minute (burst 1, all)"]
    assert h.deliver(h.submit(site="site-1", kind="publish", params={}, key="p1"))[0].outcome == Outcome.SUCCEEDED
    second = h.submit(site="site-2", kind="publish", params={}, key="p2")
    result, _ = h.deliver(second)
    assert result.outcome == Outcome.DEFERRED and result.reason == "dependency_rate"
    row = h.world.operations.get(second)
    assert row is not None and row.attempt == 0 and row.not_before is not None
    assert 59.0 <= row.not_before - h.world.clock.now() <= 60.0
    # another principal's work is not held by tenant-a's rate
    h.world.sites.register("site-c", "tenant-c", h.world.clock.now())
    other = h.submit(site="site-c", kind="provision", key="c1", principal="tenant-c")
    assert h.deliver(other)[0].outcome == Outcome.SUCCEEDED
    h.world.clock.advance(row.not_before - h.world.clock.now())
    assert h.deliver(second)[0].outcome == Outcome.SUCCEEDED
    cleared = h.controls().clear_quota(operator, "tenant-a", "no more")
    assert cleared.rates == []


def test_a_keys_work_on_another_dependency_has_its_own_share_and_never_waits_behind_the_work_one_holds() -> None:
    """One key's seven publishes on db:a (cap 1) fill its share of db:a's work (four places) and three wait; its
    publishes on db:b and on a site naming none, submitted last, are sent at once (shares of their own sets) and
    run while the first on db:a still runs."""
    h = Harness(max_running_per_principal=2)
    on_a = [f"a-{i}" for i in range(7)]
    _on(h, "db:a", *on_a)
    _on(h, "db:b", "b-0")
    h.provisioned("plain")
    h.world.dependency_store.put_settings("db:a", 1, (), "ops-alice", "one writer", 0.0)
    h.world.queue.sent.clear()
    first, *held = [h.submit(site=site, kind="publish", params={}, key=site) for site in on_a]
    other, plain = (h.submit(site=site, kind="publish", params={}, key=site) for site in ("b-0", "plain"))
    key = "queued#operations#tenant-a#tenant-a"
    assert [m.message.operation_id for m in h.world.queue.sent] == [first, *held[:3], other, plain]
    assert h.world.db.waiting_total(f"{key}#db:a") == 3
    assert [m.message.deps for m in h.world.queue.sent] == ["db:a"] * 4 + ["db:b", ""]
    assert h.world.db.total(f"{key}#db:b") == 1 and h.world.db.total(key) == 1
    outcomes: dict[str, Any] = {}

    def meanwhile(inner: Any, ctx: Any, payload: Any) -> Any:
        if ctx.site.site_id == "a-0":  # while it runs on db:a
            outcomes.update({o: h.deliver(o)[0] for o in (held[0], other, plain)})
        return inner(ctx, payload)

    h.wrap(Kind.PUBLISH, meanwhile)
    assert h.deliver(first)[0].outcome == Outcome.SUCCEEDED
    assert outcomes[held[0]].reason == "dependency_cap"
    assert outcomes[other].outcome == outcomes[plain].outcome == Outcome.SUCCEEDED  # not behind db:a's backlog
    assert h.world.db.total(f"{key}#db:b") == 0 and h.world.db.total(key) == 0


def test_a_start_a_rate_of_its_kind_holds_hands_its_share_place_to_the_sets_work_of_another_kind() -> None:
    """A rate on db:a's publishes (one an hour) holds the later of one key's seven publishes; its wp_cron on a db:a
    site, submitted last, waits in the same share. The first held start hands its place over the waiting publishes
    to the wp_cron, which runs while they wait; the publishes that follow keep their places (nothing of another
    kind waits), so the rest stay unsent, and none spends an attempt."""
    h = Harness(max_running_per_principal=2)
    on_a = [f"a-{i}" for i in range(8)]
    _on(h, "db:a", *on_a)
    h.world.dependency_store.put_settings(
        "db:a", None, (Rate(1, 3600.0, kind=Kind.PUBLISH),), "ops-alice", "one an hour", 0.0
    )
    h.world.queue.sent.clear()
    first, *held = [h.submit(site=site, kind="publish", params={}, key=site) for site in on_a[:7]]
    cron = h.submit(site=on_a[7], kind="wp_cron", params={}, key="cron")
    share = "queued#operations#tenant-a#tenant-a#db:a"
    assert [m.message.operation_id for m in h.world.queue.sent] == [first, *held[:3]]
    assert h.world.db.waiting_total(share) == 4
    assert h.deliver(first)[0].outcome == Outcome.SUCCEEDED
    outcomes = {o: h.deliver(o)[0] for o in held[:3]}
    # the first's end sent the oldest waiting; the first held start handed its place over to the wp_cron
    assert [m.message.operation_id for m in h.world.queue.sent][4:] == [held[3], cron]
    assert [outcomes[o].reason for o in held[:3]] == ["dependency_rate"] * 3
    assert present(h.world.operations.get(held[0])).share is None  # handed over: its end frees none
    assert all(present(h.world.operations.get(o)).share is not None for o in held[1:3])  # kept: none of another kind
    assert h.deliver(cron)[0].outcome == Outcome.SUCCEEDED
    assert h.world.queue.sent[-1].message.operation_id == held[4]  # the wp_cron's end gave its place on
    assert h.world.db.waiting_total(share) == 1  # the last publish waits unsent, costing nothing
    assert _attempts(h, held) == 0


def test_a_start_a_full_cap_holds_is_woken_by_the_end_that_frees_a_place_not_at_its_next_look() -> None:
    h = Harness()
    first, second = _two_on_one_writer(h)
    seen: dict[str, Any] = {}

    def meanwhile(inner: Any, ctx: Any, payload: Any) -> Any:
        if ctx.site.site_id == "site-1":
            visibility = RecordingVisibility("receipt-of-the-second")
            seen["held"] = h.worker().process(message_for(present(h.world.operations.get(second))), visibility)
            seen["woken"] = list(h.world.queue.woken)
        return inner(ctx, payload)

    h.wrap(Kind.PUBLISH, meanwhile)
    assert h.deliver(first)[0].outcome == Outcome.SUCCEEDED
    assert seen["held"].reason == "dependency_cap" and seen["woken"] == []  # kept, not woken while the cap is full
    assert h.world.queue.woken == [("operations", "receipt-of-the-second")]  # by the first's commit
    assert h.world.dependency_store.take_held("db:a", "operations") == ()  # taken: woken once


def test_an_operators_resume_wakes_every_start_the_pause_held() -> None:
    h = Harness()
    _on(h, "db:a", "site-1", "site-2")
    h.controls().set_dependency_paused(OPERATOR, "db:a", True, "cluster maintenance")
    for n, site in enumerate(("site-1", "site-2")):
        op = h.submit(site=site, kind="publish", params={}, key=site)
        visibility = RecordingVisibility(f"receipt-{n}")
        result = h.worker().process(message_for(present(h.world.operations.get(op))), visibility)
        assert result.reason == "dependency_paused" and visibility.changes[-1] >= 200  # a long wait
    assert h.world.queue.woken == []
    h.controls().set_dependency_paused(OPERATOR, "db:a", False, "maintenance over")
    assert sorted(h.world.queue.woken) == [("operations", "receipt-0"), ("operations", "receipt-1")]


def test_a_sites_dependency_set_is_learned_from_one_refusal_and_a_change_waits_for_its_work_to_end() -> None:
    """A submitter that has not seen a site is told its set by one refused transaction, then asks no more; a change
    of the site's dependencies while work of it is outstanding leaves that work, and work submitted meanwhile, in
    the old set's share (in order), and the end of its last operation moves the site to the new set."""
    h = Harness()
    _on(h, "db:a", "s-1")
    creates: list[str] = []
    create = h.world.operations.create

    def counted(op: Operation, *args: Any, **kwargs: Any) -> Operation:
        creates.append(op.operation_id)
        return create(op, *args, **kwargs)

    h.world.operations.create = counted  # type: ignore[method-assign]
    h.submitter.deps.labels = SiteLabels()  # a process that has not seen the site
    first = h.submit(site="s-1", kind="publish", params={}, key="first")
    second = h.submit(site="s-1", kind="publish", params={}, key="second")
    assert creates == [first, first, second]  # refused once (LabelMoved, nothing written), then known
    on_a = share_group("operations", "tenant-a", "tenant-a", h.settings.max_running_per_principal, "db:a")
    assert on_a.index_of(present(h.world.operations.get(first)).share or "") is not None
    h.controls().set_site_dependencies(Caller("tenant-a", False), "s-1", ["db:b"], "moved")
    third = h.submit(site="s-1", kind="publish", params={}, key="third")
    assert [share_label(present(h.world.operations.get(o)).share) for o in (first, second, third)] == ["db:a"] * 3
    assert [m.message.deps for m in h.world.queue.sent[-3:]] == ["db:a"] * 3
    for operation_id in (first, second, third):  # in order; the last one's end moves the site to db:b
        assert h.deliver(operation_id)[0].outcome == Outcome.SUCCEEDED
    creates.clear()
    fourth = h.submit(site="s-1", kind="publish", params={}, key="fourth")
    assert creates == [fourth, fourth]  # the process believed db:a: told db:b once
    assert share_label(present(h.world.operations.get(fourth)).share) == "db:b"
