"""The deployable stack: functions, event source mappings, roles, schedules, dashboard and alarms, policies, cdk-nag,
cfn-lint and the Docker-free asset."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sitedispatch.api.app import OPERATOR_ROUTES
from sitedispatch.api.app import routes as api_routes
from sitedispatch.aws.tables import table_specs
from sitedispatch.domain.resources import (
    API_URL_VARIABLE,
    EVENT_WORK,
    FUNCTIONS,
    LAMBDA_MAX_TIMEOUT_S,
    QUEUES,
    SCHEDULES,
    SECRET_NAME_PREFIX,
    WEBHOOK_SECRET_PREFIX,
)
from sitedispatch.observability import Metric
from stacks.bundling import LAMBDA_PYTHON, import_closure, runtime_interpreter
from stacks.functions import DEFAULT_MAX_CONCURRENCY
from tests.infrastructure.conftest import Synthesized, resources, synthesize

ROOT = Path(__file__).resolve().parents[2]


def by_description(template: dict[str, Any], kind: str, text: str) -> dict[str, Any]:
    [found] = [
        r for r in resources(template, kind).values() if text in json.dumps(r["Properties"].get("Description", ""))
    ]
    return found


def role_actions(template: dict[str, Any], function_logical_id: str) -> tuple[set[str], list[dict[str, Any]]]:
    """Every action the function's role allows, and its statements."""
    functions = resources(template, "AWS::Lambda::Function")
    [function] = [f for k, f in functions.items() if k.startswith(f"Functions{function_logical_id}")]
    role = function["Properties"]["Role"]["Fn::GetAtt"][0]
    attached = [
        *resources(template, "AWS::IAM::Policy").values(),
        *resources(template, "AWS::IAM::ManagedPolicy").values(),
    ]
    statements = [  # its inline policy, and the managed policy CDK moves the rest into past IAM's size limit
        statement
        for policy in attached
        if {"Ref": role} in policy["Properties"].get("Roles", [])
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    actions = {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    return actions, statements


def test_functions_are_arm64_current_python_traced_and_log_with_retention(synthesized_stack: Synthesized) -> None:
    template = synthesized_stack.template
    functions = {k: f["Properties"] for k, f in resources(template, "AWS::Lambda::Function").items()}
    assert len(functions) == len(FUNCTIONS)
    log_groups = resources(template, "AWS::Logs::LogGroup")
    for spec in FUNCTIONS.values():
        [props] = [p for k, p in functions.items() if k.startswith(f"Functions{spec.logical_id}")]
        assert props["Runtime"] == f"python{LAMBDA_PYTHON}" and props["Architectures"] == ["arm64"]
        assert props["Handler"] == spec.handler and props["Timeout"] == spec.timeout_s
        assert props["MemorySize"] == spec.memory_mb and props["TracingConfig"] == {"Mode": "Active"}
        assert props["LoggingConfig"]["LogFormat"] == "JSON"
        group = props["LoggingConfig"]["LogGroup"]["Ref"]
        assert log_groups[group]["Properties"]["RetentionInDays"] == 90
        variables = props["Environment"]["Variables"]
        assert variables["POWERTOOLS_SERVICE_NAME"] == "sitedispatch"
        assert set(synthesized_stack.stack.function_environment()) <= set(variables)


def test_event_source_mappings_report_batch_item_failures_with_a_concurrency_cap(
    synthesized_stack: Synthesized,
) -> None:
    template = synthesized_stack.template
    mappings = list(resources(template, "AWS::Lambda::EventSourceMapping").values())
    assert len(mappings) == len(QUEUES)
    queues = resources(template, "AWS::SQS::Queue")
    for lane, spec in QUEUES.items():
        [queue_id] = [k for k in queues if k.startswith(f"Queues{spec.logical_id}")]
        [mapping] = [
            m["Properties"] for m in mappings if m["Properties"]["EventSourceArn"] == {"Fn::GetAtt": [queue_id, "Arn"]}
        ]
        assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        # a batch never makes a site wait; events are placed ten at a time (one feed append per principal in it); a
        # webhook wake is one endpoint's
        assert mapping["BatchSize"] == FUNCTIONS[spec.function].batch_size == (10 if spec.carries == EVENT_WORK else 1)
        assert mapping["ScalingConfig"] == {"MaximumConcurrency": DEFAULT_MAX_CONCURRENCY[lane]}
        function = mapping["FunctionName"]["Ref"]
        assert function.startswith(f"Functions{FUNCTIONS[spec.function].logical_id}")


def test_imports_run_in_their_own_function_with_lambdas_longest_timeout(synthesized_stack: Synthesized) -> None:
    """The bulk lane has its own function: an import may run 15 minutes while the interactive lane keeps a short
    timeout (and so a short visibility: a provision held by a dead environment comes back in minutes)."""
    template = synthesized_stack.template
    functions = resources(template, "AWS::Lambda::Function")
    [bulk] = [f["Properties"] for k, f in functions.items() if k.startswith("FunctionsBulkOperationsWorker")]
    [interactive] = [f["Properties"] for k, f in functions.items() if k.startswith("FunctionsOperationsWorker")]
    assert bulk["Timeout"] == LAMBDA_MAX_TIMEOUT_S > interactive["Timeout"]
    assert bulk["Handler"] == interactive["Handler"]  # one worker core, two lanes
    assert bulk["MemorySize"] >= 1769  # a whole vCPU for the XML parse
    assert all(f["Properties"]["Timeout"] <= LAMBDA_MAX_TIMEOUT_S for f in functions.values())
    bulk_actions, bulk_statements = role_actions(template, "BulkOperationsWorker")
    _, interactive_statements = role_actions(template, "OperationsWorker")

    def consumed(statements: list[dict[str, Any]]) -> set[str]:
        return {
            json.dumps(r)
            for s in statements
            if "sqs:ReceiveMessage" in s["Action"]
            for r in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])
        }

    assert consumed(bulk_statements) and all("BulkOperationsQueue" in q for q in consumed(bulk_statements))
    assert consumed(interactive_statements)
    assert not any("BulkOperationsQueue" in q for q in consumed(interactive_statements))
    assert "secretsmanager:GetSecretValue" in bulk_actions  # imports into WordPress sites read their credentials


