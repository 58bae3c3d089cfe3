"""`sitedispatch ops get|list|wait|cancel|replay`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sitedispatch.cli.args import AsOpt, InputFileOpt, JsonOpt, SiteFilterOpt
from sitedispatch.cli.context import client
from sitedispatch.cli.dlq import redrive_command
from sitedispatch.cli.output import STATUS_STYLE, console, emit_json, reported, table, when
from sitedispatch.cli.sites import describe_publication
from sitedispatch.client import operation_fields, operation_of, typed
from sitedispatch.domain.errors import InvalidInput
from sitedispatch.domain.model import Operation, Publication, Status
from sitedispatch.operations.progress import Progress

if TYPE_CHECKING:
    from sitedispatch.flow.estimates import DelayEstimate

app = typer.Typer(help="Inspect and follow operations.", no_args_is_help=True)
WAIT_SLICE_S = 20.0  # the API's longest long poll
PROGRESS_SLICE_S = 2.0  # while an operation reports progress, the bar is brought up to date this often


class ProgressBar:
    """`ops wait`'s bar for a long operation: the bytes of its file read, its steps and items, and the ETA the
    server measured (from its checkpoints, not from this client's samples). Drawn only once progress is reported."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None
        self.task: Any = None

    def show(self, body: dict[str, Any]) -> None:
        progress = body.get("progress")
        if not self.enabled or not progress:
            return
        if self.bar is None:
            from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(bar_width=20),
                TaskProgressColumn(),
                TextColumn("{task.fields[detail]}"),
                console=console,
            )
            self.bar.start()
            self.task = self.bar.add_task(body["kind"], total=None, detail="")
        eta_s = progress.get("eta_s")
        detail = f"{progress['steps']} steps, {progress['items']:,} items" + (
            f", about {eta_s:.0f}s left" if eta_s is not None else ""
        )
        total = max(1, int(progress["bytes_total"]))
        done = total if body["status"] == Status.SUCCEEDED.value else int(progress["bytes_done"])
        self.bar.update(self.task, total=total, completed=done, detail=detail)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


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
    if op.waiting_for:
        rows.append(
            ["waiting", "not sent yet: its principal fills its share of the lane's queue (sent as earlier ones end)"]
        )
    progress = Progress.of(op.checkpoint) if not op.status.terminal else None
    if progress is not None:
        rate, eta_s = progress.rate_bytes_s, progress.eta_s
        eta = f", about {eta_s:.0f}s left at {rate / 1e6:.2f} MB/s" if rate is not None and eta_s is not None else ""
        rows.append(
            [
                "progress",
                f"{progress.steps} steps checkpointed: {progress.items} items, {progress.bytes_done:,} of "
                f"{progress.bytes_total:,} bytes ({100 * progress.fraction:.0f}%){eta}",
            ]
        )
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
    """Show one operation (a waiting one with its estimated delay, or why it waits)."""
    from sitedispatch.flow.estimates import DelayEstimate

    with reported(json):
        body = client(as_).call("GET", f"/operations/{operation_id}")
        if json:
            emit_json(body)
            return
        op = operation_of(body)
        render(op)
        if body.get("waiting_because"):
            console.print(f"waiting: {body['waiting_because']}")
        elif body.get("estimate") is not None:
            estimate = typed(DelayEstimate, body["estimate"])
            console.print(f"estimated delay: about {estimate.delay_s:g}s ({describe_estimate(op, estimate)})")
        if body.get("publication"):
            console.print(describe_publication(typed(Publication, body["publication"])), soft_wrap=True)


@app.command("list")
def list_(
    site: SiteFilterOpt = None,
    status: Annotated[str | None, typer.Option(help="only this status")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 50,
    as_: AsOpt = None,
    json: JsonOpt = False,
) -> None:
    """List operations (a principal sees its own): a site's or a status's newest first, else in the table's order;
    the API's pages are followed up to --limit."""
    with reported(json):
        if status is not None and status not in {s.value for s in Status}:
            raise InvalidInput(f"unknown status {status!r}", field="status")
        ops = client(as_).every("/operations", {"site_id": site, "status": status}, limit=limit)
        if json:
            emit_json(ops)
            return
        table(
            f"operations ({len(ops)})",
            ["operation", "site", "kind", "status", "attempt", "created"],
            [
                [op["operation_id"], op["site_id"], op["kind"], op["status"], op["attempt"], when(op["created_at"])]
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
    """Wait until the operation is terminal (long polls of the API). Exit 0 if it succeeded, 1 if it ended
    otherwise or timed out."""
    with reported(json):
        api = client(as_)
        deadline = time.monotonic() + timeout
        body = api.call("GET", f"/operations/{operation_id}/wait", query={"timeout_s": 0})
        bar = ProgressBar(enabled=not json)
        try:
            while not Status(body["status"]).terminal and (left := deadline - time.monotonic()) > 0:
                bar.show(body)
                slice_s = PROGRESS_SLICE_S if body.get("progress") else WAIT_SLICE_S
                body = api.call(
                    "GET", f"/operations/{operation_id}/wait", query={"timeout_s": round(min(slice_s, left), 3)}
                )
            bar.show(body)
        finally:
            bar.close()
        emit_json(operation_fields(body)) if json else render(operation_of(body))
        if not Status(body["status"]).terminal:
            console.print(f"[yellow]still {body['status']} after {timeout:g}s[/]")
        if body["status"] != Status.SUCCEEDED.value:
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
        op = client(as_).call("POST", f"/operations/{operation_id}/cancel", body={"reason": reason})
        if json:
            emit_json(op)
        elif op["status"] == Status.CANCELLED.value:
            console.print(f"cancelled {operation_id}")
        else:
            console.print(
                f"cancel requested: {operation_id} is {op['status']} and will end cancelled without committing"
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
