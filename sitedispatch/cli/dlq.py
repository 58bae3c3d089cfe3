"""`sitedispatch dlq list|show|redrive`: dead operations, their evidence, and selective redrive."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sitedispatch.cli.args import AsOpt, JsonOpt, ReasonOpt, SiteFilterOpt, parse_age, parse_params
from sitedispatch.cli.context import client
from sitedispatch.cli.output import EXIT_CONFLICT, console, emit_json, reported, table, when
from sitedispatch.client import typed
from sitedispatch.domain.errors import InvalidInput
from sitedispatch.domain.model import Kind

if TYPE_CHECKING:  # the CLI imports only what a command needs (the core's controls pull in Powertools)
    from sitedispatch.client import ApiClient
    from sitedispatch.operator.redrive import RedriveReport

app = typer.Typer(help="Dead operations: list, evidence, redrive.", no_args_is_help=True)


@app.command("list")
def list_(
    site: SiteFilterOpt = None,
    kind: Annotated[str | None, typer.Option(help="only this kind")] = None,
    error_code: Annotated[str | None, typer.Option(help="only this error code")] = None,
    older_than: Annotated[str | None, typer.Option(help="dead for at least (e.g. 1h)")] = None,
    newer_than: Annotated[str | None, typer.Option(help="dead for at most (e.g. 15m)")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 100,
    as_: AsOpt = None,
    json: JsonOpt = False,
) -> None:
    """Dead operations with their error and recovery command, newest first."""
    with reported(json):
        if kind is not None and kind not in {k.value for k in Kind}:
            raise InvalidInput(f"unknown kind {kind!r}", field="kind")
        query = {
            "site_id": site,
            "kind": kind,
            "error_code": error_code,
            "older_than_s": parse_age(older_than, "older-than"),
            "newer_than_s": parse_age(newer_than, "newer-than"),
            "limit": limit,
        }
        dead = client(as_).call("GET", "/dead-letters", query=query)
        if json:
            emit_json(dead)
            return
        table(
            f"dead operations ({len(dead)})",
            ["operation", "site", "kind", "error", "attempt", "dead", "recovery"],
            [
                [
                    op["operation_id"],
                    op["site_id"],
                    op["kind"],
                    (op["evidence"] or {}).get("error_code", "-"),
                    f"{op['attempt']}/{op['attempt_budget']}",
                    when(op["dead_at"]),
                    (op["evidence"] or {}).get("recovery_command", "-"),
                ]
                for op in dead
            ],
        )


@app.command("show")
def show(operation_id: str, as_: AsOpt = None, json: JsonOpt = False) -> None:
    """The evidence of a dead operation (the S3 document): error, traceback, input digest, recovery command."""
    with reported(json):
        evidence = client(as_).call("GET", f"/dead-letters/{operation_id}")
        if json:
            emit_json(evidence)
            return
        rows: list[list[Any]] = [
            [name, evidence.get(name)]
            for name in (
                "operation_id",
                "site_id",
                "kind",
                "principal",
                "epoch",
                "attempt",
                "attempt_budget",
                "fence",
                "input_digest",
                "input_key",
                "revision",
                "error_class",
                "error_code",
                "error_message",
                "retryable",
                "traceback_digest",
                "request_id",
                "lane",
                "key",
            )
        ]
        rows += [["created", when(evidence.get("created_at"))], ["dead", when(evidence.get("dead_at"))]]
        table(f"evidence of {operation_id}", ["field", "value"], rows)
        if evidence.get("traceback"):
            console.print("\n".join(evidence["traceback"][-8:]), markup=False, highlight=False)
        console.print(f"recover: [bold]{evidence['recovery_command']}[/]  ({evidence['recovery']})")


def corrected_input(api: ApiClient, operation_id: str, input_file: Path | None) -> dict[str, Any] | None:
    """The params of a corrected input for one operation: for an import the file is uploaded first."""
    if input_file is None:
        return None
    op = api.call("GET", f"/operations/{operation_id}")
    if op["kind"] == Kind.IMPORT.value:
        return api.upload(op["site_id"], input_file)
    params, _ = parse_params(input_file, [])
    return params


def redrive_command(
    *,
    operation_id: str | None,
    site: str | None,
    error_code: str | None,
    all_: bool,
    dry_run: bool,
    input_file: Path | None,
    reason: str,
    as_: str | None,
    json: bool,
    action: str = "redrive",
) -> None:
    with reported(json):
        chosen = [name for name, given in (("--operation", operation_id), ("--site", site)) if given]
        chosen += [name for name, given in (("--error-code", error_code), ("--all", all_)) if given]
        if action == "redrive" and len(chosen) != 1 and chosen != ["--site", "--error-code"]:
            raise InvalidInput(
                "choose one of --operation, --site, --error-code or --all (--site and --error-code may be combined)",
                field="selection",
            )
        if input_file is not None and operation_id is None:
            raise InvalidInput(
                "--input-file replaces one operation's input: use it with --operation", field="input-file"
            )
        api = client(as_)
        new_input = None if dry_run else corrected_input(api, operation_id or "", input_file)
        if action == "replay":
            report = api.call("POST", f"/operations/{operation_id}/replay", body={"reason": reason, "input": new_input})
        else:
            body = {
                "operation_id": operation_id,
                "site_id": site,
                "error_code": error_code,
                "all": all_,
                "dry_run": dry_run,
                "reason": reason,
                "input": new_input,
            }
            report = api.call("POST", "/dead-letters/redrive", body=body)
        from sitedispatch.operator.redrive import RedriveReport

        replayed = typed(RedriveReport, report)
        render_report(replayed, json)
    if action == "replay" and not replayed.redriven:  # (a redrive run again is idempotent: it stays 0)
        raise typer.Exit(EXIT_CONFLICT)


def render_report(report: RedriveReport, json: bool) -> None:
    if json:
        emit_json(report)
        return
    if report.dry_run:
        would = [op for op in report.selected if op not in report.skipped and op not in report.refused]
        console.print(f"dry run: would redrive {len(would)} of {len(report.selected)} selected")
        for op in would:
            console.print(f"  {op}")
    else:
        console.print(
            f"redriven {len(report.redriven)} of {len(report.selected)} selected; "
            f"{report.dlq_messages_removed} DLQ message(s) removed"
        )
        for op in report.redriven:
            console.print(f"  {op}: queued again (follow it: sitedispatch ops wait {op})")
    for op, why in report.skipped.items():
        console.print(f"  {op}: skipped, {why}")
    for op, why in report.refused.items():
        console.print(f"  [red]{op}: refused[/], {why}")


@app.command("redrive")
def redrive(
    operation: Annotated[str | None, typer.Option("--operation", help="one dead operation")] = None,
    site: Annotated[str | None, typer.Option(help="every dead operation of this site")] = None,
    error_code: Annotated[str | None, typer.Option(help="every dead operation with this error code")] = None,
    all_: Annotated[bool, typer.Option("--all", help="every dead operation")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="show what would be redriven")] = False,
    input_file: Annotated[
        Path | None,
        typer.Option("--input-file", help="a corrected input for --operation (JSON; for import, the WXR file)"),
    ] = None,
    reason: ReasonOpt = "",
    as_: AsOpt = None,
    json: JsonOpt = False,
) -> None:
    """Queue dead operations again in a new attempt epoch and remove their DLQ messages. Running it twice redrives
    once. Superseded or cancelled operations are refused (exit 4 with --operation)."""
    redrive_command(
        operation_id=operation,
        site=site,
        error_code=error_code,
        all_=all_,
        dry_run=dry_run,
        input_file=input_file,
        reason=reason,
        as_=as_,
        json=json,
    )