def test_maximum_concurrency_comes_from_cdk_context(tmp_path: Path) -> None:
    synthesized = synthesize(
        tmp_path / "out",
        context={"maxConcurrency.bulk": "7", "alarmTopicArn": "arn:aws:sns:us-east-1:123456789012:ops"},
    )
    caps = sorted(
        m["Properties"]["ScalingConfig"]["MaximumConcurrency"]
        for m in resources(synthesized.template, "AWS::Lambda::EventSourceMapping").values()
    )
    others = [DEFAULT_MAX_CONCURRENCY[queue] for queue in ("operations", "publications", "events", "webhooks")]
    assert caps == sorted([7, *others])
    alarms = resources(synthesized.template, "AWS::CloudWatch::Alarm").values()
    assert all(a["Properties"]["AlarmActions"] == ["arn:aws:sns:us-east-1:123456789012:ops"] for a in alarms)
    with pytest.raises(ValueError, match="between 2 and 1000"):
        synthesize(tmp_path / "bad", context={"maxConcurrency.operations": "1"}, name="Bad")


def test_each_role_holds_only_the_actions_its_code_calls(synthesized_stack: Synthesized) -> None:
    template = synthesized_stack.template
    worker, worker_statements = role_actions(template, "OperationsWorker")
    publisher, publisher_statements = role_actions(template, "PublicationWorker")
    reconciler, _ = role_actions(template, "Reconciler")
    for actions in (worker, publisher, reconciler):
        assert not any(a.endswith(":*") or a == "*" for a in actions)
        assert not {"dynamodb:DeleteItem", "s3:DeleteObject", "sqs:PurgeQueue"} & actions
    assert "dynamodb:BatchWriteItem" not in worker | publisher
    # the reconciler deletes a batch's unsent-groups record once it has sent them: on the counters table only
    _, reconciler_statements = role_actions(template, "Reconciler")
    batch_writes = [s for s in reconciler_statements if "dynamodb:BatchWriteItem" in json.dumps(s["Action"])]
    assert [tables_touched(template, [s]) for s in batch_writes] == [{"counters"}]
    assert "dynamodb:Scan" not in worker | publisher | reconciler  # every sweep reads through an index
    assert {
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:Query",
        "s3:GetObject",
        "s3:PutObject",
        "sqs:ChangeMessageVisibility",
        "sqs:SendMessage",
    } <= worker
    assert {"sqs:ReceiveMessage", "sqs:DeleteMessage"} <= publisher
    # WordPress credentials: the operations worker reads sitedispatch/ secrets only; nobody else reads any
    secret_reads = [s for s in worker_statements if "secretsmanager:GetSecretValue" in json.dumps(s["Action"])]
    assert secret_reads and all(f":secret:{SECRET_NAME_PREFIX}*" in json.dumps(s["Resource"]) for s in secret_reads)
    assert not any(a.startswith("secretsmanager:") for a in publisher | reconciler)  # only the operations workers
    # the publication worker touches only the sites and publications tables (and writes a promotion's event), and
    # the sites/ prefix
    assert tables_touched(template, publisher_statements) == {"sites", "publications", "events"}
    assert any("/sites/*" in json.dumps(s["Resource"]) for s in publisher_statements if "s3:PutObject" in s["Action"])
    # GSIs are granted by name, never table/index/*, and only what an index serves (Query, Scan): an item action
    # on an index ARN grants nothing
    for function in FUNCTIONS.values():
        statements = role_actions(template, function.logical_id)[1]
        assert "/index/*" not in json.dumps(statements)
        for statement in statements:
            if "/index/" in json.dumps(statement["Resource"]):
                assert set(statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]) <= {
                    "dynamodb:Query",
                    "dynamodb:Scan",
                }, statement
    assert all(
        f"/index/{index}" in json.dumps(worker_statements) for index in ("by-site", "by-waiting")
    )  # supersession, the shares' waiting work


