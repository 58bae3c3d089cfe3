"""Admission limits (backpressure, nothing written on refusal), cancellation, pause, auto-pause, supersession."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sitedispatch.domain.delivery import Outcome
from sitedispatch.domain.errors import Backpressure, Conflict, Forbidden, InvalidInput, PermanentError, TransientError
from sitedispatch.domain.model import REFERENCE_DRIVER, Kind, Status
from sitedispatch.drivers.reference.driver import ReferenceDriver
from sitedispatch.flow.admission import running_group_for
from sitedispatch.flow.counters import is_flow_counter
from sitedispatch.flow.estimates import DelayEstimate, estimated_delay_for
from sitedispatch.flow.placement import roomiest
from sitedispatch.kinds.contract import HandlerContext, Mutation
from sitedispatch.kinds.handlers import HandlerFn
from sitedispatch.operator.access import Caller
from tests.factories import PROVISION, present
from tests.unit.conftest import OPERATOR, THEME_TEST_DATA, Harness

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "wxr"


def refused(harness: Harness, **kwargs: object) -> Backpressure:
    with pytest.raises(Backpressure) as caught:
        harness.submitter.submit(**{"kind": "provision", "principal": "tenant-a", "params": PROVISION, **kwargs})  # type: ignore[arg-type]
    return caught.value


@pytest.mark.parametrize(
    ("limit", "policy", "submits"),
    [
        ("site", {"max_queued_per_site": 2}, [("acme-blog", "tenant-a")] * 3),
        (
            "principal",
            {"max_outstanding_per_principal": 2},
            [("site-one", "tenant-a"), ("site-two", "tenant-a"), ("site-three", "tenant-a")],
        ),
        (
            "global",
            {"max_outstanding_global": 2},
            [("site-one", "tenant-a"), ("site-two", "tenant-b"), ("site-three", "tenant-c")],
        ),
    ],
)
def test_a_full_limit_refuses_with_backpressure_and_writes_nothing(limit: str, policy: dict, submits: list) -> None:
    harness = Harness(**policy)
    for site, principal in submits[:-1]:
        harness.submit(site=site, principal=principal)
    ops_before = dict(harness.world.db.operations)
    sent_before = len(harness.world.queue.sent)
    site, principal = submits[-1]

    error = refused(harness, site_id=site, principal=principal)

    assert (error.limit, error.value, error.maximum) == (limit, 2, 2)
    assert error.retry_after_s >= 1 and error.estimated_delay_s is not None and error.estimated_delay_s > 0
    assert limit in str(error) and "retry in" in str(error)
    assert harness.world.db.operations == ops_before and len(harness.world.queue.sent) == sent_before


def test_terminal_operations_release_their_counters() -> None:
    harness = Harness(max_queued_per_site=1)
    first = harness.submit()
    held = present(harness.world.operations.get(first))
    refused(harness, site_id="acme-blog")
    assert harness.deliver(first)[0].outcome == Outcome.SUCCEEDED
    admission = {k: v for k, v in harness.world.db.counters.items() if is_flow_counter(k)}
    # the row named what it took: a shard of the global, principal and share groups, and the site's counter
    assert [c.rsplit("#", 1)[0] for c in held.holds] == ["global", "principal#tenant-a", "site"]
    assert held.holds[2] == "site#acme-blog" and present(held.share).startswith("queued#operations#tenant-a#tenant-a#")
    running = [c for c in admission if c.startswith("running#operations#tenant-a#tenant-a#")]
    assert admission == dict.fromkeys([*held.holds, held.share, *running], 0) and len(running) == 1
    harness.submit(kind="publish", params={})  # accepted again


def test_estimated_delay_uses_the_sites_measured_operation_time() -> None:
    harness = Harness(max_queued_per_site=1)
    harness.deliver(harness.submit(key="one"))
    from dataclasses import replace

    harness.world.db.sites["acme-blog"] = replace(harness.world.db.sites["acme-blog"], avg_operation_s=12.0)
    harness.submit(kind="publish", params={}, key="two")

    error = refused(harness, site_id="acme-blog", kind="publish", params={})

    assert error.retry_after_s == 12.0 and error.estimated_delay_s == 12.0  # one ahead, one at a time


def test_each_commit_counts_toward_its_principals_measured_pace_in_its_lane() -> None:
    harness = Harness()

    def slow(inner: Callable[..., Any], ctx: Any, payload: Any) -> Any:
        harness.world.clock.advance(6.0)  # the operation takes 6 s
        return inner(ctx, payload)

    harness.wrap(Kind.PROVISION, slow)
    for site in ("site-one", "site-two"):
        assert harness.deliver(harness.submit(site=site))[0].outcome == Outcome.SUCCEEDED
    failing = harness.submit(site="site-three")
    harness.fail_first(Kind.PROVISION, PermanentError("nope", code="bad"))
    assert harness.deliver(failing)[0].outcome == Outcome.DEAD  # only commits count

    pace = harness.pace()
    now = harness.world.clock.now()
    reading = pace.reading("operations", "tenant-a", now)
    assert reading.completions == 2 and reading.mean_s == 6.0
    assert pace.reading("bulk", "tenant-a", now).completions == 0  # lanes apart
    assert pace.reading("operations", "tenant-b", now).mean_s is None
    assert pace.reading("operations", "tenant-a", now + 10 * 60).completions == 0  # out of the 5-minute window
    keys = [("operations", "tenant-a", "tenant-a"), ("bulk", "tenant-a", "tenant-a"), ("operations", "b", "c")]
    assert pace.readings(keys, now) == {key: pace.reading(key[0], key[1], now, key[2]) for key in keys}  # together


def test_a_waiting_operations_delay_is_bounded_by_its_principals_running_cap() -> None:
    """Five provisions on five sites (no site waits behind another), one principal allowed 2 running at a time, its
    last completions measured at 10 s each: they start in rounds of two."""
    harness = Harness(max_running_per_principal=2)
    clock = harness.world.clock
    pace = harness.pace()
    for _ in range(3):
        pace.record("operations", "tenant-a", 10.0, clock.now())
    ops = []
    for n in range(5):
        ops.append(harness.submit(site=f"site-{n}"))
        clock.advance(1.0)

    def estimates() -> list[DelayEstimate]:
        w = harness.world
        return [
            estimated_delay_for(
                present(w.operations.get(op)),
                w.operations,
                w.sites,
                pace,
                harness.settings,
                clock.now(),
            )
            for op in ops
        ]

    assert [e.delay_s for e in estimates()] == [0.0, 0.0, 10.0, 10.0, 20.0]
    assert [e.bound for e in estimates()][2:] == ["principal"] * 3
    assert [e.principal_ahead for e in estimates()] == [0, 1, 2, 3, 4]
    harness.world.db.counters["running#operations#tenant-a#tenant-a#0"] = 2  # two of its others are running meanwhile
    assert [e.delay_s for e in estimates()] == [10.0, 10.0, 20.0, 20.0, 30.0]
    assert all(e.site_ahead == 0 for e in estimates())
    # another principal's work is not behind tenant-a's
    other = harness.submit(site="site-9", principal="tenant-b")
    w = harness.world
    assert (
        estimated_delay_for(
            present(w.operations.get(other)),
            w.operations,
            w.sites,
            pace,
            harness.settings,
            clock.now(),
        ).delay_s
        == 0.0
    )


def test_the_site_bound_decides_when_a_sites_own_backlog_is_longer() -> None:
    harness = Harness(max_running_per_principal=10)
    pace = harness.pace()
    harness.registered()
    ops = []
    for n in range(3):
        ops.append(harness.submit(kind="publish", params={}, key=f"p{n}"))
        harness.world.clock.advance(1.0)
    w = harness.world
    last = estimated_delay_for(
        present(w.operations.get(ops[2])),
        w.operations,
        w.sites,
        pace,
        harness.settings,
        w.clock.now(),
    )
    assert last.bound == "site" and last.site_ahead == 2 and last.delay_s == 2 * harness.settings.default_operation_s


def test_a_refusal_at_the_principal_limit_estimates_with_the_principals_measured_pace() -> None:
    harness = Harness(max_outstanding_per_principal=4, max_running_per_principal=2)
    harness.pace().record("operations", "tenant-a", 6.0, harness.world.clock.now())
    for n in range(4):
        harness.submit(site=f"site-{n}")

    error = refused(harness, site_id="site-9")

    assert error.limit == "principal" and error.retry_after_s == 6.0
    assert error.estimated_delay_s == 12.0  # 4 outstanding, 2 at a time, 6 s each


def test_cancel_of_a_queued_operation_is_immediate_and_its_message_is_then_acknowledged(harness: Harness) -> None:
    op_id = harness.submit()

    op = harness.controls().cancel(OPERATOR, op_id, "changed my mind")

    assert op.status == Status.CANCELLED and op.error.message == "changed my mind"  # type: ignore[union-attr]
    assert harness.world.db.counters["site#acme-blog"] == 0
    result, _ = harness.deliver(op_id)
    assert result.outcome == Outcome.ACKED and result.reason == "already_cancelled"
    assert harness.world.db.commits == {}
    with pytest.raises(Conflict):
        harness.controls().cancel(OPERATOR, op_id, "again")


def test_cancel_of_a_running_operation_is_cooperative_and_nothing_commits(harness: Harness) -> None:
    op_id = harness.submit()

    def cancelled_midway(inner: HandlerFn, ctx: HandlerContext, payload: Any) -> Mutation:
        mutation = inner(ctx, payload)
        requested = harness.controls().cancel(OPERATOR, op_id, "operator said stop")
        assert requested.status == Status.RUNNING and requested.cancel_requested == "operator said stop"
        return mutation

    harness.wrap(Kind.PROVISION, cancelled_midway)

    result, _ = harness.deliver(op_id)

    assert result.outcome == Outcome.ACKED and result.reason == "cancelled"
    op = harness.world.operations.get(op_id)
    assert op is not None and op.status == Status.CANCELLED
    site = harness.world.sites.get("acme-blog")
    assert harness.world.db.commits == {} and site is not None and site.head_version == 0
    assert site.lease_owner is None and harness.world.db.counters["site#acme-blog"] == 0


def test_a_paused_site_defers_without_attempts_and_resumes(harness: Harness) -> None:
    op_id = harness.submit()
    harness.controls().set_paused(OPERATOR, "acme-blog", True, "migration in progress")
    other = harness.submit(site="other-site")

    result, visibility = harness.deliver(op_id)

    assert result.outcome == Outcome.DEFERRED and result.reason == "site_paused"
    assert visibility.changes[0] >= harness.settings.pause_deferral_s * 0.8
    assert harness.world.operations.get(op_id).attempt == 0  # type: ignore[union-attr]
    assert harness.deliver(other)[0].outcome == Outcome.SUCCEEDED  # other sites untouched
    harness.controls().set_paused(OPERATOR, "acme-blog", False, None)
    assert harness.deliver(op_id)[0].outcome == Outcome.SUCCEEDED


def test_a_paused_sites_full_queue_refuses_saying_it_is_paused_with_no_estimate() -> None:
    harness = Harness(max_queued_per_site=2)
    for n in range(2):
        harness.submit(key=f"k{n}")
    harness.controls().set_paused(OPERATOR, "acme-blog", True, "migration in progress")

    error = refused(harness, site_id="acme-blog", idempotency_key="k2")

    assert (error.limit, error.value, error.maximum) == ("site", 2, 2)
    assert "paused: migration in progress" in str(error) and "resume the site" in str(error)
    assert error.retry_after_s == harness.settings.pause_deferral_s and error.estimated_delay_s is None
    harness.controls().set_paused(OPERATOR, "acme-blog", False, None)
    resumed = refused(harness, site_id="acme-blog", idempotency_key="k2")  # full still, and no longer paused
    assert "paused" not in str(resumed) and resumed.estimated_delay_s is not None


def test_consecutive_failures_pause_the_site_automatically_with_a_reason() -> None:
    harness = Harness(auto_pause_failures=3, attempt_budget=10)

    def broken(inner: HandlerFn, ctx: HandlerContext, payload: Any) -> Mutation:
        raise TransientError("database unreachable", code="db_down")

    harness.wrap(Kind.PROVISION, broken)
    op_id = harness.submit()
    for _ in range(3):
        result, _ = harness.deliver(op_id)
        assert result.outcome == Outcome.RETRYING
        harness.world.clock.advance(result.delay_s + 1)

    site = harness.world.sites.get("acme-blog")
    assert site is not None and site.paused and "3 consecutive failures" in (site.pause_reason or "")
    assert "db_down" in (site.pause_reason or "")
    result, _ = harness.deliver(op_id)
    assert result.reason == "site_paused"
    assert harness.world.operations.get(op_id).attempt == 3  # type: ignore[union-attr]


def test_an_operations_own_permanent_errors_never_pause_its_site() -> None:
    """Found by a new user: 300 publishes for sites never provisioned went dead one by one, then each site paused
    itself and the rest waited. A poisoned input or an unprovisioned site says nothing about the destination."""
    harness = Harness(auto_pause_failures=3)
    harness.registered("bare-site")
    for n in range(6):  # work for a site registered, never provisioned ends on its own, saying how to provision
        result = harness.run("publish", site="bare-site", key=f"early-{n}")
        assert result.outcome == Outcome.DEAD and result.reason == "not_provisioned"
    bare = harness.world.sites.get("bare-site")
    assert bare is not None and not bare.paused and bare.consecutive_failures == 0
    [dead, *_] = harness.world.operations.list(site_id="bare-site", status=Status.DEAD)
    assert (dead.evidence or {})["recovery_command"].startswith("sitedispatch submit provision --site bare-site")

    harness.provisioned()
    for n in range(5):
        result = harness.import_file(FIXTURES / "malformed.xml", key=f"poisoned-{n}")
        assert result.outcome == Outcome.DEAD and result.reason == "wxr_malformed"
    site = harness.world.sites.get("acme-blog")
    assert site is not None and not site.paused and site.consecutive_failures == 0

    def refused(inner: HandlerFn, ctx: HandlerContext, payload: Any) -> Mutation:
        raise PermanentError("application password revoked", code="wordpress_unauthorized")

    class Refusing(ReferenceDriver):  # a driver whose destination can refuse us (the WordPress driver's code)
        destination_failures = frozenset({"wordpress_unauthorized"})

    harness.drivers[REFERENCE_DRIVER] = Refusing()
    harness.wrap(Kind.PUBLISH, refused)
    for n in range(3):  # the destination refusing us does pause it
        assert harness.run("publish", key=f"p{n}").outcome == Outcome.DEAD
    site = harness.world.sites.get("acme-blog")
    assert site is not None and site.paused and "wordpress_unauthorized" in (site.pause_reason or "")


def test_a_success_resets_the_failure_count(harness: Harness) -> None:
    harness.fail_first(Kind.PROVISION, TransientError("blip"))
    op_id = harness.submit()
    first, _ = harness.deliver(op_id)
    assert harness.world.sites.get("acme-blog").consecutive_failures == 1  # type: ignore[union-attr]
    harness.world.clock.advance(first.delay_s + 1)
    harness.deliver(op_id)
    assert harness.world.sites.get("acme-blog").consecutive_failures == 0  # type: ignore[union-attr]


def test_a_chain_of_queued_publishes_collapses_into_the_newest(harness: Harness) -> None:
    harness.provisioned()
    chain = []
    for n in range(3):
        chain.append(harness.submit(kind="publish", params={}, key=f"publish-{n}"))
        harness.world.clock.advance(1)

    outcomes = [harness.deliver(op_id)[0] for op_id in chain]

    assert [o.reason for o in outcomes] == ["superseded", "superseded", "committed"]
    first, second, newest = (harness.world.operations.get(op_id) for op_id in chain)
    assert first.status == second.status == Status.SUPERSEDED  # type: ignore[union-attr]
    assert first.superseded_by == second.superseded_by == chain[2]  # type: ignore[union-attr]
    assert newest.status == Status.SUCCEEDED  # type: ignore[union-attr]
    assert harness.world.db.counters["site#acme-blog"] == 0


def test_provisions_and_imports_are_never_superseded(harness: Harness) -> None:
    first = harness.submit(key="a")
    harness.world.clock.advance(1)
    harness.submit(key="b")
    assert harness.deliver(first)[0].reason == "committed"


def test_a_retry_storm_spends_the_global_budget_and_later_retries_wait_longer() -> None:
    """Retries may be ~10% of recent executions: once a failing dependency makes them more, retries are deferred
    for a longer window instead of piling onto it."""
    harness = Harness(
        retry_budget_ratio=0.1, retry_budget_min_retries=3, retry_budget_defer_s=60.0, auto_pause_failures=100
    )

    def down(inner: HandlerFn, ctx: HandlerContext, payload: Any) -> Mutation:
        raise TransientError("dependency down")

    harness.wrap(Kind.PROVISION, down)
    ops = [harness.submit(site=f"storm-{n}") for n in range(6)]
    first = [harness.deliver(op_id)[0] for op_id in ops]  # 6 executions, no retries yet
    assert all(r.outcome == Outcome.RETRYING and r.delay_s <= 2.0 for r in first)
    harness.world.clock.advance(2.5)

    second = [harness.deliver(op_id)[0] for op_id in ops]  # retries: 6 of 12 executions, far over 10%

    assert all(r.outcome == Outcome.RETRYING for r in second)
    # the budget applies from the third retry on (retry_budget_min_retries): those wait 60 to 120 s, not <= 4 s
    assert all(r.delay_s <= 4.0 for r in second[:2])
    assert all(60.0 <= r.delay_s <= 120.0 for r in second[2:])


def test_publications_progress_while_the_site_is_busy_with_an_operation(harness: Harness) -> None:
    """Operation-first: a long operation holds the site's lease; the publication lane still finishes its work
    (publications never take the lease), so the site's new revision goes live meanwhile."""
    from tests.unit.conftest import FIXTURES

    harness.provisioned()
    harness.import_file(FIXTURES / "fixture-1.2.xml")  # commit 2; its publication is queued
    harness.world.sites.claim_lease("acme-blog", "op_long_running", harness.world.clock.now(), 600)
    held = harness.submit(kind="wp_cron", params={})
    assert harness.deliver(held)[0].reason == "lease_held"

    harness.drain_publications()

    site = harness.world.sites.get("acme-blog")
    assert site is not None and site.live_seq == 2 and site.lease_owner == "op_long_running"


