"""`sitedispatch ops get|list|wait|cancel|replay`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sitedispatch.cli.args import AsOpt, InputFileOpt, JsonOpt, SiteFilterOpt
from sitedispatch.cli.context import caller, deps
from sitedispatch.cli.dlq import redrive_command
from sitedispatch.cli.output import STATUS_STYLE, console, emit_json, plain, reported, table, when
from sitedispatch.domain.errors import InvalidInput
from sitedispatch.domain.model import Operation, Status

if TYPE_CHECKING:
    from sitedispatch.operations.estimates import DelayEstimate

app = typer.Typer(help="Inspect and follow operations.", no_args_is_help=True)


def _get(operation_id: str, as_: str | None) -> Operation:
    return deps().controls().operation(caller(as_), operation_id)


def render(op: Operation) -> None:
    rows: list[list[Any]] = [
        ["operation", op.operation_id],
        ["site", op.site_id],
        ["kind", op.kind.value],
        ["principal", op.principal],
        ["status", f"[{STATUS_STYLE.get(op.status.value, '')}]{op.status.value}[/]"],
        ["attempt", f"{op.attempt}/{op.attempt_budget} (epoch {op.epoch})"],
        ["fence", op.fence or "-"],
        ["input digest", op.input_digest],
        ["created", when(op.created_at)],
        ["queued", when(op.queued_at)],
        ["started", when(op.started_at)],
        ["finished", when(op.finished_at)],
    ]
    if op.result:
        rows.append(["result", ", ".join(f"{k}={v}" for k, v in op.result.items())])
    if op.error:
        rows.append(["error", f"{op.error.error_class} [{op.error.code}] {op.error.message}"])
    table("operation", ["field", "value"], rows)


def describe_estimate(op: Operation, estimate: DelayEstimate) -> str:
    if estimate.bound == "principal":
        return (
            f"{estimate.principal_ahead} earlier operations of {op.principal} in its lane, "
            f"{estimate.principal_operation_s:g}s each, its running cap at a time"
        )
    return (
        f"{estimate.site_ahead} earlier operations of {op.site_id}, one at a time, {estimate.site_operation_s:g}s each"
    )


@app.command("get")
def get(operation_id: str, as_: AsOpt = None, json: JsonOpt = False) -> None:
    """Show one operation (a waiting one with its estimated delay)."""
    from sitedispatch.operations.estimates import estimated_delay_for

    with reported(json):
        d = deps()
        op = _get(operation_id, as_)
        estimate = estimated_delay_for(op, d.operations, d.sites, d.pace, d.settings, d.clock.now())
        if json:
            emit_json({**plain(op), "estimated_delay_s": estimate.delay_s, "estimate": plain(estimate)})
            return
        render(op)
        if not op.status.terminal and op.status != Status.RUNNING:
            console.print(f"estimated delay: about {estimate.delay_s:g}s ({describe_estimate(op, estimate)})")


@app.command("list")
def list_(
    site: SiteFilterOpt = None,
    status: Annotated[str | None, typer.Option(help="only this status")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 50,
    as_: AsOpt = None,
    json: JsonOpt = False,
) -> None:
    """List operations, newest first (a principal sees its own)."""
    with reported(json):
        try:
            wanted = Status(status) if status else None
        except ValueError:
            raise InvalidInput(f"unknown status {status!r}", field="status") from None
        ops = deps().controls().operations(caller(as_), site_id=site, status=wanted, limit=limit)
        if json:
            emit_json(ops)
            return
        table(
            f"operations ({len(ops)})",
            ["operation", "site", "kind", "status", "attempt", "created"],
            [
                [op.operation_id, op.site_id, op.kind.value, op.status.value, op.attempt, when(op.created_at)]
                for op in ops
            ],
            styler=lambda row: STATUS_STYLE.get(row[3], ""),
        )


@app.command("wait")
def wait(
    operation_id: str,
    timeout: Annotated[float, typer.Option(help="seconds")] = 120.0,
    as_: AsOpt = None,
    json: JsonOpt = False,
) -> None:
    """Wait until the operation is terminal. Exit 0 if it succeeded, 1 if it ended otherwise or timed out."""
    with reported(json):
        deadline = time.monotonic() + timeout
        op = _get(operation_id, as_)
        while not op.status.terminal and time.monotonic() < deadline:
            time.sleep(0.2)
            op = _get(operation_id, as_)
        emit_json(op) if json else render(op)
        if not op.status.terminal:
            console.print(f"[yellow]still {op.status.value} after {timeout:g}s[/]")
        if op.status != Status.SUCCEEDED:
            raise typer.Exit(1)


@app.command("cancel")
def cancel(
    operation_id: str,
    reason: Annotated[str, typer.Option(help="why (recorded)")] = "",
    as_: AsOpt = None,
    json: JsonOpt = False,
) -> None:
    """Cancel a queued operation at once, or a running one cooperatively (it will not commit)."""
    with reported(json):
        op = deps().controls().cancel(caller(as_), operation_id, reason)
        if json:
            emit_json(op)
        elif op.status == Status.CANCELLED:
            console.print(f"cancelled {operation_id}")
        else:
            console.print(
                f"cancel requested: {operation_id} is {op.status.value} and will end cancelled without committing"
            )


@app.command("replay")
def replay(
    operation_id: str,
    input_file: InputFileOpt = None,
    reason: Annotated[str, typer.Option(help="why (recorded)")] = "",
    as_: AsOpt = None,
    json: JsonOpt = False,
) -> None:
    """Replay a dead operation (its DLQ message may be gone) in a new attempt epoch. Exit 4 if it is not dead."""
    redrive_command(
        operation_id=operation_id,
        site=None,
        error_code=None,
        all_=False,
        dry_run=False,
        input_file=input_file,
        reason=reason,
        as_=as_,
        json=json,
        action="replay",
    )