def tables_touched(template: dict[str, Any], statements: list[dict[str, Any]]) -> set[str]:
    """The table roles a role's DynamoDB statements name."""
    tables = resources(template, "AWS::DynamoDB::Table")
    touched = {
        json.dumps(r)
        for s in statements
        for r in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])
        if "dynamodb" in json.dumps(s["Action"])
    }
    names = {k for k in tables if any(k in ref for ref in touched)}
    return {role for role, spec in table_specs().items() for n in names if n.startswith(f"Tables{spec.logical_id}")}


def test_the_events_worker_places_events_and_puts_them_on_the_stacks_bus_only(synthesized_stack: Synthesized) -> None:
    template = synthesized_stack.template
    actions, statements = role_actions(template, "EventsWorker")
    assert tables_touched(template, statements) == {"events", "feed", "webhooks"}  # webhooks: read, to wake them
    assert not any(a.startswith(("s3:", "secretsmanager:")) for a in actions)
    sends = [s for s in statements if "sqs:SendMessage" in json.dumps(s["Action"])]
    assert [("WebhooksQueue" in json.dumps(s["Resource"])) for s in sends] == [True]  # it wakes endpoints only
    webhook_writes = [s for s in statements if "PutItem" in json.dumps(s) and "Webhooks" in json.dumps(s)]
    assert webhook_writes == []
    [put] = [s for s in statements if "events:PutEvents" in json.dumps(s["Action"])]
    [bus] = resources(template, "AWS::Events::EventBus")
    assert json.dumps(put["Resource"]) == json.dumps({"Fn::GetAtt": [bus, "Arn"]})
    # every function that ends operations, promotes or pauses writes events and announces them
    for function in ("OperationsWorker", "BulkOperationsWorker", "PublicationWorker", "Reconciler", "Api"):
        role_statements = role_actions(template, function)[1]
        assert "events" in tables_touched(template, role_statements), function
        assert any(
            "sqs:SendMessage" in json.dumps(s["Action"]) and "EventsQueue" in json.dumps(s["Resource"])
            for s in role_statements
        ), function


