"""Fairness on the local runtime: principal A floods 300 imports across its sites; principal B's single provision
still starts within two operation-times, because bulk work has its own lane (queue and environments)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.model import Status
from sitedispatch.domain.settings import Settings
from sitedispatch.local.supervisor import LocalRuntime
from sitedispatch.local.synthetic import write_wxr
from tests.acceptance.conftest import wait_for
from tests.factories import PROVISION

pytestmark = pytest.mark.acceptance
A_SITES = [f"tenant-a-{n}" for n in range(6)]


def test_one_provision_is_not_starved_by_three_hundred_imports(
    runtime: LocalRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = runtime.start_cloud(0, policy={"max_outstanding_per_principal": 400})
    runtime.start_worker("operations", 2)
    runtime.start_worker("publications", 2)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    deps = Dependencies(Settings()).warm()  # type: ignore[call-arg]
    submitter = deps.submitter()
    for site in A_SITES:
        submitter.submit(kind="provision", site_id=site, principal="tenant-a", params=PROVISION)
    wait_for(
        lambda: all((s := deps.sites.get(site)) is not None and s.head_version >= 1 for site in A_SITES),
        timeout_s=60,
        what="tenant A's sites provisioned",
    )

    # Given tenant A's 300 imports (50 per site, the site limit) queued in the bulk lane
    wxr = tmp_path / "a.xml"
    write_wxr(wxr, posts=150, seed=3)
    staged = {site: submitter.stage_upload(site, wxr) for site in A_SITES}
    imports = [
        submitter.submit(kind="import", site_id=site, principal="tenant-a", params=staged[site]).operation
        for _ in range(50)
        for site in A_SITES
    ]
    assert len(imports) == 300
    runtime.start_worker("bulk", 2)  # the flood starts draining
    wait_for(
        lambda: (
            sum(
                1 for op in imports[:12] if (o := deps.operations.get(op.operation_id)) and o.status == Status.SUCCEEDED
            )
            >= 2
        ),
        timeout_s=120,
        what="A's imports under way",
    )

    # When tenant B submits one provision
    backlog = len(deps.operations.list(status=Status.QUEUED, limit=1000))
    b = submitter.submit(kind="provision", site_id="tenant-b-site", principal="tenant-b", params=PROVISION).operation
    done = wait_for(
        lambda: (o := deps.operations.get(b.operation_id)) is not None and o.status.terminal and o,
        timeout_s=60,
        what="B's provision finished",
    )

    # Then it started within two operation-times of its submission
    finished = [
        o
        for op in imports
        if (o := deps.operations.get(op.operation_id)) is not None
        and o.status == Status.SUCCEEDED
        and o.started_at
        and o.finished_at
    ]
    operation_time = statistics.median(
        o.finished_at - o.started_at for o in finished if o.finished_at is not None and o.started_at is not None
    )
    assert done.started_at is not None and done.queued_at is not None
    waited = done.started_at - done.queued_at
    print(f"\nB waited {waited:.2f}s; an import takes {operation_time:.2f}s; A's backlog then {backlog}")
    assert done.status == Status.SUCCEEDED
    assert backlog > 200  # A's flood was still there
    assert waited <= 2 * operation_time