def test_operations_progress_while_publications_are_backlogged(harness: Harness) -> None:
    """Publication-first: a backlog of publication chunks is queued; operations of the same site still commit
    (they never wait for publications), and the backlog then drains to the newest revision."""
    from tests.unit.conftest import FIXTURES, THEME_TEST_DATA

    harness = Harness(publication_chunk_routes=3)
    harness.provisioned()
    harness.import_file(THEME_TEST_DATA, key="big")
    harness.publisher().process(harness.world.publication_queue.sent.pop(0))  # planned: many chunks queued
    backlog = len(harness.world.publication_queue.sent)
    assert backlog > 20

    result = harness.import_file(FIXTURES / "fixture-1.2.xml", key="small")

    assert result.outcome == Outcome.SUCCEEDED and result.commit.version == 3  # type: ignore[union-attr]
    harness.drain_publications()
    site = harness.world.sites.get("acme-blog")
    assert site is not None and site.live_seq == 3 and site.live_revision == result.commit.revision_id  # type: ignore[union-attr]


def running(harness: Harness, op_id: str, lease_s: float = 60.0) -> None:
    """An attempt of `op_id` that started in another environment and is still running (or died there)."""
    w = harness.world
    op = w.operations.get(op_id)
    assert op is not None
    lease = w.sites.claim_lease(op.site_id, op_id, w.clock.now(), lease_s)
    group = running_group_for(harness.settings, op)
    k = roomiest(w.operations, group)
    assert k is not None, "no running place left"
    w.operations.start_attempt(op_id, lease.fence, w.clock.now(), group.slot(k))