def test_webhooks_are_sent_by_their_own_worker_and_their_secrets_are_apart(synthesized_stack: Synthesized) -> None:
    """The webhooks worker reads its endpoints' secrets and feeds and writes endpoints and deliveries; only the API
    creates, rotates and deletes secrets, under their own prefix (the operations workers read site credentials
    under another, and no webhook secret); the events worker and the reconciler wake endpoints."""
    template = synthesized_stack.template
    actions, statements = role_actions(template, "WebhooksWorker")
    assert tables_touched(template, statements) == {"webhooks", "deliveries", "feed", "events"}
    assert not any(a.startswith("s3:") for a in actions) and "dynamodb:Scan" not in actions
    reads = [s for s in statements if "secretsmanager:" in json.dumps(s["Action"])]
    assert [s["Action"] for s in reads] == ["secretsmanager:GetSecretValue"]
    assert f":secret:{WEBHOOK_SECRET_PREFIX}*" in json.dumps(reads[0]["Resource"])
    _, api_statements = role_actions(template, "Api")
    managed = [s for s in api_statements if "secretsmanager:CreateSecret" in json.dumps(s["Action"])]
    assert managed and all(f":secret:{WEBHOOK_SECRET_PREFIX}*" in json.dumps(s["Resource"]) for s in managed)
    assert not WEBHOOK_SECRET_PREFIX.startswith(SECRET_NAME_PREFIX)  # a site-credential grant reads none of them
    deletes = [s for s in api_statements if "dynamodb:DeleteItem" in json.dumps(s["Action"])]
    # deliveries: a batch; sites: an empty one deleted with its counter
    assert [tables_touched(template, [s]) for s in deletes] == [{"webhooks", "counters", "sites"}]
    for function in ("EventsWorker", "Reconciler", "WebhooksWorker"):
        assert any(
            "sqs:SendMessage" in json.dumps(s["Action"]) and "WebhooksQueue" in json.dumps(s["Resource"])
            for s in role_actions(template, function)[1]
        ), function
    for function in ("OperationsWorker", "BulkOperationsWorker", "PublicationWorker", "Reconciler", "EventsWorker"):
        granted = json.dumps(role_actions(template, function)[1])
        assert WEBHOOK_SECRET_PREFIX not in granted, function


def test_schedules_invoke_the_reconciler_by_name_with_retries_and_a_dlq(synthesized_stack: Synthesized) -> None:
    template = synthesized_stack.template
    schedules = [s["Properties"] for s in resources(template, "AWS::Scheduler::Schedule").values()]
    assert len(schedules) == len(SCHEDULES)
    rates = {"reconcile": "rate(1 minute)", "wp-events": "rate(1 minute)", "queue-repair": "rate(5 minutes)"}
    for props in schedules:
        name = json.loads(props["Target"]["Input"])["schedule"]
        assert props["ScheduleExpression"] == rates[name]
        assert props["Target"]["RetryPolicy"]["MaximumRetryAttempts"] == 2
        assert "ScheduleDeadLetterQueue" in json.dumps(props["Target"]["DeadLetterConfig"])
        assert "Reconciler" in json.dumps(props["Target"]["Arn"])
    assert {json.loads(p["Target"]["Input"])["schedule"] for p in schedules} == set(SCHEDULES)


def test_dashboard_and_alarms_cover_the_failure_signals(synthesized_stack: Synthesized) -> None:
    template = synthesized_stack.template
    [dashboard] = resources(template, "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for metric in (
        "ApproximateAgeOfOldestMessage",
        "ApproximateNumberOfMessagesVisible",
        "ApproximateNumberOfMessagesNotVisible",
        "Errors",
        "Throttles",
        "Duration",
        "ConcurrentExecutions",
        Metric.OperationSucceeded,
        Metric.OperationRetried,
        Metric.OperationDead,
        Metric.OperationSuperseded,
        Metric.Backpressured,
        Metric.QueueDelay,
        "p99",
    ):
        assert metric in body, metric
    alarms = [a["Properties"] for a in resources(template, "AWS::CloudWatch::Alarm").values()]
    oldest = [a for a in alarms if a.get("MetricName") == "ApproximateAgeOfOldestMessage"]
    dead = [a for a in alarms if a.get("MetricName") == "ApproximateNumberOfMessagesVisible"]
    rates = [a for a in alarms if "Metrics" in a and "errors / invocations" in json.dumps(a["Metrics"])]
    assert len(oldest) == len(dead) == len(QUEUES) and len(rates) == len(FUNCTIONS)
    [step_failed] = [a for a in alarms if a.get("MetricName") == Metric.ReconcileStepFailed]
    assert step_failed["Threshold"] == 0 and step_failed["ComparisonOperator"] == "GreaterThanThreshold"
    assert all(a["Threshold"] == 0 and a["EvaluationPeriods"] == 1 for a in dead)
    assert all("AlarmActions" not in a for a in alarms)  # no topic in context: no actions


