"""The operator runbook through the CLI against moto: dead letters with evidence, recovery, redrive, audit, authz."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import Cloud, assert_committed_once, cli_runner, pump, run_cli, wait_for
from tests.unit.conftest import FIXTURES, THEME_TEST_DATA

run = run_cli


@pytest.fixture
def cli(cloud: Cloud) -> Iterator[CliRunner]:
    with cli_runner() as runner:
        yield runner


def dlq_messages(cloud: Cloud, lane: str) -> list[dict[str, str]]:
    url = getattr(cloud.settings, f"{lane}_dlq_url")
    messages = cloud.deps.sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], VisibilityTimeout=0
    ).get("Messages", [])
    return [{k: v["StringValue"] for k, v in m.get("MessageAttributes", {}).items()} for m in messages]


def provision(cli: CliRunner, site: str, principal: str = "tenant-a") -> None:
    code, out = run(
        cli,
        "submit",
        "provision",
        "--site",
        site,
        "--param",
        "title=T",
        "--param",
        "admin_email=a@b.co",
        "--as",
        principal,
    )
    assert code == 0, out


def import_file(cli: CliRunner, site: str, path: object, principal: str = "tenant-a") -> str:
    code, out = run(cli, "submit", "import", "--site", site, "--input-file", str(path), "--as", principal, "--json")
    assert code == 0, out
    return str(json.loads(out)["operation_id"])


@pytest.mark.guarantee
def test_a_poisoned_import_is_recovered_by_running_its_evidence_command(
    cli: CliRunner, cloud: Cloud, tmp_path: object
) -> None:
    provision(cli, "acme-blog")
    pump(cloud)
    [provisioned] = wait_for(lambda: [c.operation_id for c in cloud.deps.commits.history("acme-blog")], timeout_s=5)
    op_id = import_file(cli, "acme-blog", FIXTURES / "malformed.xml")
    pump(cloud)

    def dead_letters() -> list[Any]:  # listed through the by-status index: eventually consistent, as on AWS
        code, out = run(cli, "dlq", "list", "--json", "--as", "operator")
        assert code == 0, out
        return list(json.loads(out))

    [dead] = wait_for(dead_letters, timeout_s=5, what="the dead letter listed")
    assert dead["operation_id"] == op_id and dead["evidence"]["error_code"] == "wxr_malformed"
    [letter] = dlq_messages(cloud, "bulk")
    assert letter["operation_id"] == op_id and letter["evidence_key"] == dead["evidence"]["key"]

    def bulk_row() -> Any:
        # status reads the dead and the waiting operations through an index, eventually consistent (the strict cloud
        # lags each read on its own): the dead operation's age shows, and its queued entry goes, in either order
        row = next(
            q for q in json.loads(run(cli, "status", "--json", "--as", "operator")[1])["queues"] if q["queue"] == "bulk"
        )
        return row if row["dlq_oldest_age_s"] is not None and row["oldest_age_s"] is None else None

    bulk = wait_for(bulk_row, timeout_s=5, what="status to show the dead operation's age and no waiting one")
    assert bulk["dlq_depth"] == 1 and bulk["dlq_oldest_age_s"] >= 0 and bulk["oldest_age_s"] is None

    code, out = run(cli, "dlq", "show", op_id, "--json", "--as", "operator")
    evidence = json.loads(out)
    assert code == 0 and evidence["site_id"] == "acme-blog" and evidence["attempt"] == 1
    assert evidence["request_id"]  # the Lambda request that failed (the pump's context)
    assert evidence["traceback"] and evidence["input_digest"] == dead["evidence"]["input_digest"]
    code, out = run(cli, "dlq", "show", op_id, "--as", "operator")
    assert code == 0 and "wxr_malformed" in out and "recover:" in out

    # the operator runs the recovery command, with the corrected file in place of FIXED_INPUT
    command = evidence["recovery_command"].split()
    assert command[:2] == ["sitedispatch", "dlq"] and command[-1] == "FIXED_INPUT"
    code, out = run(
        cli, *command[1:-1], str(THEME_TEST_DATA), "--reason", "fixed the export", "--json", "--as", "operator"
    )
    assert code == 0, out
    report = json.loads(out)
    assert report["redriven"] == [op_id] and report["dlq_messages_removed"] == 1
    assert dlq_messages(cloud, "bulk") == []
    pump(cloud)

    code, out = run(cli, "ops", "get", op_id, "--json", "--as", "operator")
    op = json.loads(out)
    assert op["status"] == "succeeded" and op["epoch"] == 1 and op["attempt"] == 1
    assert_committed_once(cloud.deps, "acme-blog", [op_id, provisioned])  # the import once, after the provision
    code, out = run(cli, *command[1:-1], str(THEME_TEST_DATA), "--json", "--as", "operator")  # again: no change
    assert code == 0 and json.loads(out)["redriven"] == [] and op_id in json.loads(out)["skipped"]

    code, out = run(cli, "audit", "list", "--action", "redrive", "--json", "--as", "operator")
    entries = json.loads(out)
    assert [(e["actor"], e["target"], e["outcome"], e["reason"]) for e in entries] == [
        ("operator", op_id, "skipped", None),
        ("operator", op_id, "ok", "fixed the export"),
    ]
    code, out = run(cli, "audit", "list", "--as", "operator")
    assert code == 0 and "redrive" in out


def test_redrive_by_site_and_by_error_code_on_sqs_moves_only_the_matching(cli: CliRunner, cloud: Cloud) -> None:
    for site in ("site-one", "site-two"):
        provision(cli, site)
    pump(cloud)
    bad = {site: import_file(cli, site, FIXTURES / "malformed.xml") for site in ("site-one", "site-two")}
    unsafe = import_file(cli, "site-one", FIXTURES / "billion-laughs.xml")
    pump(cloud)
    assert len(dlq_messages(cloud, "bulk")) >= 1

    code, out = run(cli, "dlq", "redrive", "--site", "site-two", "--dry-run", "--json", "--as", "operator")
    assert code == 0 and json.loads(out)["selected"] == [bad["site-two"]] and json.loads(out)["redriven"] == []
    code, out = run(cli, "dlq", "redrive", "--error-code", "wxr_unsafe", "--json", "--as", "operator")
    assert code == 0 and json.loads(out)["redriven"] == [unsafe], out
    code, out = run(cli, "dlq", "redrive", "--site", "site-two", "--json", "--as", "operator")
    assert code == 0 and json.loads(out)["redriven"] == [bad["site-two"]], out

    remaining = {op["operation_id"] for op in json.loads(run(cli, "dlq", "list", "--json", "--as", "operator")[1])}
    assert remaining == {bad["site-one"]}
    # what is left in the DLQ is only the untouched operation's message (FIFO: read all groups)
    left = {letter["operation_id"] for letter in dlq_messages(cloud, "bulk")}
    assert left == {bad["site-one"]}
    assert run(cli, "dlq", "redrive", "--as", "operator")[0] == 2  # no selection: invalid


def test_principals_are_confined_to_their_own_sites(cli: CliRunner, cloud: Cloud) -> None:
    provision(cli, "a-site", "tenant-a")
    pump(cloud)
    op_id = import_file(cli, "a-site", FIXTURES / "malformed.xml")
    pump(cloud)

    for args in (
        ["ops", "get", op_id],
        ["ops", "cancel", op_id],
        ["dlq", "show", op_id],
        ["dlq", "redrive", "--operation", op_id],
        ["ops", "replay", op_id],
        ["ops", "wait", op_id, "--timeout", "1"],
        ["sites", "get", "a-site"],
        ["sites", "history", "a-site"],
        ["sites", "read", "a-site", "/"],
        ["sites", "pause", "a-site", "--reason", "curious"],
        ["sites", "resume", "a-site"],
    ):
        code, out = run(cli, *args, "--as", "tenant-b")  # another tenant's is not found, as a missing one is
        assert code == 3 and "not found" in out and "tenant-a" not in out, (args, out)
    # site ids are one namespace: creating or claiming another's says only that the id is taken, the same way
    for args in (
        ["sites", "register", "a-site", "--driver", "reference"],
        ["submit", "provision", "--site", "a-site", "--param", "title=T", "--param", "admin_email=b@b.co"],
        ["submit", "publish", "--site", "a-site"],
    ):
        code, out = run(cli, *args, "--as", "tenant-b", "--json")
        taken = "site id a-site is taken by another principal (site ids are one namespace): choose another"
        assert (code, json.loads(out)) == (4, {"error": "site_taken", "message": taken}), (args, out)
    assert json.loads(run(cli, "dlq", "list", "--as", "tenant-b", "--json")[1]) == []
    assert json.loads(run(cli, "ops", "list", "--as", "tenant-b", "--json")[1]) == []
    assert run(cli, "audit", "list", "--as", "tenant-b", "--actor", "tenant-a")[0] == 4
    assert run(cli, "dlq", "show", op_id, "--as", "tenant-a")[0] == 0
    assert run(cli, "sites", "read", "a-site", "/", "--as", "tenant-a")[0] == 0
    provision(cli, "a-second", "tenant-a")  # queued: a row of tenant A's in the backlog
    everyone = json.loads(run(cli, "status", "--json", "--as", "operator")[1])  # the operator
    assert everyone["backlog_by_principal"] == {"tenant-a": 1}
    assert [d["site_id"] for d in everyone["delay_by_site"]] == ["a-second"]
    mine = json.loads(run(cli, "status", "--as", "tenant-b", "--json")[1])
    assert mine["backlog_by_principal"] == {} and mine["delay_by_site"] == [] and mine["delay_by_principal"] == []
    assert mine["backlog_by_status"] == {"accepted": 0, "queued": 0, "running": 0}
    depths = [(q["queue"], q["visible"], q["dlq_depth"]) for q in mine["queues"]]  # the deployment's, named no one
    assert depths == [(q["queue"], q["visible"], q["dlq_depth"]) for q in everyone["queues"]]
    assert ("operations", 1, 0) in depths

    denied = json.loads(run(cli, "audit", "list", "--as", "tenant-b", "--json")[1])
    assert {e["action"] for e in denied} == {"cancel", "redrive", "replay", "pause", "resume"}
    assert {e["outcome"] for e in denied} == {"denied"}

    code, out = run(cli, "ops", "replay", op_id, "--as", "tenant-a", "--json")
    assert code == 0 and json.loads(out)["redriven"] == [op_id]
    code, out = run(cli, "ops", "replay", op_id, "--as", "tenant-a")  # not dead any more: nothing to do
    assert code == 4 and "skipped" in out


def test_an_operator_overrides_a_principals_limit_through_the_cli_and_it_is_audited(cli: CliRunner) -> None:
    code, out = run(
        cli, "quotas", "set", "tenant-a", "--max-outstanding", "1", "--reason", "trial account", "--as", "tenant-a"
    )
    assert code == 4 and "only operators" in out  # a principal cannot raise (or set) its own
    code, out = run(
        cli,
        "quotas",
        "set",
        "tenant-a",
        "--max-outstanding",
        "1",
        "--reason",
        "trial account",
        "--json",
        "--as",
        "operator",
    )
    assert code == 0, out
    assert json.loads(out)["max_outstanding"] == 1 and json.loads(out)["quota"]["updated_by"] == "operator"

    provision(cli, "trial-one")
    code, out = run(
        cli,
        "submit",
        "provision",
        "--site",
        "trial-two",
        "--param",
        "title=T",
        "--param",
        "admin_email=a@b.co",
        "--as",
        "tenant-a",
    )
    assert code == 75 and "principal limit reached: 1 of 1" in out

    code, out = run(cli, "quotas", "get", "tenant-a", "--as", "tenant-a", "--json")
    limits = json.loads(out)
    assert code == 0 and (limits["max_outstanding"], limits["outstanding"]) == (1, 1)
    assert run(cli, "quotas", "get", "tenant-a", "--as", "tenant-b")[0] == 4
    code, out = run(cli, "quotas", "get", "tenant-a", "--as", "operator")
    assert code == 0 and "override by operator" in out and "trial account" in out

    code, out = run(cli, "quotas", "clear", "tenant-a", "--reason", "converted to paid", "--json", "--as", "operator")
    assert code == 0 and json.loads(out)["quota"] is None and json.loads(out)["max_outstanding"] == 2000
    provision(cli, "trial-two")  # the deployment's limit applies again

    code, out = run(cli, "audit", "list", "--action", "quota", "--json", "--as", "operator")
    entries = sorted((e["actor"], e["outcome"], e["reason"]) for e in json.loads(out))
    assert entries == [
        ("operator", "ok", "converted to paid"),
        ("operator", "ok", "trial account"),
        ("tenant-a", "denied", "trial account"),
    ]


def test_an_unprovisioned_sites_recovery_command_provisions_it_and_redrives_the_operation_as_copied(
    cli: CliRunner, cloud: Cloud
) -> None:
    """Registered, never provisioned: a publish ends dead (not_provisioned); its evidence's command, its placeholders
    filled in, run as written by the one local identity, provisions the site and completes the same operation."""
    import shlex

    code, out = run(cli, "sites", "register", "bare-site", "--driver", "reference")
    assert code == 0, out
    code, out = run(cli, "submit", "publish", "--site", "bare-site", "--json")
    op_id = json.loads(out)["operation_id"]
    pump(cloud)
    code, out = run(cli, "dlq", "show", op_id, "--json")
    assert code == 0 and json.loads(out)["error_code"] == "not_provisioned", out
    command = json.loads(out)["recovery_command"]
    filled = command.replace("TITLE", "Bare").replace("EMAIL", "ops@bare.example")
    for part in filled.split(" && "):
        args = shlex.split(part)
        assert args[0] == "sitedispatch" and not {"TITLE", "EMAIL"} & set(args), command
        code, out = run(cli, *args[1:])
        assert code == 0, (part, out)
        pump(cloud)
    code, out = run(cli, "ops", "get", op_id, "--json")
    assert json.loads(out)["status"] == "succeeded" and json.loads(out)["epoch"] == 1


def test_a_site_registered_by_mistake_is_deleted_by_its_owner_and_only_an_empty_one(
    cli: CliRunner, cloud: Cloud
) -> None:
    code, out = run(cli, "sites", "register", "acme-blgo", "--driver", "reference")  # a typo, as `default`
    assert code == 0, out
    code, out = run(cli, "sites", "delete", "acme-blgo", "--reason", "typo", "--as", "tenant-b")
    assert code == 3 and "not found" in out  # another's is a missing one
    code, out = run(cli, "sites", "delete", "acme-blgo", "--reason", "typo", "--as", "reader")
    assert code == 4 and "may only read" in out
    code, out = run(cli, "sites", "delete", "acme-blgo")
    assert code == 2 and "--reason" in out  # a reason is required
    code, out = run(cli, "sites", "delete", "acme-blgo", "--reason", "typo")
    assert code == 0 and out == "deleted acme-blgo (it was default's)\n", out
    assert run(cli, "sites", "get", "acme-blgo")[0] == 3
    code, out = run(cli, "sites", "register", "acme-blgo", "--driver", "reference", "--as", "tenant-b")
    assert code == 0, out  # the id is free again, for anyone

    provision(cli, "kept-site", "tenant-a")
    code, out = run(cli, "sites", "delete", "kept-site", "--reason", "tidy", "--as", "operator", "--json")
    assert code == 4 and "has work queued or running: cancel it first" in json.loads(out)["message"]
    pump(cloud)
    code, out = run(cli, "sites", "delete", "kept-site", "--reason", "tidy", "--as", "operator", "--json")
    assert code == 4 and "has 1 commits: its history is kept" in json.loads(out)["message"]
    audit = json.loads(run(cli, "audit", "list", "--action", "delete", "--as", "operator", "--json")[1])
    assert [(e["actor"], e["target"], e["outcome"]) for e in audit] == [
        ("operator", "kept-site", "refused"),
        ("operator", "kept-site", "refused"),
        ("default", "acme-blgo", "ok"),
        ("tenant-b", "acme-blgo", "denied"),  # (the reader's refusal is audited as a write: read-only)
    ], audit
