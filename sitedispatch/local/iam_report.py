"""Least privilege, measured: every (function, action, resource) the local runtimes' functions called, judged by IAM
against the template's policies, and every grant of the template that no call used.

Each local cloud records the calls IAM judged (local/iam.py) beside its deployment (local/deployment.py); a runtime
stopped with SITEDISPATCH_IAM_CALLS_DIR set copies both there (the acceptance tests set it for a whole make test). This
reads them all, names every resource by its logical id in the template (`TablesOperationsTable4D7C3C58/index/
by-site`, `StorageBucket5CB7C8EA/sites/*`), and writes the report. Grants never called are listed with the reason
of each (EXPLAINED: a path no test takes under enforcement, or the platform's own use), or flagged unexplained.
`python -m sitedispatch.local.iam_report DIR [--out FILE] [--strict]` exits 1 when a call was denied (with --strict,
also when a grant no call used is unexplained: a rare path a run did not take would fail a whole `make test`).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sitedispatch.domain.resources import DEFAULT_FUNCTION_TIMEOUT_S
from sitedispatch.local.deployment import DEPLOYMENT_FILE_NAME, function_roles
from sitedispatch.local.iam import IAM_CALLS_FILE_NAME
from sitedispatch.local.template import local_context, resources_of, synthesized

# Grants the suite may not call under enforcement, each with why it stays: (function, action, resource) patterns,
# and the reason, naming where its path is tested.
EXPLAINED: list[tuple[str, str, str, str]] = [
    ("*", "logs:*", "*Logs*", "Lambda writes the function's logs with its role (not the code)"),
    ("*", "xray:*", "*", "active tracing: Lambda and the X-Ray SDK send segments with the role"),
    (
        "*",
        "sqs:*",
        "Queues*",
        "the event source mapping's grant on its queue (CDK's SqsEventSource: receive, delete, visibility, its URL "
        "and attributes): Lambda's poller, not the code; the in-process tests poll as the test's administrator",
    ),
    (
        "*",
        "s3:ListBucket",
        "Storage*",
        "on AWS a GET of a missing key is refused (403) without it, not answered 404 (the code reads a missing "
        "receipt, checkpoint or live.json as not yet written); moto answers 404 either way, so no request is "
        "judged on it (docs/aws-semantics.md)",
    ),
    (
        "*",
        "dynamodb:GetItem",
        "TablesCommits*",
        "a delivery that finds its commit written already reads it (operations/worker.py); tests/integration/"
        "test_pipeline.py::test_the_same_message_processed_by_two_workers_at_once_commits_once runs one worker as "
        "each operations role, and takes this path when the loser gets that far (it may find the lease held)",
    ),
    (
        "webhooks",
        "sqs:SendMessage",
        "QueuesWebhooks*",
        "a wake that runs out of its 60 s budget with more to deliver sends the next (webhooks/deliverer.py); "
        "tests/unit/test_webhooks.py takes it on the in-memory ports",
    ),
    (
        "api",
        "sqs:SendMessage",
        "QueuesPublications*",
        "a sweep an operator asks for (POST /reconcile) resumes a stalled publication as the reconciler does "
        "(tests/integration/test_deployed_template.py takes that repair as the reconciler's role)",
    ),
    (
        "api",
        "s3:PutObject",
        "*/sites/*",
        "a sweep an operator asks for rewrites a live.json as the reconciler does (same test)",
    ),
    (
        "api",
        "s3:PutObject",
        "*/uploads/*",
        "the presigned upload URL the api signs: S3 authorizes the client's PUT as the api's role; moto judges no "
        "presigned request (its credentials are in the query string), tests/integration/test_cli.py uploads "
        "through one (docs/aws-semantics.md)",
    ),
    (
        "bulk",
        "dynamodb:GetItem",
        "TablesCounters*",
        "a start refused by a full running slot reads that counter to name the limit (aws/flow.py limit_reached): "
        "the operations role takes it in the suite, an import only under a full cap",
    ),
    (
        "publications",
        "dynamodb:GetItem",
        "TablesSites*",
        "a promotion refused (a newer publication won, or its own reply was lost) reads the site's pointer "
        "(publication/worker.py): the suite's concurrent publications take it when one loses that race",
    ),
    (
        "publications",
        "dynamodb:GetItem",
        "TablesPublications*",
        "a step whose condition no longer holds (a chunk or a finish delivered again, late) reads the publication "
        "as it is (aws/publications.py _update): the strict cloud's redeliveries take it now and then",
    ),
    (
        "reconciler",
        "dynamodb:PutItem",
        "TablesEvents*",
        "a stale lease whose operation has no attempt left ends it dead, its event written with it "
        "(reconciler.py recover_stale_leases; tests/unit/test_reconciler.py)",
    ),
    (
        "reconciler",
        "dynamodb:PutItem",
        "TablesCounters*",
        "a wp_cron the wp-events sweep submits creates a counter shard not written before (flow/counters.py)",
    ),
    (
        "reconciler",
        "dynamodb:UpdateItem",
        "TablesSites*",
        "a stale lease recovered releases the site's lease (tests/acceptance/test_stale_lease_and_cold_restart.py "
        "runs that sweep as the reconciler's role)",
    ),
]


@dataclass(frozen=True)
class Call:
    function: str
    action: str
    resource: str  # logical form
    allowed: bool


def _grant_resource(value: Any) -> str:
    """A policy resource of the template in logical form."""
    if isinstance(value, str):
        return value
    if "Fn::GetAtt" in value:
        return str(value["Fn::GetAtt"][0])
    if "Fn::Join" in value:
        return "".join(_grant_resource(part) if isinstance(part, dict) else part for part in value["Fn::Join"][1])
    if "Ref" in value:
        return "" if str(value["Ref"]).startswith("AWS::") else str(value["Ref"])
    return json.dumps(value)


def _logical_secret(resource: str) -> str:
    """`arn::secretsmanager:::secret:sitedispatch-webhooks/*` (pseudo parameters gone) -> `secret:...`."""
    return resource[resource.index("secret:") :] if "secret:" in resource else resource


def grants(template: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    """Each function's granted (action, logical resource), from its role's policies."""
    roles: dict[str, str] = {}
    named = function_roles(template)
    for logical, resource in resources_of(template, "AWS::Lambda::Function").items():
        if logical in named:
            roles[resource["Properties"]["Role"]["Fn::GetAtt"][0]] = named[logical]
    granted: dict[str, list[tuple[str, str]]] = {}
    attached = [
        *resources_of(template, "AWS::IAM::Policy").values(),
        *resources_of(template, "AWS::IAM::ManagedPolicy").values(),
    ]
    for policy in attached:
        for role_ref in policy["Properties"].get("Roles", []):
            function = roles.get(role_ref.get("Ref"))
            if function is None:
                continue
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                resources = (
                    statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
                )
                for action in actions:
                    for resource in resources:
                        granted.setdefault(function, []).append((action, _logical_secret(_grant_resource(resource))))
    return granted


def logical_names(template: dict[str, Any]) -> dict[str, str]:
    """Lowercased logical id -> logical id, for names the emulator generated (`{stack}-{logical}-{suffix}`)."""
    return {logical.lower(): logical for logical in template["Resources"]}


def to_logical(resource: str, stack: str, names: dict[str, str], bus: str) -> str:
    """A called resource's ARN in the template's logical form."""

    def generated(name: str) -> str:
        core = name.removesuffix(".fifo").removeprefix(f"{stack}-").removeprefix(f"{stack.lower()}-")
        return names.get(core.rsplit("-", 1)[0].lower(), core)

    if resource.startswith("arn:aws:sqs:"):
        return generated(resource.rsplit(":", 1)[1])
    if resource.startswith("arn:aws:dynamodb:"):
        table, _, index = resource.split(":table/", 1)[1].partition("/index/")
        return generated(table) + (f"/index/{index}" if index else "")
    if resource.startswith("arn:aws:s3:::"):  # an object by its key's first segment (the grants' prefixes)
        bucket, _, key = resource.removeprefix("arn:aws:s3:::").partition("/")
        return generated(bucket) + (f"/{key.split('/', 1)[0]}/*" if key else "")
    if ":event-bus/" in resource:
        return bus if resource.endswith(f"/{stack}-events") else resource
    secret = _logical_secret(resource)  # a secret by its name's first segment (the grants' prefixes)
    return f"{secret.split('/', 1)[0]}/*" if secret.startswith("secret:") and "/" in secret else secret


def read_calls(directory: Path, template: dict[str, Any]) -> list[Call]:
    """Every judged call of every runtime recorded under `directory`."""
    names = logical_names(template)
    [bus] = resources_of(template, "AWS::Events::EventBus")
    calls: set[Call] = set()
    for deployment_file in sorted(directory.rglob(DEPLOYMENT_FILE_NAME)):
        deployment = json.loads(deployment_file.read_text())
        stack = deployment["stack_name"]
        by_role = {f["role_arn"].rsplit("/", 1)[1]: f["role"] for f in deployment["functions"].values()}
        judged = deployment_file.with_name(IAM_CALLS_FILE_NAME)
        for call in json.loads(judged.read_text()) if judged.is_file() else []:
            calls.add(
                Call(
                    by_role.get(call["role"], call["role"]),
                    call["action"],
                    to_logical(call["resource"], stack, names, bus),
                    call["allowed"],
                )
            )
    return sorted(calls, key=lambda c: (c.function, c.action, c.resource))


def _covers(grant: str, resource: str) -> bool:
    return fnmatch.fnmatchcase(resource, grant)


def report(calls: list[Call], granted: dict[str, list[tuple[str, str]]]) -> dict[str, Any]:
    """Denied calls, and each grant with the calls it allowed (none: unused, explained or not)."""
    unused: list[dict[str, Any]] = []
    explained: list[dict[str, Any]] = []
    for function, pairs in sorted(granted.items()):
        for action, resource in sorted(set(pairs)):
            used = any(
                c.function == function and c.action == action and c.allowed and _covers(resource, c.resource)
                for c in calls
            )
            if used:
                continue
            reason = next(
                (
                    why
                    for who, what, where, why in EXPLAINED
                    if fnmatch.fnmatchcase(function, who)
                    and fnmatch.fnmatchcase(action, what)
                    and fnmatch.fnmatchcase(resource, where)
                ),
                None,
            )
            entry = {"function": function, "action": action, "resource": resource}
            (explained if reason else unused).append({**entry, "reason": reason} if reason else entry)
    return {
        "calls": [c.__dict__ for c in calls],
        "denied": [c.__dict__ for c in calls if not c.allowed],
        "unused": unused,
        "explained": explained,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# IAM report: what the functions called, and what their roles grant",
        "",
        f"- calls judged (distinct function, action, resource): {len(result['calls'])}",
        f"- denied: {len(result['denied'])}",
        f"- grants never called, with the platform's reason: {len(result['explained'])}",
        f"- grants never called, unexplained: {len(result['unused'])}",
        "",
    ]
    for title, rows, columns in (
        ("Denied calls", result["denied"], ("function", "action", "resource")),
        ("Unused grants, unexplained", result["unused"], ("function", "action", "resource")),
        ("Unused grants the platform uses", result["explained"], ("function", "action", "resource", "reason")),
        ("Calls", [c for c in result["calls"] if c["allowed"]], ("function", "action", "resource")),
    ):
        lines += [f"## {title} ({len(rows)})", ""]
        if rows:
            lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
            lines += [
                "| " + " | ".join(f"`{row[c]}`" if c != "reason" else row[c] for c in columns) + " |" for row in rows
            ]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--function-timeout", type=int, default=DEFAULT_FUNCTION_TIMEOUT_S)
    parser.add_argument(
        "--strict", action="store_true", help="fail on an unexplained unused grant too (not only on a denied call)"
    )
    args = parser.parse_args(argv)
    if not args.directory.is_dir():
        print(
            f"no recorded calls in {args.directory}: run `make test` (or the acceptance tests) first", file=sys.stderr
        )
        return 2
    from sitedispatch.domain.settings import Settings
    from sitedispatch.local.cloud import LOCAL_READER

    template = synthesized(
        local_context(args.function_timeout, Settings.model_fields["operators"].default, LOCAL_READER)
    )
    result = report(read_calls(args.directory, template), grants(template))
    text = markdown(result)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    print(
        f"IAM: {len(result['calls'])} calls judged, {len(result['denied'])} denied; grants never called: "
        f"{len(result['unused'])} unexplained, {len(result['explained'])} used by the platform"
        + (f" (report: {args.out})" if args.out else "")
    )
    if result["unused"] and not args.strict:  # which rare paths a run takes can vary: said, not failed on
        print(f"unexplained unused grants: {len(result['unused'])} (the report lists them; --strict fails on them)")
    return 1 if result["denied"] or (args.strict and result["unused"]) else 0


if __name__ == "__main__":
    sys.exit(main())