def test_producer_operator_and_reader_policies_are_exported_with_stable_ids(synthesized_stack: Synthesized) -> None:
    template = synthesized_stack.template
    exported = {
        k: p for k, p in resources(template, "AWS::IAM::ManagedPolicy").items() if "Roles" not in p["Properties"]
    }
    assert set(exported) == {"ProducerPolicy", "OperatorPolicy", "ReaderPolicy"}  # the others: a role's overflow
    outputs = template["Outputs"]
    assert outputs["ProducerPolicyArn"]["Value"] == {"Ref": "ProducerPolicy"}
    assert outputs["OperatorPolicyArn"]["Value"] == {"Ref": "OperatorPolicy"}
    assert outputs["ReaderPolicyArn"]["Value"] == {"Ref": "ReaderPolicy"}
    assert outputs["ApiUrl"]["Description"] == API_URL_VARIABLE
    assert not [
        name for name, o in outputs.items() if o.get("Description", "").startswith("SITEDISPATCH_") and name != "ApiUrl"
    ]


def _statements(policy: dict[str, Any]) -> list[dict[str, Any]]:
    return list(policy["Properties"]["PolicyDocument"]["Statement"])


def _invoked_routes(policy: dict[str, Any]) -> set[tuple[str, str]]:
    """(METHOD, /path/*) of every execute-api:Invoke resource of a policy (Fn::Join of the API's ARN parts)."""
    routes = set()
    for statement in _statements(policy):
        if statement["Action"] != "execute-api:Invoke":
            continue
        for resource in statement["Resource"]:
            tail = "".join(part for part in resource["Fn::Join"][1] if isinstance(part, str)).split("/$default/")[-1]
            method, _, path = tail.partition("/")
            routes.add((method, f"/{path}"))
    return routes


def test_the_api_is_the_only_way_in(synthesized_stack: Synthesized) -> None:
    """Every route is authorized by IAM; the producer, operator and reader policies grant execute-api:Invoke on
    routes and nothing on the tables, queues or bucket; producers do not get the operators' routes, readers only
    the reads (and the core refuses a reader anything else, whatever another policy grants)."""
    import re

    template = synthesized_stack.template
    routes = resources(template, "AWS::ApiGatewayV2::Route")
    assert {r["Properties"]["RouteKey"] for r in routes.values()} == {f"{m} {p}" for m, p in api_routes()}
    assert all(r["Properties"]["AuthorizationType"] == "AWS_IAM" for r in routes.values())
    assert "$default" not in {r["Properties"]["RouteKey"] for r in routes.values()}  # no catch-all, unsigned or not

    policies = resources(template, "AWS::IAM::ManagedPolicy")
    for name in ("ProducerPolicy", "OperatorPolicy", "ReaderPolicy"):
        actions = {
            a
            for st in _statements(policies[name])
            for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])
        }
        assert actions == {"execute-api:Invoke", "cloudformation:DescribeStacks"}, (name, actions)
        assert not any(re.match(r"(dynamodb|sqs|s3|sts):", a) for a in actions)
    wildcard = {(m, re.sub(r"\{[^}]+\}", "*", p)) for m, p in api_routes()}
    operators_only = {(m, re.sub(r"\{[^}]+\}", "*", p)) for m, p in OPERATOR_ROUTES}
    assert _invoked_routes(policies["OperatorPolicy"]) == wildcard
    assert _invoked_routes(policies["ProducerPolicy"]) == wildcard - operators_only
    assert _invoked_routes(policies["ReaderPolicy"]) == {(m, p) for m, p in wildcard if m == "GET"}
    assert operators_only  # quotas and sweeps


def test_only_the_functions_write_the_audit_log(synthesized_stack: Synthesized) -> None:
    template = synthesized_stack.template
    audit = next(k for k in resources(template, "AWS::DynamoDB::Table") if k.startswith("TablesAuditTable"))
    writers = set()
    for name, policy in resources(template, "AWS::IAM::Policy").items():
        for statement in _statements(policy):
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if "dynamodb:PutItem" in actions and audit in json.dumps(statement["Resource"]):
                writers.add(name)
    assert writers and all(name.startswith("FunctionsApiRole") for name in writers), writers


