"""G9 with real processes: a worker SIGKILLed right after its commit, before it sends the event's message, still
tells its principal: the event was written with the commit, and the reconciler sends it again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sitedispatch.client import ApiClient
from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.model import Status
from sitedispatch.domain.settings import Settings
from sitedispatch.local.supervisor import LocalRuntime
from sitedispatch.reconciler import ReconcilerPolicy
from tests.acceptance.conftest import as_function, wait_for
from tests.factories import PROVISION, present

PROBES = "tests.acceptance.probe_handlers"


@pytest.mark.guarantee
@pytest.mark.strict_suffices
def test_a_worker_killed_between_its_commit_and_its_events_message_still_tells_its_principal(
    runtime: LocalRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given operations workers whose environments die right after each commit, before the event's message
    env = runtime.start_cloud(0, function_timeout_s=10)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    log = tmp_path / "probe.log"
    runtime.start_worker(
        "operations",
        3,
        extra=["--handler", f"{PROBES}.operations_dying_after_commit"],
        env={"PROBE_LOG": str(log)},
    )
    runtime.start_worker("events", 1)
    producer = ApiClient(runtime.start_api(), identity="control-plane")
    deps = Dependencies(Settings()).warm()

    # When three provisions are submitted and each commits
    ops = [
        producer.call("POST", "/operations", body={"kind": "provision", "site_id": f"told-{n}", "params": PROVISION})[
            "operation_id"
        ]
        for n in range(3)
    ]
    wait_for(
        lambda: all(present(deps.operations.get(o)).status == Status.SUCCEEDED for o in ops),
        timeout_s=60,
        what="every provision committed",
    )

    def killed_so_far() -> list[str]:
        text = log.read_text() if log.exists() else ""
        return [json.loads(line)["killed_before_sending"] for line in text.split("\n")[:-1]]  # whole lines

    # a commit is visible before its environment records its death (right after it): wait for the third record
    wait_for(lambda: len(killed_so_far()) >= 3, timeout_s=30, what="three environments killed after a commit")
    killed = killed_so_far()
    assert len(killed) == 3  # each environment died in the outbox's window, once per commit
    assert producer.call("GET", "/events", query={"type": "operation.succeeded"})["events"] == []

    # Then the reconciler finds the events written with the commits and sends them again (sweep after sweep: the
    # index of undelivered events may lag), and the principal's feed tells each operation's end once, in order
    reconciler = as_function(runtime, "reconciler").reconciler()
    reconciler.policy = ReconcilerPolicy(orphan_grace_s=0.0)
    resent = []

    def told() -> list[dict[str, object]] | None:
        sweep = reconciler.run("reconcile")
        resent.append(sweep.repaired["events_resent"] if sweep is not None else 0)
        page = producer.call("GET", "/events", query={"type": "operation.succeeded", "wait_s": 1})
        return page["events"] if len(page["events"]) >= 3 else None

    events = wait_for(told, timeout_s=30, what="three operation.succeeded events in the feed")
    assert sum(resent) >= 3  # each came by a resend: nothing else was left to send it
    assert sorted(str(e["operation_id"]) for e in events) == sorted(ops)
    assert sorted(str(e["id"]) for e in events) == sorted(killed)
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)  # type: ignore[type-var]