def test_a_principal_runs_at_most_its_cap_per_lane_and_others_are_untouched() -> None:
    harness = Harness(max_running_per_principal=2)
    a1, a2, a3 = (harness.submit(site=f"a-site-{n}", principal="tenant-a") for n in range(3))
    running(harness, a1)
    running(harness, a2)

    held, visibility = harness.deliver(a3)
    other = harness.deliver(harness.submit(site="b-site", principal="tenant-b"))[0]
    bulk = harness.import_file(THEME_TEST_DATA, site="a-site-2", key="import")  # the bulk lane has its own cap

    assert held.outcome == Outcome.DEFERRED and held.reason == "principal_running_cap"
    op = harness.world.operations.get(a3)
    assert op is not None and op.attempt == 0 and op.status == Status.QUEUED  # no attempt spent
    assert harness.world.sites.get("a-site-2").lease_owner is None  # type: ignore[union-attr]
    assert 0 < visibility.changes[-1] <= harness.settings.defer_max_s * 1.2
    assert other.outcome == Outcome.SUCCEEDED
    assert (bulk.outcome, bulk.reason) == (Outcome.DEAD, "not_provisioned")  # it ran: the bulk lane had room
    assert harness.world.db.total("running#bulk#tenant-a#tenant-a") == 0
    assert harness.world.db.total("running#operations#tenant-a#tenant-a") == 2