def test_cdk_nag_reports_no_unacknowledged_finding_and_every_acknowledgment_has_a_reason(
    synthesized_stack: Synthesized,
) -> None:
    report = json.loads((synthesized_stack.outdir / "validation-report.json").read_text())
    [nag] = [r for r in report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    assert nag["conclusion"] == "success" and nag["violations"] == []
    assert nag["suppressedViolations"]  # the acknowledged ones are listed, each with its reason
    assert all(len(v["reason"]) > 40 for v in nag["suppressedViolations"])
    rules = {v["ruleName"].split("[")[0] for v in nag["suppressedViolations"]}
    assert rules <= {"AwsSolutions-IAM5", "AwsSolutions-SQS3", "AwsSolutions-L1"}  # L1: stacks/nag.py RUNTIME


def test_checkov_finds_nothing_unacknowledged_and_every_skip_says_why(synthesized_stack: Synthesized) -> None:
    """checkov 3 (its own environment, `make checkov`) over the template: no failed check; each finding this stack
    does not fix is skipped on its resource with a reason (stacks/checkov.py)."""
    checkov = ROOT / ".venv-checkov" / "bin" / "checkov"
    assert checkov.exists(), "checkov is not installed: `make checkov` (make test does it)"
    [template] = synthesized_stack.outdir.glob("*.template.json")
    run = subprocess.run(
        [str(checkov), "-f", str(template), "--framework", "cloudformation", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = json.loads(run.stdout)
    report = report[0] if isinstance(report, list) else report
    failed = [(c["check_id"], c["resource"]) for c in report["results"]["failed_checks"]]
    assert report["summary"]["failed"] == 0 and not failed, failed
    assert report["summary"]["passed"] > 100 and report["summary"]["parsing_errors"] == 0
    skipped = report["results"]["skipped_checks"]
    assert skipped and all(len(c["check_result"].get("suppress_comment", "")) > 40 for c in skipped)


def test_cfn_lint_finds_no_error(synthesized_stack: Synthesized) -> None:
    template = next(synthesized_stack.outdir.glob("SiteDispatchTest.template.json"))
    done = subprocess.run(
        [sys.executable, "-m", "cfnlint", "--format", "parseable", str(template)],
        capture_output=True,
        text=True,
        check=False,
    )
    errors = [line for line in done.stdout.splitlines() if ":E" in line]
    assert errors == [], done.stdout


def test_the_asset_is_bundled_without_docker_for_arm64_and_holds_only_what_lambda_runs(
    synthesized_stack: Synthesized,
) -> None:
    [asset] = [p for p in synthesized_stack.outdir.glob("asset.*") if p.is_dir()]
    for spec in FUNCTIONS.values():
        module = spec.handler.rsplit(".", 1)[0].replace(".", "/")
        assert (asset / f"{module}.py").is_file()
    assert list(asset.glob("pydantic_core/*aarch64*.so")), "pydantic-core must be the Linux arm64 build"
    assert (asset / "sitedispatch/drivers/reference/templates").is_dir()
    for absent in ("sitedispatch/local", "sitedispatch/cli", "moto", "typer", "rich", "boto3", "botocore"):
        assert not (asset / absent).exists(), absent
    # The project's code in the asset is exactly the functions' import closure: nothing they cannot import (the
    # demo's load generator, the CLI), nothing they import missing.
    shipped = {p.relative_to(asset).as_posix() for p in (asset / "sitedispatch").rglob("*.py")}
    closure = {p.relative_to(ROOT).as_posix() for p in import_closure()}
    assert shipped == closure
    assert "sitedispatch/local/synthetic.py" not in shipped and "sitedispatch/operations/worker.py" in shipped
    size = sum(p.stat().st_size for p in asset.rglob("*") if p.is_file())
    assert size < 50 * 1024 * 1024  # Lambda's zipped limit is 50 MB; this is the unzipped size
    print(
        f"\nasset: {size / 1e6:.1f} MB unzipped, one asset shared by {len(FUNCTIONS)} functions; "
        f"synth {synthesized_stack.seconds:.1f}s"
    )


def test_every_module_the_functions_import_ships_with_the_runtimes_bytecode(synthesized_stack: Synthesized) -> None:
    """Lambda's /var/task is read-only: a module without its pyc is compiled from source at every cold start."""
    [asset] = [p for p in synthesized_stack.outdir.glob("asset.*") if p.is_dir()]
    tag = f"cpython-{LAMBDA_PYTHON.replace('.', '')}"
    sources = [p for p in asset.rglob("*.py") if "__pycache__" not in p.parts]
    missing = [p for p in sources if not (p.parent / "__pycache__" / f"{p.stem}.{tag}.pyc").is_file()]
    foreign = [p for p in asset.rglob("*.pyc") if tag not in p.name]
    assert foreign == []  # never this machine's bytecode: Lambda's Python could not use it
    if runtime_interpreter() is None:  # synthesis warned on stderr and shipped source only: nothing half-compiled
        assert missing == sources
        return
    closure = {asset / p.relative_to(ROOT) for p in import_closure()}
    assert not [p for p in missing if p in closure or "site-packages" in p.parts], missing[:5]
    assert [p for p in missing if p.parts[len(asset.parts)] in {"pydantic", "aws_lambda_powertools", "pynamodb"}] == []
    print(f"\nbytecode: {len(sources) - len(missing)} of {len(sources)} modules ({len(missing)} do not compile)")


def test_the_entrypoints_import_without_the_local_runtime_or_the_cli() -> None:
    """What the asset leaves out is never imported on Lambda's paths."""
    blocked = ["moto", "typer", "rich", "flask", "werkzeug", "sitedispatch.local", "sitedispatch.cli", "psutil"]
    code = f"import sys\nfor name in {blocked!r}: sys.modules[name] = None\n" + "".join(
        f"import {spec.handler.rsplit('.', 1)[0]}\n" for spec in FUNCTIONS.values()
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr


def test_the_wheels_the_makefile_downloads_are_for_the_runtime_the_stack_deploys() -> None:
    makefile = (ROOT / "Makefile").read_text()
    [version] = [line.split(":=")[1].strip() for line in makefile.splitlines() if line.startswith("LAMBDA_PYTHON :=")]
    assert version == LAMBDA_PYTHON
    assert f"Python {LAMBDA_PYTHON}" in (ROOT / "requirements-lambda.in").read_text()


def test_without_the_runtimes_python_the_asset_ships_source_and_synthesis_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import stacks.bundling as bundling

    (tmp_path / "module.py").write_text("VALUE = 1\n")
    monkeypatch.setattr(bundling, "runtime_interpreter", lambda: None)
    bundling.compile_bytecode(tmp_path)
    warning = capsys.readouterr().err.strip().splitlines()
    assert len(warning) == 1 and f"no Python {LAMBDA_PYTHON}" in warning[0] and "install" in warning[0]
    assert not list(tmp_path.rglob("*.pyc"))
    if runtime_interpreter() is not None:  # and with it, the module is compiled for the runtime
        monkeypatch.undo()
        bundling.compile_bytecode(tmp_path)
        assert [p.name for p in tmp_path.rglob("*.pyc")] == [f"module.cpython-{LAMBDA_PYTHON.replace('.', '')}.pyc"]


def test_no_grant_relies_on_what_the_local_clouds_iam_does_not_judge(synthesized_stack: Synthesized) -> None:
    """The local cloud judges identity policies by action and resource (local/iam.py); it evaluates no resource
    policy, no condition key and no KMS key policy (docs/aws-semantics.md, "The template and IAM"). So none of the
    functions' or callers' access may come from one: resource policies only deny (TLS only), except S3's log
    delivery into the access-log bucket (the platform's, not a function's); identity policies carry no conditions,
    no NotAction or NotResource, no `?` wildcard and no KMS action."""
    template = synthesized_stack.template
    for kind in ("AWS::SQS::QueuePolicy", "AWS::S3::BucketPolicy"):
        for policy in resources(template, kind).values():
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                if statement["Effect"] == "Allow":
                    assert statement["Principal"] == {"Service": "logging.s3.amazonaws.com"}, statement
    for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        for policy in resources(template, kind).values():
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                assert statement["Effect"] == "Allow"
                assert not {"Condition", "NotAction", "NotResource"} & set(statement), statement
                assert "kms:" not in json.dumps(statement["Action"])
                assert "?" not in json.dumps(statement["Resource"])
