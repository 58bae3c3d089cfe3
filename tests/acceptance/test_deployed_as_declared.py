"""G13 with real processes: the local cloud is the synthesized template and each function runs under its own role
with IAM enforced. A grant removed from the template is denied where the code needs it; the calls the template
once lacked (a batch's unsent-groups record, a quota cleared, a fairness share released) pass under their roles."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sitedispatch.aws.operation_rows import unsent_record
from sitedispatch.aws.tables import UNSENT, index_shard
from sitedispatch.client import ApiClient
from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.model import Status
from sitedispatch.domain.settings import Settings
from sitedispatch.local.cloud import LOCAL_READER
from sitedispatch.local.deployment import DEPLOYMENT_FILE_NAME, Deployment
from sitedispatch.local.iam import IAM_CALLS_DIR_ENV, IAM_CALLS_FILE_NAME
from sitedispatch.local.supervisor import LocalRuntime
from sitedispatch.local.template import local_context, resources_of, synthesized
from tests.acceptance.conftest import wait_for
from tests.factories import PROVISION

FUNCTION_TIMEOUT_S = 10


def connect(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Dependencies:
    """The test's own view of the cloud, as the account's administrator (not a function's role)."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return Dependencies(Settings())


def judged(runtime: LocalRuntime) -> list[dict[str, Any]]:
    path = runtime.workdir / IAM_CALLS_FILE_NAME
    return json.loads(path.read_text()) if path.is_file() else []


def without_grant(template: dict[str, Any], function: str, action: str, resource_prefix: str) -> dict[str, Any]:
    """The template with `action` on the resources whose logical id starts with `resource_prefix` taken from the
    role of the function whose construct is `function`."""
    edited = json.loads(json.dumps(template))
    [role] = [
        f["Properties"]["Role"]["Fn::GetAtt"][0]
        for logical, f in resources_of(edited, "AWS::Lambda::Function").items()
        if logical.startswith(f"Functions{function}") and not logical.startswith(f"Functions{function}Role")
    ]
    removed = 0
    for policy in resources_of(edited, "AWS::IAM::Policy").values():
        if {"Ref": role} not in policy["Properties"]["Roles"]:
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            if action not in actions:
                continue
            kept = [r for r in resources if not json.dumps(r).startswith(f'{{"Fn::GetAtt": ["{resource_prefix}')]
            removed += len(resources) - len(kept)
            statement["Resource"] = kept
    assert removed == 1, f"{function}'s role grants {action} on {resource_prefix} {removed} times"
    return edited


def doctor(runtime: LocalRuntime) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sitedispatch", "--env-file", str(runtime.env_file), "doctor", "--wait", "60"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def provision(deps: Dependencies, site: str, principal: str = "control-plane") -> str:
    return (
        deps.submitter()
        .submit(kind="provision", site_id=site, principal=principal, params=PROVISION)
        .operation.operation_id
    )


def test_a_grant_removed_from_the_template_is_denied_and_with_it_back_the_publication_goes_live(
    runtime: LocalRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A deliberately broken grant is this test's, not the suite's record of least privilege
    monkeypatch.delenv(IAM_CALLS_DIR_ENV, raising=False)
    template = synthesized(local_context(FUNCTION_TIMEOUT_S, "operator", LOCAL_READER))
    broken = tmp_path / "broken.template.json"
    broken.write_text(json.dumps(without_grant(template, "OperationsWorker", "sqs:SendMessage", "QueuesPublications")))

    # Given the stack without the operations worker's SendMessage on the publications queue
    env = runtime.start_cloud(0, function_timeout_s=FUNCTION_TIMEOUT_S, template=broken)
    deployment = Deployment.read(runtime.workdir / DEPLOYMENT_FILE_NAME)
    [worker] = runtime.start_workers([("operations", 1, None, None, None), ("publications", 1, None, None, None)])[:1]
    deps = connect(env, monkeypatch)

    # When a site is provisioned
    provision(deps, "denied-site")

    # Then the worker's send of its publication is denied, as AWS would deny it, and nothing goes live
    role = deployment.functions["operations"].role_arn.rsplit("/", 1)[1]
    publications = deps.settings.publications_queue_url.rsplit("/", 1)[1]
    denied = wait_for(
        lambda: [
            c
            for c in judged(runtime)
            if not c["allowed"] and c["role"] == role and c["resource"].endswith(f":{publications}")
        ],
        timeout_s=60,
        what="the publication's send to be denied",
    )
    assert {c["action"] for c in denied} == {"sqs:SendMessage"}
    assert b"AccessDenied" in worker.log.read_bytes()
    site = deps.sites.get("denied-site")
    assert site is None or not site.live_seq

    # And with the grant back (the template as synthesized), the same provision goes live
    runtime.stop_all()
    env = runtime.start_cloud(0, function_timeout_s=FUNCTION_TIMEOUT_S)
    runtime.start_workers([("operations", 1, None, None, None), ("publications", 1, None, None, None)])
    deps = connect(env, monkeypatch)
    provision(deps, "denied-site")
    wait_for(
        lambda: (s := deps.sites.get("denied-site")) is not None and s.live_seq is not None,
        timeout_s=60,
        what="the publication live",
    )
    assert not [c for c in judged(runtime) if not c["allowed"]]


def test_the_calls_the_template_once_lacked_pass_under_their_roles(
    runtime: LocalRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch submit (the api's BatchWriteItem on the counters), a quota cleared (its DeleteItem), a batch record
    a dead submitter left (the reconciler's BatchWriteItem), and work waiting for a fairness share released by
    the worker that ends the operation ahead of it (its SendMessage on its own lane)."""
    # (an operation over the running cap looks again within 2 s, not the deployment's 30)
    env = runtime.start_cloud(
        0,
        function_timeout_s=FUNCTION_TIMEOUT_S,
        policy={"max_running_per_principal": 1, "reference_latency_s": 1, "defer_max_s": 2},
    )
    runtime.start_workers(
        [("operations", 2, None, None, None), ("publications", 1, None, None, None), ("events", 1, None, None, None)]
    )
    api = runtime.start_api()
    deps = connect(env, monkeypatch)
    producer, operator = ApiClient(api, identity="control-plane"), ApiClient(api, identity="operator")

    # A batch of three provisions for one principal, whose running cap is 1: two wait for its share
    answer = producer.call(
        "POST",
        "/operations/batch",
        body={
            "items": [
                {"kind": "provision", "site_id": f"batch-{n}", "idempotency_key": f"b{n}", "params": PROVISION}
                for n in range(3)
            ]
        },
    )
    assert answer["accepted"] == 3, answer
    ids = [item["operation"]["operation_id"] for item in answer["items"]]
    wait_for(
        lambda: all((op := deps.operations.get(i)) is not None and op.status == Status.SUCCEEDED for i in ids),
        timeout_s=90,
        what="every provision of the batch, each released by the one before it",
    )

    # A quota set, then cleared
    operator.call("PUT", "/quotas", body={"principal": "control-plane", "max_outstanding": 5, "reason": "test"})
    cleared = operator.call("DELETE", "/quotas", query={"principal": "control-plane", "reason": "done"})
    assert cleared["principal"] == "control-plane"

    # A batch whose submitter died before it deleted its record: the reconciler sends its groups and deletes it
    stranded = provision(deps, "stranded-site")
    deps.models.Counter(
        unsent_record(stranded),
        operations=[stranded],
        changed_at=time.time() - 3600,
        held=index_shard(UNSENT, stranded),  # what the reconciler finds a batch's record by
    ).save()
    runtime.start_scheduler(rate_scale=0.02)
    wait_for(
        lambda: deps.models.Counter.count(unsent_record(stranded)) == 0,
        timeout_s=60,
        what="the reconciler to delete the stranded batch's record",
    )

    # and the doctor, from the operator's side, finds every check passing
    checked = doctor(runtime)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert [line.split(" ", 1)[0] for line in checked.stdout.splitlines()[:4]] == ["ok"] * 4, checked.stdout

    denied = [c for c in judged(runtime) if not c["allowed"]]
    assert denied == []
    called = {
        (c["role"].split("-Functions", 1)[-1].split("Role", 1)[0], c["action"], c["resource"].split(":")[-1])
        for c in judged(runtime)
    }
    for function, action, resource in (
        ("Api", "dynamodb:BatchWriteItem", "CountersTable"),
        ("Api", "dynamodb:DeleteItem", "CountersTable"),
        ("Reconciler", "dynamodb:BatchWriteItem", "CountersTable"),
        ("OperationsWorker", "sqs:SendMessage", "QueuesOperationsQueue"),  # its own lane: a share released
    ):
        assert any(f == function and a == action and resource in r for f, a, r in called), (function, action)


def test_the_doctor_names_a_callers_grant_the_template_lacks(
    runtime: LocalRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a stack whose producer policy lacks the submit route
    monkeypatch.delenv(IAM_CALLS_DIR_ENV, raising=False)
    template = synthesized(local_context(FUNCTION_TIMEOUT_S, "operator", LOCAL_READER))
    edited = json.loads(json.dumps(template))
    statement = edited["Resources"]["ProducerPolicy"]["Properties"]["PolicyDocument"]["Statement"][0]
    statement["Resource"] = [r for r in statement["Resource"] if not json.dumps(r).endswith('/POST/operations"]]}')]
    broken = tmp_path / "broken.template.json"
    broken.write_text(json.dumps(edited))
    runtime.start_cloud(0, function_timeout_s=FUNCTION_TIMEOUT_S, template=broken)
    runtime.start_api()

    # When the doctor checks it
    checked = doctor(runtime)

    # Then the stack, its outputs and the API pass, and the canary's submit fails naming the policy and the route
    assert checked.returncode == 1
    lines = checked.stdout.splitlines()
    assert [line.split(" ", 1)[0] for line in lines[:4]] == ["ok", "ok", "ok", "FAIL"], checked.stdout
    assert "canary" in lines[3] and "producer policy does not allow it" in lines[3] and "POST /operations" in lines[3]
    assert "Traceback" not in checked.stdout + checked.stderr