def test_a_slot_is_released_by_retry_and_commit_and_reused_after_a_crash() -> None:
    harness = Harness(max_running_per_principal=1)
    harness.fail_first(Kind.PROVISION, TransientError("upstream 503"))
    first, second = harness.submit(site="one"), harness.submit(site="two")
    counter = "running#operations#tenant-a#tenant-a"

    assert harness.deliver(first)[0].outcome == Outcome.RETRYING
    assert harness.world.db.total(counter) == 0  # a waiting retry holds no slot
    running(harness, second, lease_s=5.0)  # takes the slot, then its process dies
    harness.world.clock.advance(3_600)
    assert harness.deliver(first)[0].reason == "principal_running_cap"

    again, _ = harness.deliver(second)  # the redelivery reuses the dead attempt's slot

    assert again.outcome == Outcome.SUCCEEDED and harness.world.operations.get(second).attempt == 2  # type: ignore
    assert harness.world.db.total(counter) == 0
    assert harness.deliver(first)[0].outcome == Outcome.SUCCEEDED
    assert harness.world.db.total(counter) == 0


@pytest.mark.parametrize("ending", ["permanent", "cancel"])
def test_dead_and_cancelled_attempts_release_their_slot(ending: str) -> None:
    harness = Harness(max_running_per_principal=1)
    op_id = harness.submit()
    if ending == "permanent":
        harness.fail_first(Kind.PROVISION, PermanentError("bad input", code="bad_input"))
    else:
        running(harness, op_id, lease_s=5.0)
        harness.controls().cancel(OPERATOR, op_id, "stop")
        harness.world.clock.advance(10)

    result, _ = harness.deliver(op_id)

    status = harness.world.operations.get(op_id).status  # type: ignore[union-attr]
    assert (result.outcome, status) in {(Outcome.DEAD, Status.DEAD), (Outcome.ACKED, Status.CANCELLED)}
    assert harness.world.db.total("running#operations#tenant-a#tenant-a") == 0


