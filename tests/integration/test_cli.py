"""The CLI contract: exit codes 0/2/3/4, --json everywhere, against moto."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from typer.testing import CliRunner

from tests.conftest import Cloud, cli_runner, pump, registered, run_cli, wait_for

PROVISION_ARGS = ("--param", "title=Acme", "--param", "admin_email=a@acme.example")


@pytest.fixture
def cli(cloud: Cloud) -> Iterator[CliRunner]:
    with cli_runner() as runner:
        yield runner


run = run_cli


def test_submit_get_list_and_wait(cli: CliRunner, cloud: Cloud) -> None:
    code, out = run(
        cli,
        "submit",
        "provision",
        "--site",
        "acme-blog",
        "--param",
        "title=Acme",
        "--param",
        "admin_email=a@acme.example",
        "--idempotency-key",
        "k1",
        "--as",
        "tenant-a",
        "--json",
    )
    assert code == 0, out
    submitted = json.loads(out)
    assert submitted["status"] == "queued" and submitted["created"] is True
    op_id = submitted["operation_id"]

    code, out = run(cli, "ops", "get", op_id, "--json", "--as", "operator")
    assert code == 0 and json.loads(out)["site_id"] == "acme-blog"
    code, out = run(cli, "ops", "list", "--site", "acme-blog", "--json", "--as", "operator")
    assert code == 0 and [o["operation_id"] for o in json.loads(out)] == [op_id]
    code, out = run(cli, "ops", "get", op_id, "--as", "operator")
    assert code == 0 and "acme-blog" in out and "queued" in out

    # process it with the core, then wait sees it succeed
    from sitedispatch.domain.model import QueueMessage
    from tests.fakes import RecordingVisibility

    cloud.deps.worker().process(QueueMessage(op_id, "acme-blog"), RecordingVisibility())
    code, out = run(cli, "ops", "wait", op_id, "--timeout", "5", "--json", "--as", "operator")
    assert code == 0 and json.loads(out)["status"] == "succeeded"
    code, out = run(cli, "sites", "get", "acme-blog", "--json", "--as", "operator")
    assert code == 0 and json.loads(out)["head_version"] == 1
    code, out = run(cli, "sites", "history", "acme-blog", "--json", "--as", "operator")
    assert code == 0 and [c["operation_id"] for c in json.loads(out)["commits"]] == [op_id]
    assert [p["seq"] for p in json.loads(out)["publications"]] == [1]
    code, out = run(cli, "sites", "history", "acme-blog", "--as", "operator")
    assert code == 0 and "provision" in out


def test_an_operation_shows_the_publication_it_started_and_why_its_steps_came_again(
    cli: CliRunner, cloud: Cloud
) -> None:
    from sitedispatch.domain.model import PublicationMessage, QueueMessage
    from tests.fakes import RecordingVisibility

    code, out = run(cli, "submit", "provision", "--site", "acme-blog", *PROVISION_ARGS, "--as", "tenant-a", "--json")
    op_id = json.loads(out)["operation_id"]
    cloud.deps.worker().process(QueueMessage(op_id, "acme-blog"), RecordingVisibility())
    code, out = run(cli, "ops", "get", op_id, "--json", "--as", "tenant-a")
    assert code == 0 and json.loads(out)["publication"]["status"] == "pending"
    started = json.loads(out)["result"]["publication"]
    # its one step's first delivery was stopped (a timeout): the second records it, then publishes
    step = PublicationMessage("acme-blog", started["revision_id"], started["seq"])
    assert cloud.deps.publication_worker().process(step, receive_count=2).reason == "promoted"
    code, out = run(cli, "ops", "get", op_id, "--json", "--as", "tenant-a")
    publication = json.loads(out)["publication"]
    assert (publication["status"], publication["retried_steps"]) == ("published", 1)
    stopped = "plan: an earlier delivery did not finish (timed out, or its environment stopped)"
    assert publication["last_failure"] == stopped
    code, out = run(cli, "ops", "get", op_id, "--as", "tenant-a")
    assert code == 0 and f"publication 1: published; 1 steps delivered again, the last because {stopped}" in out
    code, out = run(cli, "sites", "history", "acme-blog", "--as", "tenant-a")
    assert code == 0 and stopped in out


def test_submit_from_an_input_file(cli: CliRunner, tmp_path: Path) -> None:
    spec = tmp_path / "site.json"
    spec.write_text(json.dumps({"title": "From file", "admin_email": "f@file.example", "locale": "de_DE"}))
    code, out = run(cli, "submit", "provision", "--site", "file-site", "--input-file", str(spec), "--json")
    assert code == 0, out


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--site", "Bad_Site", "--param", "title=x", "--param", "admin_email=a@b.co"], "site"),
        (["--site", "acme-blog", "--param", "title=x"], "admin_email"),
        (["--site", "acme-blog", "--param", "no-equals-sign"], "param"),
    ],
)
def test_invalid_input_exits_2_and_names_the_field(cli: CliRunner, args: list[str], field: str) -> None:
    code, out = run(cli, "submit", "provision", *args, "--json")
    assert code == 2
    assert json.loads(out)["field"] == field


def test_a_param_is_typed_by_the_kinds_schema(cli: CliRunner, cloud: Cloud) -> None:
    # The API takes typed JSON; a KEY=VALUE pair is text, sent as an integer where the schema states one.
    registered(cloud, "acme-blog")
    code, out = run(cli, "submit", "wp_cron", "--site", "acme-blog", "--param", "due_minute=29433600", "--json")
    assert code == 0, out
    code, out = run(cli, "ops", "get", json.loads(out)["operation_id"], "--json", "--as", "operator")
    assert code == 0 and json.loads(out)["kind"] == "wp_cron"
    code, out = run(cli, "submit", "wp_cron", "--site", "acme-blog", "--param", "due_minute=soon", "--json")
    assert code == 2 and json.loads(out)["field"] == "due_minute"
    code, out = run(cli, "submit", "provision", "--site", "new-site", "--json")  # every missing field at once
    assert code == 2 and json.loads(out) == {
        "error": "invalid_input",
        "message": "provision needs title, admin_email: Field required",
        "field": "title",
    }, out
    code, out = run(
        cli,
        "submit",
        "provision",
        "--site",
        "acme-blog",
        "--param",
        "title=2026",
        "--param",
        "admin_email=a@b.co",
        "--json",
    )
    assert code == 0, out  # a title of digits stays a title


def test_unknown_kind_exits_2(cli: CliRunner) -> None:
    code, out = run(cli, "submit", "teleport", "--site", "acme-blog")
    assert code == 2 and "unknown kind" in out


def test_idempotency_conflict_exits_4(cli: CliRunner) -> None:
    base = ["submit", "provision", "--site", "acme-blog", "--param", "admin_email=a@b.co", "--idempotency-key", "k"]
    assert run(cli, *base, "--param", "title=One")[0] == 0
    code, out = run(cli, *base, "--param", "title=Two", "--json")
    assert code == 4 and json.loads(out)["error"] == "idempotency_conflict"


def test_not_found_exits_3(cli: CliRunner) -> None:
    assert run(cli, "ops", "get", "op_nope", "--as", "operator")[0] == 3
    assert run(cli, "sites", "get", "no-such-site", "--json", "--as", "operator")[0] == 3
    assert run(cli, "sites", "history", "no-such-site", "--as", "operator")[0] == 3


def test_wait_exits_1_when_the_operation_does_not_succeed_in_time(cli: CliRunner) -> None:
    code, out = run(
        cli,
        "submit",
        "provision",
        "--site",
        "slow-site",
        "--param",
        "title=x",
        "--param",
        "admin_email=a@b.co",
        "--json",
    )
    started = time.monotonic()
    code, out = run(cli, "ops", "wait", json.loads(out)["operation_id"], "--timeout", "0.5", "--as", "operator")
    assert code == 1 and "still queued" in out and time.monotonic() - started < 5


def test_status_reports_queues_and_backlog(cli: CliRunner) -> None:
    for site in ("site-one", "site-two"):
        run(
            cli,
            "submit",
            "provision",
            "--site",
            site,
            "--param",
            "title=x",
            "--param",
            "admin_email=a@b.co",
            "--as",
            "tenant-a",
        )
    code, out = run(cli, "status", "--json", "--as", "operator")
    assert code == 0, out
    report = json.loads(out)
    operations = next(q for q in report["queues"] if q["queue"] == "operations")
    assert operations["visible"] == 2 and operations["in_flight"] == 0 and operations["dlq_depth"] == 0
    assert operations["oldest_age_s"] is not None and operations["oldest_age_s"] >= 0
    assert report["backlog_by_status"]["queued"] == 2 and report["backlog_by_principal"] == {"tenant-a": 2}
    # no operation measured yet: each site's one waiting operation at the default pace
    assert {(d["site_id"], d["backlog"], d["estimated_delay_s"]) for d in report["delay_by_site"]} == {
        ("site-one", 1, 30.0),
        ("site-two", 1, 30.0),
    }
    # per principal and lane: two waiting, run ten at a time, so new work would start at once
    assert [
        (d["principal"], d["lane"], d["backlog"], d["completed_recently"], d["estimated_delay_s"])
        for d in report["delay_by_principal"]
    ] == [("tenant-a", "operations", 2, 0, 0.0)]
    code, out = run(cli, "status", "--as", "operator")
    assert code == 0 and "operations" in out and "DLQ depth" in out and "estimated delay" in out


def test_ops_get_estimates_the_delay_of_a_waiting_operation(cli: CliRunner, cloud: Cloud) -> None:
    registered(cloud, "queue-site")
    ids = []
    for n in range(3):
        code, out = run(cli, "submit", "publish", "--site", "queue-site", "--idempotency-key", f"p{n}", "--json")
        ids.append(json.loads(out)["operation_id"])
    site = cloud.deps.sites.get("queue-site")
    assert site is not None
    cloud.deps.models.Site(site.site_id).update(actions=[cloud.deps.models.Site.avg_operation_s.set(4.0)])
    delays = [
        json.loads(run(cli, "ops", "get", op_id, "--json", "--as", "operator")[1])["estimated_delay_s"] for op_id in ids
    ]
    assert delays == [0.0, 4.0, 8.0]  # one at a time behind the earlier ones, at the site's measured 4 s
    code, out = run(cli, "ops", "get", ids[2], "--as", "operator")
    assert code == 0 and "estimated delay: about 8s (2 earlier operations of queue-site" in out
    estimate = json.loads(run(cli, "ops", "get", ids[2], "--json", "--as", "operator")[1])["estimate"]
    assert estimate["bound"] == "site" and estimate["site_ahead"] == 2 and estimate["principal_ahead"] == 2


def test_a_long_operations_progress_is_in_the_api_and_drawn_by_ops_wait(cli: CliRunner, cloud: Cloud) -> None:
    """A running import's last checkpoint, as its worker records it: the API derives the rate and the ETA from it,
    and `ops wait` draws the bar (and says it is still running when the wait times out)."""
    registered(cloud, "long-site")
    code, out = run(cli, "submit", "publish", "--site", "long-site", "--json")
    op_id = json.loads(out)["operation_id"]
    lease = cloud.deps.sites.claim_lease("long-site", op_id, time.time(), 30)
    cloud.deps.operations.start_attempt(op_id, lease.fence, time.time())
    checkpoint: dict[str, Any] = {"steps": 3, "items": 30_000, "bytes_done": 250_000_000, "bytes_total": 10**9}
    checkpoint |= {"started_at": 1000.0, "at": 1100.0}  # 250 MB in 100 s: 2.5 MB/s, 750 MB (300 s) to go
    cloud.deps.operations.save_checkpoint(op_id, lease.fence, checkpoint, time.time())

    code, out = run(cli, "ops", "get", op_id, "--json", "--as", "operator")
    assert code == 0
    assert json.loads(out)["progress"] == {
        "steps": 3,
        "items": 30_000,
        "bytes_done": 250_000_000,
        "bytes_total": 1_000_000_000,
        "rate_bytes_s": 2_500_000.0,
        "eta_s": 300.0,
        "fraction": 0.25,
    }
    code, out = run(cli, "ops", "wait", op_id, "--timeout", "0.5", "--as", "operator")
    assert code == 1
    assert "25%" in out and "3 steps, 30,000 items, about 300s left" in out and "still running" in out


@pytest.mark.guarantee
def test_reconcile_resends_an_orphan(cli: CliRunner, cloud: Cloud) -> None:
    """An operation row written whose message was lost (the submitter crashed) is re-sent by `reconcile`."""
    from dataclasses import replace

    from sitedispatch.domain.model import Kind, Operation, Status

    old = time.time() - 120
    orphan = Operation(
        operation_id="op_orphan",
        site_id="acme-blog",
        principal="p",
        kind=Kind.PROVISION,
        status=Status.ACCEPTED,
        input_key="inputs/x",
        input_digest="d" * 64,
        idempotency_key="k",
        created_at=old,
        updated_at=old,
    )
    cloud.deps.operations.create(orphan)
    cloud.deps.operations.create(
        replace(orphan, operation_id="op_fresh", created_at=time.time(), updated_at=time.time())
    )
    resent: list[int] = []

    def sweep() -> bool:  # as the schedule would, again: it finds orphans through an eventually consistent index
        code, out = run(cli, "reconcile", "--json", "--as", "operator")
        assert code == 0, out
        resent.append(json.loads(out)["repaired"]["orphans_resent"])
        return sum(resent) > 0

    wait_for(sweep, timeout_s=5, interval_s=0.2, what="a sweep to find the orphan")
    sweep()  # at once again: the index may still show it accepted, the row's condition refuses a second send
    assert sum(resent) == 1 and resent[-2] == 1  # re-sent once, by the first sweep that saw it
    assert cloud.deps.operations.get("op_orphan").status == Status.QUEUED  # type: ignore[union-attr]
    assert cloud.deps.operations.get("op_fresh").status == Status.ACCEPTED  # type: ignore[union-attr]
    assert run(cli, "reconcile", "--schedule", "nonsense", "--as", "operator")[0] == 2


def test_import_a_wxr_file_then_read_the_published_routes(cli: CliRunner, cloud: Cloud) -> None:
    from tests.conftest import pump
    from tests.unit.conftest import FIXTURES

    run(cli, "submit", "provision", "--site", "wxr-site", "--param", "title=WXR", "--param", "admin_email=a@b.co")
    pump(cloud)
    code, out = run(
        cli, "submit", "import", "--site", "wxr-site", "--input-file", str(FIXTURES / "fixture-1.2.xml"), "--json"
    )
    assert code == 0, out
    submitted = json.loads(out)
    op = cloud.deps.operations.get(submitted["operation_id"])
    assert op is not None and op.input_digest  # the input is the staged file's reference, not the file
    pump(cloud)

    code, out = run(cli, "sites", "read", "wxr-site", "/2023/01/02/published-post/", "--as", "operator")
    assert code == 0 and "日本語" in out
    code, out = run(cli, "sites", "read", "wxr-site", "about/team", "--json", "--as", "operator")
    assert code == 0 and json.loads(out)["seq"] == 2 and "The team." in json.loads(out)["content"]
    code, out = run(cli, "sites", "get", "wxr-site", "--json", "--as", "operator")
    assert json.loads(out)["live_seq"] == 2
    assert run(cli, "sites", "read", "wxr-site", "/no-such-route/", "--as", "operator")[0] == 3
    assert run(cli, "submit", "import", "--site", "wxr-site", "--param", "x=y")[0] == 2


def test_reading_a_site_before_its_first_publication_is_not_found(cli: CliRunner) -> None:
    run(cli, "submit", "provision", "--site", "unpublished", "--param", "title=x", "--param", "admin_email=a@b.co")
    code, out = run(cli, "sites", "read", "unpublished", "/", "--as", "operator")
    assert code == 3 and "no live publication" in out


def test_the_cli_finds_a_deployed_stack_by_its_outputs(
    cli: CliRunner, cloud: Cloud, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--stack NAME`: the API's URL comes from the stack's outputs (each describes the variable it carries), so the
    same commands work on AWS and locally. The stack here is a CloudFormation stack in moto whose API output names
    this test's local API."""
    import boto3

    from sitedispatch.domain.resources import API_URL_VARIABLE, ENV_PREFIX

    template = {
        "Resources": {"Marker": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {"ApiUrl": {"Value": os.environ[API_URL_VARIABLE], "Description": API_URL_VARIABLE}},
    }
    boto3.client("cloudformation", region_name="us-east-1").create_stack(
        StackName="DeployedDispatch", TemplateBody=json.dumps(template)
    )
    monkeypatch.delenv(API_URL_VARIABLE)
    monkeypatch.chdir(tmp_path)  # no local env file to fall back on
    from sitedispatch.cli import context

    code, out = run(
        cli,
        "--stack",
        "DeployedDispatch",
        "submit",
        "provision",
        "--site",
        "stack-site",
        "--param",
        "title=x",
        "--param",
        "admin_email=a@b.co",
        "--json",
    )
    assert code == 0, out
    assert cloud.deps.operations.get(json.loads(out)["operation_id"]) is not None  # it went to these resources
    context.reset()  # a new process
    monkeypatch.delenv(API_URL_VARIABLE)
    code, out = run(cli, "--stack", "NoSuchStack", "status", "--json", "--as", "operator")
    assert code == 3 and "NoSuchStack" in out
    assert f"{ENV_PREFIX}STACK" == "SITEDISPATCH_STACK"


def _without_deployment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in [n for n in os.environ if n.startswith(("SITEDISPATCH_", "AWS_ENDPOINT_URL"))]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no .sitedispatch/local.env here


def test_a_command_with_no_deployment_says_what_to_do_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _without_deployment(monkeypatch, tmp_path)
    with cli_runner(api=False) as runner:
        for args in (
            ["status", "--json"],
            ["ops", "get", "op_x", "--json"],
            ["sites", "read", "acme", "/", "--json"],
            ["submit", "publish", "--site", "acme", "--json"],
        ):
            code, out = run(runner, *args)
            assert code == 1 and json.loads(out)["error"] == "not_configured", (args, out)
            assert "sitedispatch local up" in json.loads(out)["message"]
        env_file = tmp_path / ".sitedispatch" / "local.env"
        env_file.parent.mkdir()
        env_file.write_text("SITEDISPATCH_BUCKET=left-by-a-cloud-without-its-api\n")
        code, out = run(runner, "status", "--json")
        assert code == 1 and "names no API" in json.loads(out)["message"], out
        code, out = run(runner, "--env-file", str(tmp_path / "missing.env"), "status", "--json")
        assert code == 1 and "missing.env does not exist" in json.loads(out)["message"], out


def test_a_local_runtime_that_is_not_running_is_named_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import socket

    from sitedispatch.local.cloud import local_environment
    from tests.factories import settings

    _without_deployment(monkeypatch, tmp_path)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{probe.getsockname()[1]}"
    env_file = tmp_path / ".sitedispatch" / "local.env"
    env_file.parent.mkdir()
    environment = {**local_environment(settings(), endpoint), "SITEDISPATCH_API_URL": endpoint}
    env_file.write_text("".join(f"{k}={v}\n" for k, v in environment.items()))
    with cli_runner(api=False) as runner, mock.patch.dict(os.environ):  # the CLI loads the env file into os.environ
        for args in (["ops", "get", "op_x", "--json"], ["status", "--json"]):
            code, out = run(runner, *args)
            document = json.loads(out)
            assert code == 1 and document["error"] == "unreachable", (args, out)
            assert endpoint in document["message"] and "sitedispatch local up" in document["message"]


def test_submit_batch_answers_every_line_and_exits_75_listing_those_refused_for_backpressure(
    cloud: Cloud, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SITEDISPATCH_MAX_QUEUED_PER_SITE", "2")
    registered(cloud, "busy-site", "control-plane")
    lines = [
        {"kind": "wp_cron", "site_id": "busy-site", "params": {"due_minute": n}, "idempotency_key": f"k{n}"}
        for n in range(3)
    ] + [
        {
            "kind": "provision",
            "site_id": f"site-{n}",
            "params": {"title": "T", "admin_email": "a@b.example"},
            "idempotency_key": f"p{n}",
            "tenant": "customer-1",
        }
        for n in range(3)
    ]
    path = tmp_path / "work.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    with cli_runner() as cli:
        code, out = run(cli, "submit", "--batch", str(path), "--as", "control-plane", "--json")
        assert code == 75, out
        report = json.loads(out)
        assert (report["accepted"], report["existing"]) == (5, 0)
        assert [(r["line"], r["status"], r["limit"]) for r in report["refused"]] == [(3, 429, "site")]
        code, out = run(cli, "submit", "--batch", str(path), "--as", "control-plane")  # again: nothing new
        assert code == 75 and "0 accepted, 5 already submitted, 1 refused" in out and "line 3: 429" in out
        path.write_text('{"kind": "provision"}\nnot json\n')
        code, out = run(cli, "submit", "--batch", str(path), "--as", "control-plane")
        assert code == 2 and "work.jsonl:2: not a" in " ".join(out.split())
        code, out = run(cli, "submit", "publish", "--batch", str(path))
        assert code == 2 and "--batch takes everything from its file" in out


def test_ctrl_c_in_a_batch_reports_what_was_answered_and_running_it_again_submits_the_rest(
    cloud: Cloud, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sitedispatch.cli import batch
    from sitedispatch.client import ApiClient

    monkeypatch.setattr(batch, "BATCH_ITEMS", 4)  # 10 lines: three requests
    params = {"title": "T", "admin_email": "a@b.co"}
    lines = [
        {"kind": "provision", "site_id": f"b-{n}", "params": params, "idempotency_key": f"b{n}"} for n in range(10)
    ]
    path = tmp_path / "work.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    real_call, calls = ApiClient.call, []

    def interrupted_at_the_second(self: ApiClient, method: str, path: str, **kwargs: Any) -> Any:
        calls.append(path)
        if path == "/operations/batch" and calls.count(path) == 2:
            raise KeyboardInterrupt
        return real_call(self, method, path, **kwargs)

    with cli_runner() as cli:
        monkeypatch.setattr(ApiClient, "call", interrupted_at_the_second)
        code, out = run(cli, "submit", "--batch", str(path))
        assert code == 130 and "interrupted: 4 of 10 lines answered; the same file again submits" in out, out
        assert "4 accepted, 0 already submitted, 0 refused" in out
        monkeypatch.setattr(ApiClient, "call", real_call)
        code, out = run(cli, "submit", "--batch", str(path), "--json")
        assert code == 0 and (json.loads(out)["accepted"], json.loads(out)["existing"]) == (6, 4), out


def test_events_tail_prints_the_callers_events_in_order_and_where_to_continue(cli: CliRunner, cloud: Cloud) -> None:
    from tests.conftest import pump

    for site in ("tail-one", "tail-two"):
        code, out = run(
            cli, "submit", "provision", "--site", site, "--param", "title=T", "--param", "admin_email=a@t.example",
            "--as", "tenant-a",
        )  # fmt: skip
        assert code == 0, out
    pump(cloud)

    code, out = run(cli, "events", "tail", "--as", "tenant-a", "--json")
    assert code == 0, out
    events = [json.loads(line) for line in out.splitlines()]  # JSON Lines: one event a line
    assert [e["seq"] for e in events] == [1, 2, 3, 4]
    assert sorted(e["site_id"] for e in events if e["type"] == "operation.succeeded") == ["tail-one", "tail-two"]
    code, out = run(cli, "events", "tail", "--as", "tenant-a", "--after", "3", "--type", "publication.live")
    assert code == 0 and "publication.live" in out and "cursor 4:" in out and out.count("operation.succeeded") == 0
    code, out = run(cli, "events", "tail", "--as", "tenant-b", "--json")
    assert code == 0 and out == ""  # nobody else's
    code, out = run(cli, "events", "tail", "--as", "tenant-b", "--principal", "tenant-a")
    assert code == 4 and "its own events" in out


def test_webhooks_create_show_redeliver_rotate_and_delete_from_the_cli(cli: CliRunner, cloud: Cloud) -> None:
    from sitedispatch.local.receiver import WebhookReceiver
    from tests.conftest import pump, wait_for

    receiver = WebhookReceiver()
    with receiver.serving() as url:
        code, out = run(cli, "webhooks", "create", url, "--type", "operation.succeeded", "--as", "hooked", "--json")
        assert code == 0, out
        created = json.loads(out)
        endpoint_id, receiver.secrets = created["endpoint"]["endpoint_id"], [created["secret"]]
        code, out = run(
            cli, "submit", "provision", "--site", "hooked-site", "--param", "title=T", "--param",
            "admin_email=a@t.example", "--as", "hooked",
        )  # fmt: skip
        assert code == 0, out
        wait_for(lambda: pump(cloud) >= 0 and receiver.accepted(), what="the delivery")
        assert receiver.received[0].verified and receiver.received[0].data["type"] == "operation.succeeded"

        code, out = run(cli, "webhooks", "show", endpoint_id, "--as", "hooked")
        assert code == 0 and url in out and "operation.succeeded" in out and "yes" in out, out
        seq = receiver.received[0].data["seq"]
        code, out = run(cli, "webhooks", "redeliver", endpoint_id, "--from", str(seq), "--as", "hooked")
        assert code == 0 and f"sending places {seq}-{seq} again" in " ".join(out.split()), out
        wait_for(lambda: pump(cloud) >= 0 and len(receiver.accepted()) == 2, what="the redelivery")
        code, out = run(cli, "webhooks", "rotate", endpoint_id, "--as", "hooked")
        assert code == 0 and "new signing secret (shown once): whsec_" in out, out
        code, out = run(cli, "webhooks", "list", "--as", "someone-else")
        assert code == 0 and "no webhook endpoints" in out
        code, out = run(cli, "webhooks", "delete", endpoint_id, "--as", "someone-else")
        assert code != 0 and "not found" in out and "Traceback" not in out
        code, out = run(cli, "webhooks", "create", "https://10.0.0.1/hook", "--as", "hooked")
        assert code != 0 and "webhooks go to public hosts" in " ".join(out.split()) and "Traceback" not in out
        code, out = run(cli, "webhooks", "delete", endpoint_id, "--as", "hooked")
        assert code == 0 and f"deleted {endpoint_id}" in out


def test_sites_list_shows_a_principal_its_own_and_an_operator_or_reader_every_one(cli: CliRunner) -> None:
    for site, principal in (("list-a1", "tenant-a"), ("list-a2", "tenant-a"), ("list-b1", "tenant-b")):
        code, out = run_cli(cli, "sites", "register", site, "--driver", "reference", "--as", principal, "--json")
        assert code == 0, out

    def listed(*args: str) -> list[str]:
        code, out = run_cli(cli, "sites", "list", *args, "--json")
        assert code == 0, out
        return [s["site_id"] for s in json.loads(out)]

    assert listed("--as", "tenant-a") == ["list-a1", "list-a2"]
    assert listed("--as", "operator") == listed("--as", "reader") == ["list-a1", "list-a2", "list-b1"]
    assert listed("--as", "operator", "--search", "b1") == ["list-b1"]
    code, out = run_cli(cli, "sites", "pause", "list-a2", "--reason", "disk full", "--as", "operator", "--json")
    assert code == 0 and json.loads(out)["paused_by"] == "operator", out
    assert listed("--as", "tenant-a", "--paused") == ["list-a2"]
    assert listed("--as", "tenant-a", "--running") == ["list-a1"]
    code, out = run_cli(cli, "sites", "pause", "list-a1", "--reason", "curious", "--as", "reader", "--json")
    assert code != 0 and json.loads(out)["error"] == "forbidden", out
    code, out = run_cli(cli, "sites", "list", "--as", "tenant-a")
    assert code == 0 and "disk full (by operator" in out, out


def test_json_output_stays_one_document_however_many_metrics_the_in_process_functions_emitted(
    cli: CliRunner, cloud: Cloud
) -> None:
    # The in-process API function shares the CLI's stdout: its metrics must never reach a --json document, not even
    # once a hundred have been recorded (Powertools prints them then, disabled or not, unless a flush cleared them).
    from sitedispatch.observability import Metric, metrics

    for _ in range(99):  # earlier requests' metrics, each flushed at the end of its request
        metrics.add_metric(name=Metric.OperationAccepted, unit="Count", value=1)
        metrics.flush_metrics()
    code, out = run(
        cli,
        "submit",
        "provision",
        "--site",
        "acme-blog",
        "--param",
        "title=A",
        "--param",
        "admin_email=a@b.co",
        "--json",
    )
    assert code == 0 and json.loads(out)["status"] == "queued", out


def readme_walk() -> list[str]:
    """The README's first walk: each line of its block that runs the CLI."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = readme.split("A first walk, locally", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.startswith("sitedispatch ")]


def test_the_readmes_first_walk_works_as_written_as_one_identity(cli: CliRunner, cloud: Cloud) -> None:
    """No --as anywhere: the webhook registered, the site registered, its provision and import, the wait, the live
    page and the event feed are one identity's, and each line does what its comment says."""
    import re
    import shlex

    from sitedispatch.local.receiver import WebhookReceiver
    from tests.conftest import pump
    from tests.unit.conftest import THEME_TEST_DATA

    lines = readme_walk()
    assert lines[0].startswith("sitedispatch local up") and len(lines) == 8, lines
    receiver, outputs, last_op = WebhookReceiver(), [], ""
    with receiver.serving() as url:
        for line in lines[1:]:  # the runtime is the test's
            args = shlex.split(line, comments=True)[1:]
            args = [{"export.xml": str(THEME_TEST_DATA), "OP": last_op}.get(a, a) for a in args]
            args = [url if a.startswith("http://127.0.0.1:9000/") else a for a in args]
            code, out = run(cli, *args)
            assert code == 0, (line, out)
            outputs.append(out)
            if found := re.search(r"follow it: sitedispatch ops wait (op_\w+)", out):
                last_op = found.group(1)
            if found := re.search(r"signing secret \(shown once\): (whsec_\S+)", out):
                receiver.secrets = [found.group(1)]
            pump(cloud)
        created, registered_, provisioned, imported, waited, home, events = outputs
        assert "signing secret" in created and "acme-blog" in registered_ and "accepted" in provisioned
        assert f"follow it: sitedispatch ops wait {last_op}" in imported
        assert "succeeded" in waited and last_op in waited
        assert "Template: Sticky" in home  # a post of the import, on the live home page
        assert events.count("operation.succeeded") == 2 and "publication.live" in events
        wait_for(lambda: pump(cloud) >= 0 and len(receiver.accepted()) >= 4, what="the events POSTed, signed")
        assert all(r.verified for r in receiver.accepted())


def test_an_operators_command_without_as_says_in_one_line_how_to_act_as_one(cli: CliRunner) -> None:
    code, out = run(cli, "reconcile")
    assert code == 4 and out.count("\n") == 1 and "default may not run sweeps" in out
    assert "--as operator" in out and "Traceback" not in out
    assert run(cli, "reconcile", "--as", "operator")[0] == 0


def test_at_eighty_columns_no_id_or_command_is_cut_and_wide_keeps_each_on_one_line(
    cli: CliRunner, cloud: Cloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sitedispatch.cli.output import console
    from tests.unit.conftest import FIXTURES

    monkeypatch.setattr(console, "_width", 80)  # a terminal of 80 columns
    site = "a-site-with-a-rather-long-identifier-for-its-customer"
    run(cli, "submit", "provision", "--site", site, "--param", "title=T", "--param", "admin_email=a@b.co")
    pump(cloud)
    code, out = run(cli, "submit", "import", "--site", site, "--input-file", str(FIXTURES / "malformed.xml"))
    op_id = out.split("follow it: sitedispatch ops wait ")[1].split()[0]
    pump(cloud)
    command = f"sitedispatch dlq redrive --operation {op_id} --input-file FIXED_INPUT"
    for args in (["ops", "list"], ["dlq", "list"], ["sites", "history", site], ["audit", "list"]):
        code, narrow = run(cli, *args)
        assert code == 0 and "…" not in narrow and max(map(len, narrow.splitlines())) <= 80, (args, narrow)
        code, wide = run(cli, "--wide", *args)
        assert code == 0 and "…" not in wide, (args, wide)
        lines = wide.splitlines()
        if args[0] != "audit":
            assert any(site in line for line in lines), (args, wide)  # each id whole on one line
        if args[0] in ("ops", "dlq"):
            assert any(op_id in line for line in lines), (args, wide)
        if args[0] == "dlq":
            assert any(command in line for line in lines), wide  # the recovery command, copyable as it is


def test_the_small_mistakes_each_get_one_line(cli: CliRunner, cloud: Cloud) -> None:
    registered(cloud, "small-site", "default")
    code, out = run(cli, "sites", "list", "--paused", "--running")
    assert code == 2 and "--paused and --running exclude each other" in out and "Traceback" not in out
    code, out = run(cli, "quotas", "set", "tenant-a", "--max-outstanding", "3", "--as", "operator")
    assert code == 2 and "Missing option '--reason'" in out and "Field required" not in out
    code, out = run(cli, "sites", "pause", "small-site")
    assert code == 2 and "Missing option '--reason'" in out
    code, out = run(cli, "sites", "pause", "small-site", "--reason", "disk full")
    assert code == 0 and out == "paused small-site: disk full\n"
    code, out = run(cli, "sites", "pause", "small-site", "--reason", "still full")
    assert code == 0 and "(it was paused already: yes: disk full (by default, " in out and "reason is replaced" in out


def test_status_says_a_queue_of_messages_it_cannot_age_is_not_known_rather_than_empty(
    cli: CliRunner, cloud: Cloud
) -> None:
    from sitedispatch.domain.model import PublicationMessage

    cloud.deps.publication_queue.send(PublicationMessage("a-site", "r" * 64, 1))
    code, out = run(cli, "--wide", "status", "--as", "operator")
    [row] = [line for line in out.splitlines() if "│ publications " in line]
    assert code == 0 and "not known" in row and "│ 1 " in row, out
    [row] = [line for line in out.splitlines() if "│ events " in line]
    assert "not known" not in row  # nothing in it: nothing to age
