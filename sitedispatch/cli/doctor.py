"""`sitedispatch doctor [--stack NAME]`: a deployment checked from the caller's side, one line per check.

With the caller's own credentials (on AWS) or the local runtime's (without --stack): the stack is there and
complete, each output names something that answers (the event bus, the exported policies), the API answers the
caller, the caller's policy lets it do what its kind needs (read its limits, submit), and one provision to a canary
site goes through the whole system: its operation ends and its event reaches the caller's feed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from sitedispatch.cli.context import api_url, client, load_local_env
from sitedispatch.cli.output import console
from sitedispatch.domain.errors import SiteDispatchError

CANARY_SITE = "doctor-canary"
EVENT_WAIT_S = 90.0
FAILED_EXIT = 1


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


class Doctor:
    def __init__(self, stack: str | None, as_: str | None, canary: str, wait_s: float) -> None:
        self.stack, self.as_, self.canary, self.wait_s = stack, as_, canary, wait_s
        self.checks: list[Check] = []
        self.outputs: dict[str, str] = {}

    def run(self, name: str, check: Callable[[], str]) -> bool:
        """One check: its line, and whether it passed (a check that raises fails with its one-line cause)."""
        try:
            detail, ok = check(), True
        except SiteDispatchError as exc:
            detail, ok = str(exc), False
        except Exception as exc:  # an AWS error: named, never a traceback
            from sitedispatch.cli.output import aws_failure

            detail, ok = str(aws_failure(exc)), False
        self.checks.append(Check(name, ok, detail))
        console.print(f"{'[green]ok  [/]' if ok else '[bold red]FAIL[/]'} {name}: {detail}", soft_wrap=True)
        return ok

    def session(self) -> Any:
        import boto3

        return boto3.session.Session()

    def stack_status(self) -> str:
        name = self.stack or self._local_stack()
        cloudformation = self.session().client("cloudformation")
        [found] = cloudformation.describe_stacks(StackName=name)["Stacks"]
        self.outputs = {o["OutputKey"]: o["OutputValue"] for o in found.get("Outputs", [])}
        if not found["StackStatus"].endswith("_COMPLETE") or "ROLLBACK" in found["StackStatus"]:
            raise SiteDispatchError(f"stack {name} is {found['StackStatus']}: {found.get('StackStatusReason', '')}")
        return f"{name} is {found['StackStatus']} with {len(self.outputs)} outputs"

    def _local_stack(self) -> str:
        from sitedispatch.local.deployment import current_deployment

        load_local_env()
        deployment = current_deployment()
        if deployment is None:
            raise SiteDispatchError(
                "no stack: name a deployed one with --stack NAME, or start the local runtime here (`sitedispatch "
                "local up`)"
            )
        return deployment.stack_name

    def outputs_answer(self) -> str:
        session = self.session()
        bus = self.outputs.get("EventBusName")
        if not bus:
            raise SiteDispatchError("the stack has no EventBusName output")
        session.client("events").describe_event_bus(Name=bus)
        iam = session.client("iam")
        policies = [value for key, value in sorted(self.outputs.items()) if key.endswith("PolicyArn")]
        for arn in policies:
            iam.get_policy(PolicyArn=arn)
        return f"event bus {bus}, {len(policies)} exported policies"

    def api_answers(self) -> str:
        limits = client(self.as_).call("GET", "/quotas")
        return f"{api_url()} answers {limits['principal']} (outstanding {limits['outstanding']})"

    def canary_provision(self) -> str:
        from sitedispatch.domain.model import Status

        api = client(self.as_)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        body = {
            "kind": "provision",
            "site_id": self.canary,
            "params": {"title": "sitedispatch doctor canary", "admin_email": "doctor@example.invalid"},
        }
        submitted = api.call("POST", "/operations", body=body, headers={"Idempotency-Key": f"doctor-{stamp}"})
        operation_id = submitted["operation_id"]
        deadline = time.monotonic() + self.wait_s
        while time.monotonic() < deadline:
            op = api.call("GET", f"/operations/{operation_id}")
            if Status(op["status"]).terminal:
                break
            time.sleep(1.0)
        else:
            raise SiteDispatchError(f"{operation_id} did not end within {self.wait_s:.0f} s (status {op['status']})")
        if op["status"] != Status.SUCCEEDED:
            raise SiteDispatchError(f"{operation_id} ended {op['status']}: `sitedispatch dlq show {operation_id}`")
        cursor, caught_up = 0, False
        while time.monotonic() < deadline:  # the caller's feed from its start, then waiting at its end
            page = api.call("GET", "/events", query={"after": cursor, "limit": 100, "wait_s": 5 if caught_up else 0})
            if any(e.get("operation_id") == operation_id for e in page["events"]):
                return f"{operation_id} succeeded on {self.canary} and its event reached the feed"
            caught_up, cursor = page["after"] == cursor, page["after"]
        raise SiteDispatchError(
            f"{operation_id} succeeded but its event did not reach the feed within {self.wait_s:.0f} s: check the "
            "events worker's log and role"
        )


def doctor(
    as_: Annotated[
        str | None, typer.Option("--as", help="locally, whom to check as (default: the principal default)")
    ] = None,
    canary: Annotated[str, typer.Option(help="the site the check provisions (created once, reused)")] = CANARY_SITE,
    wait: Annotated[float, typer.Option(help="longest wait for the canary's operation and event (s)")] = EVENT_WAIT_S,
) -> None:
    """Check a deployment (--stack NAME, else the local runtime) from your side: one line per check."""
    from sitedispatch.cli.context import current_stack

    checker = Doctor(current_stack(), as_, canary, wait)
    if not checker.run("stack", checker.stack_status):
        raise typer.Exit(FAILED_EXIT)
    checker.run("outputs", checker.outputs_answer)
    if checker.run("api", checker.api_answers):
        checker.run("canary", checker.canary_provision)
    failed = [c.name for c in checker.checks if not c.ok]
    console.print(f"{len(checker.checks) - len(failed)} of {len(checker.checks)} checks passed", soft_wrap=True)
    if failed:
        raise typer.Exit(FAILED_EXIT)
