"""The reconciler's sweeps against the in-memory ports."""

from __future__ import annotations

from sitedispatch.reconciler import Reconciler
from tests.unit.conftest import Harness


def reconciler(harness: Harness) -> Reconciler:
    w = harness.world
    return Reconciler(w.operations, w.queue, w.clock)


def test_drifted_counters_are_set_to_the_recount_once_they_are_quiet(harness: Harness) -> None:
    queued = harness.submit(site="one")
    harness.deliver(harness.submit(site="two"))
    db = harness.world.db
    exact = dict(db.counters)
    # Drift, as a bug or a hand edit would leave it: one leaked slot and a lost decrement
    db.bump("site#two", +1, harness.world.clock.now())
    db.bump("running#operations#tenant-a", +1, harness.world.clock.now())
    db.bump("principal#tenant-a", -1, harness.world.clock.now())

    assert reconciler(harness).reconcile().repaired["counters_repaired"] == 0  # moved just now: left alone
    harness.world.clock.advance(121)
    assert reconciler(harness).reconcile().repaired["counters_repaired"] == 3

    assert db.counters == exact
    assert exact["site#one"] == 1 and exact["global"] == 1 and harness.world.operations.get(queued)
    assert reconciler(harness).reconcile().repaired["counters_repaired"] == 0  # nothing left to repair


def test_a_counter_that_moves_during_the_recount_is_not_overwritten(harness: Harness) -> None:
    harness.submit(site="one")
    harness.world.clock.advance(200)
    db = harness.world.db
    read_counters = harness.world.operations.counters

    def counters_then_a_submit_lands(prefix: str = "") -> dict[str, int]:
        seen = read_counters(prefix)
        harness.submit(site="one", kind="publish", params={})  # lands between the read and the recount
        return seen

    harness.world.operations.counters = counters_then_a_submit_lands  # type: ignore[method-assign]
    repaired = reconciler(harness).repair_counters()  # read 1, recounts 2: the write is refused, not forced

    assert repaired == 0
    assert db.counters["site#one"] == 2 and db.counters["global"] == 2
