"""Flow control against DynamoDB on moto: exact counters under concurrent submits, nothing lost, CLI exit 75."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.errors import Backpressure
from sitedispatch.domain.model import Status
from sitedispatch.local.cloud import deploy_local, local_environment
from tests.conftest import Cloud, cli_runner, pump, registered, run_cli
from tests.factories import PROVISION, present


@pytest.fixture
def limited(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Cloud:
    settings, deployment = deploy_local(
        moto_endpoint,
        prefix=f"flood-{random.Random().randrange(10**9)}",
        function_timeout_s=10,
        max_queued_per_site=3,
        max_outstanding_per_principal=12,
        max_outstanding_global=20,
    )
    for key, value in local_environment(settings, moto_endpoint).items():
        monkeypatch.setenv(key, value)
    return Cloud(moto_endpoint, settings, Dependencies(settings), deployment)


@pytest.mark.guarantee
@pytest.mark.strict_suffices
def test_flood_past_every_cap_refuses_explicitly_and_loses_nothing(limited: Cloud) -> None:
    # Given limits of 3 per site, 12 per principal and 20 in all, and 6 threads submitting 120 operations at once
    # (a third of them publishes, which end dead on sites registered and never provisioned, or superseded: all
    # terminal)
    rng = random.Random(42)
    sites = [rng.randrange(6) for _ in range(120)]
    plan = [(f"site-{n}", f"tenant-{n // 2}") for n in sites]  # each tenant owns two sites
    for n in (1, 3):
        registered(limited, f"site-{n}", f"tenant-{n // 2}")
    accepted: list[str] = []
    refusals: list[Backpressure] = []
    surprises: list[BaseException] = []
    lock = threading.Lock()

    def submit(chunk: list[tuple[str, str]]) -> None:
        submitter = limited.deps.submitter()
        for site, principal in chunk:
            try:
                kind, params = ("publish", {}) if site.endswith(("1", "3")) else ("provision", PROVISION)
                op = submitter.submit(kind=kind, site_id=site, principal=principal, params=params).operation
                with lock:
                    accepted.append(op.operation_id)
            except Backpressure as error:
                with lock:
                    refusals.append(error)
            except BaseException as error:  # anything else is a finding, asserted below
                with lock:
                    surprises.append(error)

    threads = [threading.Thread(target=submit, args=(plan[i::6],)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)

    # Then every refusal is explicit, the counters are exact, and every accepted operation finishes
    import traceback

    assert surprises == [], "".join(traceback.format_exception(surprises[0]))[-3000:]
    assert len(accepted) + len(refusals) == 120 and refusals and accepted
    assert all(
        r.retry_after_s >= 1 and r.estimated_delay_s is not None and r.estimated_delay_s > 0 and r.value <= r.maximum
        for r in refusals
    )
    ops = limited.deps.operations

    def total(group: str) -> int:  # a limit kept on shards: their sum
        return sum(v for k, v in ops.counters(group).items() if k.rpartition("#")[0] == group)

    assert total("global") == len(accepted) <= 20
    for site in {s for s, _ in plan}:
        assert ops.counter(f"site#{site}") == sum(1 for a in accepted if present(ops.get(a)).site_id == site) <= 3
    pump(limited)
    final = [present(ops.get(op_id)) for op_id in accepted]
    assert all(op.status.terminal for op in final)
    assert {op.status for op in final} <= {Status.SUCCEEDED, Status.DEAD, Status.SUPERSEDED}
    admission = {k: v for k, v in ops.counters().items() if k.startswith(("global#", "principal#", "site#"))}
    assert admission and all(value == 0 for value in admission.values())


@pytest.fixture
def cli(limited: Cloud) -> Iterator[CliRunner]:
    with cli_runner() as runner:
        yield runner


run = run_cli


def test_cli_backpressure_is_exit_75_with_retry_after(cli: CliRunner) -> None:
    base = ["submit", "provision", "--site", "busy-site", "--param", "title=x", "--param", "admin_email=a@b.co"]
    for n in range(3):
        assert run(cli, *base, "--idempotency-key", f"k{n}")[0] == 0
    code, out = run(cli, *base, "--idempotency-key", "k3", "--json")
    assert code == 75
    refusal = json.loads(out)
    assert refusal["error"] == "backpressure" and refusal["limit"] == "site" and refusal["value"] == 3
    assert refusal["retry_after_s"] >= 1 and refusal["estimated_delay_s"] > 0
    code, out = run(cli, *base, "--idempotency-key", "k4")
    one_line = " ".join(out.split())  # the terminal may wrap the message
    assert code == 75 and "site limit reached" in one_line and "retry in about" in one_line


def test_cli_cancel_pause_resume(cli: CliRunner, limited: Cloud) -> None:
    code, out = run(
        cli,
        "submit",
        "provision",
        "--site",
        "ctl-site",
        "--param",
        "title=x",
        "--param",
        "admin_email=a@b.co",
        "--json",
    )
    op_id = json.loads(out)["operation_id"]
    code, out = run(cli, "ops", "cancel", op_id, "--reason", "wrong site", "--json")
    assert code == 0 and json.loads(out)["status"] == "cancelled"
    assert run(cli, "ops", "cancel", op_id)[0] == 4
    assert run(cli, "ops", "cancel", "op_missing")[0] == 3
    code, out = run(cli, "sites", "pause", "ctl-site", "--reason", "maintenance", "--json")
    assert code == 0 and json.loads(out)["paused"] is True
    code, out = run(cli, "sites", "get", "ctl-site")
    assert "maintenance" in out
    assert run(cli, "sites", "resume", "ctl-site")[0] == 0
    assert run(cli, "sites", "pause", "no-such-site", "--reason", "x")[0] == 3
    assert run(cli, "sites", "pause", "ctl-site")[0] == 2  # a pause says why, as in the console
    assert limited.deps.operations.counter("site#ctl-site") == 0