# -- quotas: operators' per-principal overrides ------------------------------------------------------------------

TENANT_A = Caller("tenant-a", operator=False)


def test_an_operator_raises_a_principals_outstanding_limit_and_the_next_submit_sees_it() -> None:
    harness = Harness(max_outstanding_per_principal=2)
    for n in range(2):
        harness.submit(site=f"site-{n}")
    assert refused(harness, site_id="site-2").maximum == 2

    limits = harness.controls().set_quota(
        OPERATOR, "tenant-a", max_outstanding=4, max_running=None, reason="migration week"
    )

    assert (limits.max_outstanding, limits.outstanding, limits.max_running) == (4, 2, 10)
    harness.submit(site="site-2")
    harness.submit(site="site-3")
    error = refused(harness, site_id="site-4")
    assert (error.limit, error.value, error.maximum) == ("principal", 4, 4)
    harness.submit(site="b-site", principal="tenant-b")  # other principals keep the deployment's limit
    [entry] = harness.world.audit.list(0, 1e12, action="quota")
    assert (entry.actor, entry.target, entry.outcome, entry.reason) == ("ops-alice", "tenant-a", "ok", "migration week")
    assert entry.detail["max_outstanding"] == 4 and entry.detail["was"] is None


def test_lowering_a_quota_below_current_use_refuses_new_work_and_drops_nothing_accepted() -> None:
    """The limit is kept on shards, each with its part of the new maximum: while the principal holds more than the
    maximum, new work lands only where a shard is still under its part, at most the new maximum in all (here 1),
    and every refusal reports the principal's whole use."""
    harness = Harness()
    accepted = [harness.submit(site=f"site-{n}") for n in range(3)]
    harness.controls().set_quota(OPERATOR, "tenant-a", max_outstanding=1, max_running=None, reason="abuse report")

    landed, refusals = [], []
    for n in range(20):
        try:
            landed.append(harness.submit(site=f"site-{10 + n}"))
        except Backpressure as full:
            refusals.append(full)
    assert len(landed) <= 1 and len(refusals) >= 19
    assert all(r.maximum == 1 and r.value >= 3 for r in refusals)
    assert all(harness.deliver(op)[0].outcome == Outcome.SUCCEEDED for op in [*accepted, *landed])  # none dropped
    harness.submit(site="site-9")  # drained below the new limit: accepted again
    assert refused(harness, site_id="site-10").value == 1


