"""A `reconcile` sweep costs what may be wrong, not what exists: a quiet fleet ten times larger costs the same
requests and reads the same items (issue 16; `make bench` measures it up to 10,000 sites)."""

from __future__ import annotations

import pytest

from bench.sweeps import register_quiet_sites, sweep_cost
from tests.conftest import Cloud


@pytest.mark.guarantee
def test_a_sweep_of_a_quiet_fleet_reads_the_same_at_twenty_sites_as_at_two_hundred(cloud: Cloud) -> None:
    deps = cloud.deps
    register_quiet_sites(deps, 0, 20)
    small = sweep_cost(deps)
    register_quiet_sites(deps, 20, 180)
    large = sweep_cost(deps)

    print(f"\nreconcile sweep: {small['requests']} at 20 sites, {large['requests']} at 200")
    assert large["requests"] == small["requests"]
    assert large["items_read"] == small["items_read"] == 0
    assert not [name for name in large["requests"] if name.endswith(":Scan")]
    assert set(large["requests"]) == {"dynamodb:Query"}  # empty index queries, nothing else
    assert all(value == 0 for value in large["repaired"].values())
