"""One principal acting for many customers: a fairness key (tenant) inside a principal, what an operation holds and
releases, and batch submit answered item by item as single submits would be."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from sitedispatch.domain.delivery import Outcome
from sitedispatch.domain.errors import Backpressure, SiteDispatchError
from sitedispatch.domain.model import RUNNABLE, Status
from sitedispatch.flow.admission import recount
from sitedispatch.flow.counters import is_flow_counter, tenant_group
from sitedispatch.operations.batch import GROUP_ROWS, BatchItem, BatchSubmitter, ItemAnswer
from sitedispatch.operations.submission import Submitted
from tests.factories import PROVISION, present, settings
from tests.unit.conftest import OPERATOR, Harness, sweep

CONTROL_PLANE = "control-plane"


def submit_for(harness: Harness, tenant: str, site: str) -> Submitted:
    return harness.submitter.submit(
        kind="provision", site_id=site, principal=CONTROL_PLANE, params=PROVISION, tenant=tenant
    )


def sent_ids(harness: Harness) -> list[str]:
    return [sent.message.operation_id for sent in harness.world.queue.sent]


def flow_counters(harness: Harness) -> dict[str, int]:
    return {k: v for k, v in harness.world.db.counters.items() if is_flow_counter(k) and v}


def outstanding(harness: Harness) -> list[Any]:
    return [op for op in harness.world.db.operations.values() if op.status in RUNNABLE]


# -- the fairness key -------------------------------------------------------------------------------------------


def test_a_tenants_single_operation_is_not_queued_behind_another_tenants_flood_of_the_same_principal() -> None:
    harness = Harness(max_running_per_principal=1)
    flood = [submit_for(harness, "customer-a", f"a-site-{n}").operation for n in range(30)]
    single = submit_for(harness, "customer-b", "b-site").operation

    # customer-a fills its share (2 places per running slot) and the rest wait; customer-b's goes out at once
    assert sent_ids(harness) == [op.operation_id for op in flood[:2]] + [single.operation_id]
    assert all(present(harness.world.operations.get(op.operation_id)).waiting_for for op in flood[2:])
    assert single.tenant == "customer-b" and single.principal == CONTROL_PLANE
    # and it runs at once: customer-a's running cap is its own
    worker = harness.worker()
    assert harness.deliver(flood[0].operation_id, worker)[0].outcome == Outcome.SUCCEEDED
    assert harness.deliver(single.operation_id, worker)[0].outcome == Outcome.SUCCEEDED


def test_outstanding_limits_and_quotas_apply_per_tenant_and_confinement_stays_by_principal() -> None:
    harness = Harness(max_outstanding_per_tenant=2)
    submit_for(harness, "customer-a", "a-1")
    submit_for(harness, "customer-a", "a-2")
    with pytest.raises(Backpressure) as full:
        submit_for(harness, "customer-a", "a-3")
    assert (full.value.limit, full.value.value, full.value.maximum) == ("tenant", 2, 2)
    submit_for(harness, "customer-b", "b-1")  # another customer of the same principal: its own limit

    controls = harness.controls()
    limits = controls.set_quota(
        OPERATOR, CONTROL_PLANE, max_outstanding=5, max_running=None, reason="big customer", tenant="customer-a"
    )
    assert (limits.tenant, limits.max_outstanding, limits.outstanding) == ("customer-a", 5, 2)
    submit_for(harness, "customer-a", "a-3")
    assert controls.limits(OPERATOR, CONTROL_PLANE).outstanding == 4  # the principal's own: every tenant's work
    # the principal sees and acts on its operations whatever their tenant
    from sitedispatch.operator.access import Caller

    caller = Caller(CONTROL_PLANE, operator=False)
    assert {op.tenant for op in controls.operations(caller).items} == {"customer-a", "customer-b"}


def test_a_quota_lowered_to_what_is_held_refuses_the_next_submit_whichever_shard_it_tries() -> None:
    """A quota's parts cover what each shard holds first: a shard holding nothing gets no part of a maximum
    already used up elsewhere (it would admit past the new maximum when the submit's home shard is that one)."""
    harness = Harness()
    held = submit_for(harness, "customer-a", "a-1").operation
    group = tenant_group(CONTROL_PLANE, "customer-a", 1)
    [shard] = [counter for counter in held.holds if group.index_of(counter) is not None]
    harness.controls().set_quota(
        OPERATOR, CONTROL_PLANE, max_outstanding=1, max_running=None, reason="trial", tenant="customer-a"
    )
    maxima = {counter: harness.world.db.counter_maximum.get(counter) for counter in group.shard_ids()}
    assert maxima == {counter: 1 if counter == shard else 0 for counter in group.shard_ids()}
    for n in range(2, 34):  # 32 operation ids: their home shards cover the group
        with pytest.raises(Backpressure) as full:
            submit_for(harness, "customer-a", f"a-{n}")
        assert (full.value.limit, full.value.value, full.value.maximum) == ("tenant", 1, 1)
    # a maximum above what is held: the held shard keeps its place and the rest is spread
    five = tenant_group(CONTROL_PLANE, "customer-a", 5)
    assert five.parts_around([0, 0, 3] + [0] * 13) == [1, 1, 3] + [0] * 13
    wide = tenant_group(CONTROL_PLANE, "customer-a", 40)
    parts = wide.parts_around([0, 5] + [0] * 14)
    assert sum(parts) == 40 and parts[1] >= 5 and max(parts) - min(parts[2:]) <= 7


def test_a_limit_changed_between_admit_and_end_gives_back_exactly_what_was_taken() -> None:
    harness = Harness(max_outstanding_global=10_000, max_running_per_principal=4)
    ops = [submit_for(harness, "customer-a", f"site-{n}").operation.operation_id for n in range(6)]
    assert flow_counters(harness)  # they hold places
    # the operator changes every limit while they are in flight
    harness.settings = settings(max_outstanding_global=7, max_running_per_principal=1, max_outstanding_per_tenant=3)
    for op_id in ops:
        harness.deliver(op_id)
    while [op for op in outstanding(harness) if not op.waiting_for]:
        for op in outstanding(harness):
            if not op.waiting_for:
                harness.deliver(op.operation_id)
    assert outstanding(harness) == []
    assert flow_counters(harness) == {}  # every counter back to exactly zero, with no recount
    assert sum(harness.world.db.waiting.values()) == 0


# -- batch submit -----------------------------------------------------------------------------------------------


def items(n: int, rng: random.Random, tenant: str | None = None) -> list[BatchItem]:
    """n items: provisions of distinct sites, with repeats of earlier keys (same and different input) and invalid
    items mixed in, in a seeded order."""
    out: list[BatchItem] = []
    for i in range(n):
        roll = rng.random()
        if roll < 0.05 and out:
            earlier = rng.choice(out)
            same = rng.random() < 0.5
            params = earlier.params if same else {**earlier.params, "title": "Another"}
            out.append(BatchItem(earlier.kind, earlier.site_id, earlier.idempotency_key, params, earlier.tenant))
        elif roll < 0.08:
            out.append(BatchItem("provison", f"site-{i}", f"key-{i}", PROVISION, tenant))  # a typo'd kind
        elif roll < 0.10:
            out.append(BatchItem("provision", "Not A Site", f"key-{i}", PROVISION, tenant))
        else:
            out.append(BatchItem("provision", f"site-{i:03d}", f"key-{i}", PROVISION, tenant))
    return out


def answer_of(result: Submitted | SiteDispatchError) -> tuple[Any, ...]:
    if isinstance(result, Submitted):
        return ("ok", result.operation.operation_id, result.created, result.operation.waiting_for is not None)
    return (
        "refused",
        type(result).__name__,
        result.code,
        getattr(result, "limit", None),
        getattr(result, "field", None),
    )


def single_answers(harness: Harness, batch: list[BatchItem]) -> list[tuple[Any, ...]]:
    answers = []
    for item in batch:
        try:
            result: Submitted | SiteDispatchError = harness.submitter.submit(
                kind=item.kind,
                site_id=item.site_id,
                principal=CONTROL_PLANE,
                params=item.params,
                idempotency_key=item.idempotency_key,
                tenant=item.tenant,
            )
        except SiteDispatchError as refused:
            result = refused
        answers.append(answer_of(result))
    return answers


def batch_answers(answers: list[ItemAnswer]) -> list[tuple[Any, ...]]:
    return [answer_of(a.submitted if a.submitted is not None else present(a.error)) for a in answers]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_each_item_of_a_batch_is_answered_as_a_single_submit_would_be_and_refused_ones_write_nothing(
    seed: int,
) -> None:
    policy = {"max_outstanding_per_principal": 400, "max_running_per_principal": 50}
    batch = items(500, random.Random(seed))
    singles, batched = Harness(**policy), Harness(**policy)

    expected = single_answers(singles, batch)
    answers = BatchSubmitter(batched.submitter).submit(CONTROL_PLANE, batch)

    assert batch_answers(answers) == expected
    tally = Counter(a[0] if a[0] == "ok" else a[2] for a in expected)
    assert tally["ok"] > 300 and tally["limit_reached"] + tally["backpressure"] > 0 and tally["invalid_input"] > 0
    created = {a[1] for a in expected if a[0] == "ok"}
    assert set(batched.world.db.operations) == created  # nothing written for a refused item
    assert flow_counters(batched) == {k: v for k, v in recount(outstanding(batched)).items() if v}
    assert Counter(sent_ids(batched)) == Counter(sent_ids(singles))  # the same operations sent, once each


def test_a_batch_is_a_few_transactions_and_messages_go_ten_to_a_request() -> None:
    harness = Harness(max_running_per_principal=1000)  # room in the share for both batches
    store, queue = harness.world.operations, harness.world.queue
    calls: Counter[str] = Counter()
    for name, target in (("create_group", store), ("create", store), ("send_many", queue), ("send", queue)):
        original = getattr(target, name)

        def counted(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            calls[_name] += 1
            return _original(*args, **kwargs)

        setattr(target, name, counted)
    batch = [BatchItem("provision", f"site-{i:03d}", f"k{i}", PROVISION) for i in range(160)]
    submitter = harness.submitter

    # the sites' first operations, provisions: each group registers its new sites
    assert all(a.submitted and a.submitted.created for a in BatchSubmitter(submitter).submit(CONTROL_PLANE, batch))
    assert calls["create_group"] == 160 // GROUP_ROWS and calls["create"] == 0
    assert {present(harness.world.sites.get(f"site-{i:03d}")).principal for i in range(160)} == {CONTROL_PLANE}
    calls.clear()
    again = [BatchItem("publish", f"site-{i:03d}", f"p{i}", {}) for i in range(160)]
    answers = BatchSubmitter(submitter).submit(CONTROL_PLANE, again)

    assert all(a.submitted is not None and a.submitted.created for a in answers)
    assert calls["create_group"] == 160 // GROUP_ROWS and calls["create"] == 0
    assert calls["send_many"] == 1  # one lane (SQS's ten to a request is the adapter's)


def test_a_batch_retried_after_a_crash_half_way_creates_nothing_twice() -> None:
    harness = Harness(max_running_per_principal=100)
    batch = [BatchItem("provision", f"site-{i:03d}", f"k{i}", PROVISION, "customer-a") for i in range(100)]
    BatchSubmitter(harness.submitter).submit(CONTROL_PLANE, batch[:1])  # registers site-000
    publishes = [BatchItem("publish", "site-000", f"p{i}", {}, "customer-a") for i in range(3)]
    store = harness.world.operations
    original = store.create_group
    groups = 0

    def dies_on_the_third(*args: Any, **kwargs: Any) -> bool:
        nonlocal groups
        groups += 1
        if groups == 3:
            raise SystemExit("the process died")  # nothing of this group is written, the first two are
        return original(*args, **kwargs)

    provisioned = BatchSubmitter(harness.submitter).submit(CONTROL_PLANE, batch[1:])
    assert all(a.submitted for a in provisioned)
    store.create_group = dies_on_the_third  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        BatchSubmitter(harness.submitter).submit(
            CONTROL_PLANE,
            [*publishes, *[BatchItem("publish", f"site-{i:03d}", f"p{i}", {}, "customer-a") for i in range(1, 60)]],
        )
    store.create_group = original  # type: ignore[method-assign]
    retried = [*publishes, *[BatchItem("publish", f"site-{i:03d}", f"p{i}", {}, "customer-a") for i in range(1, 60)]]

    answers = BatchSubmitter(harness.submitter).submit(CONTROL_PLANE, retried)

    assert all(a.submitted is not None for a in answers)
    created = [a for a in answers if a.submitted and a.submitted.created]
    repeated = [a for a in answers if a.submitted and not a.submitted.created]
    assert len(created) + len(repeated) == len(retried) and len(repeated) == 2 * GROUP_ROWS
    publishes_kept = [op for op in harness.world.db.operations.values() if op.kind.value == "publish"]
    assert len(publishes_kept) == len(retried)  # nothing twice
    assert flow_counters(harness) == {k: v for k, v in recount(outstanding(harness)).items() if v}
    # the two groups the crash left are queued and recorded unsent (the reconciler's to send); the retry sent the rest
    left = {op_id for group in harness.world.db.unsent.values() for op_id in group.operation_ids}
    assert left == {a.submitted.operation.operation_id for a in repeated if a.submitted}
    assert all(harness.world.db.operations[op_id].status == Status.QUEUED for op_id in left)
    assert not left & set(sent_ids(harness))


def test_a_batch_that_dies_before_its_messages_go_is_sent_by_the_reconciler_once_its_groups_are_stale() -> None:
    harness = Harness(max_running_per_principal=1000)
    queue = harness.world.queue

    def dies(*args: Any, **kwargs: Any) -> None:
        raise SystemExit("the process died after its transactions, before any message")

    queue.send_many = dies  # type: ignore[method-assign]
    batch = [BatchItem("provision", f"site-{i:03d}", f"k{i}", PROVISION, f"customer-{i % 3}") for i in range(40)]
    with pytest.raises(SystemExit):
        BatchSubmitter(harness.submitter).submit(CONTROL_PLANE, batch)
    del queue.send_many  # the class's own again
    created = sorted(harness.world.db.operations.values(), key=lambda op: op.site_id)
    assert len(created) == 40 and {op.status for op in created} == {Status.QUEUED} and sent_ids(harness) == []
    assert len(harness.world.db.unsent) == -(-40 // GROUP_ROWS)

    assert sweep(harness)["unsent_groups_sent"] == 0  # within the grace: the batch may still be sending
    harness.world.clock.advance(31)
    first, _ = harness.deliver(created[0].operation_id)  # one a message delivered after all: not sent again
    assert sweep(harness)["unsent_groups_sent"] == 3

    assert Counter(sent_ids(harness)) == Counter(op.operation_id for op in created[1:])
    assert harness.world.db.unsent == {} and sweep(harness)["unsent_groups_sent"] == 0
    assert first.outcome == Outcome.SUCCEEDED


def test_a_batch_for_many_tenants_and_sites_keeps_each_transaction_within_its_100_items() -> None:
    harness = Harness(max_running_per_principal=1000)
    batch = [BatchItem("provision", f"site-{i:03d}", f"k{i}", PROVISION, f"customer-{i}") for i in range(64)]
    answers = BatchSubmitter(harness.submitter).submit(CONTROL_PLANE, batch)
    assert all(a.submitted is not None and a.submitted.created for a in answers)
    assert {op.tenant for op in harness.world.db.operations.values()} == {f"customer-{i}" for i in range(64)}