def test_a_running_cap_override_applies_to_the_next_attempt_and_clearing_it_restores_the_default() -> None:
    """The override is kept on the counter it bounds, so the attempt's own conditional write enforces it: no read,
    no cache, nothing stale."""
    harness = Harness(max_running_per_principal=5)
    first, second, third = (harness.submit(site=f"site-{n}") for n in range(3))
    worker = harness.worker()
    assert harness.deliver(first, worker)[0].outcome == Outcome.SUCCEEDED
    running(harness, second)  # one attempt of tenant-a runs elsewhere
    harness.controls().set_quota(OPERATOR, "tenant-a", max_running=1, max_outstanding=None, reason="noisy")

    held = harness.deliver(third, worker)[0]
    assert (held.outcome, held.reason) == (Outcome.DEFERRED, "principal_running_cap")
    assert (
        harness.deliver(harness.submit(site="b-site", principal="tenant-b"), worker)[0].outcome == Outcome.SUCCEEDED
    )  # other principals keep the deployment's cap
    harness.controls().clear_quota(OPERATOR, "tenant-a", "quiet again")
    assert harness.deliver(third, worker)[0].outcome == Outcome.SUCCEEDED


def test_only_operators_change_quotas_a_reason_is_required_and_every_change_is_audited() -> None:
    harness = Harness()
    controls = harness.controls()
    with pytest.raises(Forbidden):
        controls.set_quota(TENANT_A, "tenant-a", max_outstanding=5000, max_running=None, reason="I want more")
    with pytest.raises(InvalidInput):
        controls.set_quota(OPERATOR, "tenant-a", max_outstanding=5, max_running=None, reason=" ")
    with pytest.raises(InvalidInput):
        controls.set_quota(OPERATOR, "tenant-a", max_outstanding=None, max_running=None, reason="nothing")
    with pytest.raises(InvalidInput):
        controls.set_quota(OPERATOR, "tenant-a", max_outstanding=0, max_running=None, reason="zero")
    with pytest.raises(InvalidInput):
        controls.set_quota(OPERATOR, "", max_outstanding=5, max_running=None, reason="nobody")
    assert controls.limits(TENANT_A, "tenant-a").quota is None  # a principal reads its own limits
    with pytest.raises(Forbidden):
        controls.limits(TENANT_A, "tenant-b")
    controls.set_quota(OPERATOR, "tenant-a", max_outstanding=None, max_running=3, reason="fair share")
    assert controls.limits(TENANT_A, "tenant-a").max_running == 3
    assert controls.clear_quota(OPERATOR, "tenant-a", "back to normal").quota is None
    controls.clear_quota(OPERATOR, "tenant-a", "again")
    entries = sorted((e.actor, e.outcome) for e in harness.world.audit.list(0, 1e12, action="quota"))
    assert entries == [("ops-alice", "ok"), ("ops-alice", "ok"), ("ops-alice", "skipped"), ("tenant-a", "denied")]
