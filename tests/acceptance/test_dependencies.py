"""A shared dependency under a burst on the local runtime, through the API (the short case of
`bench/dependencies.py`; `make bench` runs 300 sites at 20 starts a minute)."""

from __future__ import annotations

import pytest

from bench import dependencies
from sitedispatch.local.supervisor import LocalRuntime


@pytest.mark.guarantee
@pytest.mark.strict_suffices
def test_a_burst_on_a_capped_rated_dependency_stays_within_both_and_another_dependencys_site_goes_on(
    runtime: LocalRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """16 sites on db:a (cap 2, 60 starts a minute with a burst of 3) are provisioned at once, past their fairness
    key's share; a db:b site's provision of the same key (the same customer), submitted 5 times in turn during the
    burst, starts within two operation times (from its acceptance: a wait unsent counts); db:a never has more than
    its cap running (its shards, sampled through the API), nor more starts in a minute than its rate and burst
    allow (+1: a start reserved ahead keeps its place up to one interval late)."""
    figures = dependencies.shared_dependency(
        runtime, 16, 2, 5, cap=2, rate=(60, 60.0, 3), setenv=monkeypatch.setenv, tenants=("customer-a", "customer-a")
    )
    print(f"\n{figures}")
    assert figures["all_succeeded"]
    assert figures["max_held_a_sampled"] <= 2 and figures["samples"] > 10
    # the rows' times are each read just before its transaction: a start may be recorded a round trip early
    assert figures["most_starts_in_a_period"] <= figures["starts_bound"]
    assert figures["attempts_a"] == 16  # a deferral spends no attempt
    assert figures["b_wait_p99_s"] <= figures["b_bound_s"], figures["b_waits_s"]
    assert figures["deferrals"] > 0  # the burst did wait on db:a (and the count is what the note reports)
