"""`sitedispatch dlq list|show|redrive`: dead operations, their evidence, and selective redrive."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from sitedispatch.cli.args import AsOpt, JsonOpt, ReasonOpt, SiteFilterOpt, parse_age, parse_params
from sitedispatch.cli.context import caller, deps
from sitedispatch.cli.output import console, emit_json, reported, table, when
from sitedispatch.domain.errors import Conflict, InvalidInput
from sitedispatch.domain.model import Kind
from sitedispatch.operator.controls import DeadLetterFilter, RedriveReport

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
        where = DeadLetterFilter(
            site, kind, error_code, parse_age(older_than, "older-than"), parse_age(newer_than, "newer-than")
        )
        dead = deps().controls().dead_letters(caller(as_), where, limit=limit)
        if json:
            emit_json(
                [
                    {
                        "operation_id": op.operation_id,
                        "site_id": op.site_id,
                        "kind": op.kind.value,
                        "principal": op.principal,
                        "epoch": op.epoch,
                        "attempt": op.attempt,
                        "dead_at": op.finished_at,
                        "evidence": op.evidence,
                    }
                    for op in dead
                ]
            )
            return
        table(
            f"dead operations ({len(dead)})",
            ["operation", "site", "kind", "error", "attempt", "dead", "recovery"],
            [
                [
                    op.operation_id,
                    op.site_id,
                    op.kind.value,
                    (op.evidence or {}).get("error_code", "-"),
                    f"{op.attempt}/{op.attempt_budget}",
                    when(op.finished_at),
                    (op.evidence or {}).get("recovery_command", "-"),
                ]
                for op in dead
            ],
        )


@app.command("show")
def show(operation_id: str, as_: AsOpt = None, json: JsonOpt = False) -> None:
    """The evidence of a dead operation (the S3 document): error, traceback, input digest, recovery command."""
    with reported(json):
        evidence = deps().controls().evidence(caller(as_), operation_id)
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


def staged_input(operation_id: str, input_file: Path | None) -> tuple[str, str] | None:
    """Validate and store a corrected input for one operation: (key, digest)."""
    if input_file is None:
        return None
    d = deps()
    op = d.operations.get(operation_id)
    if op is None:
        return None  # the redrive reports the operation as not found
    submitter = d.submitter()
    if op.kind == Kind.IMPORT:
        return submitter.store_input(op.kind, op.site_id, submitter.stage_upload(op.site_id, input_file))
    params, size = parse_params(input_file, [])
    return submitter.store_input(op.kind, op.site_id, params, size)


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
        chosen = [
            name
            for name, given in (
                ("--operation", operation_id),
                ("--site", site),
                ("--error-code", error_code),
                ("--all", all_),
            )
            if given
        ]
        if len(chosen) != 1 and not (site and error_code and not operation_id and not all_):
            raise InvalidInput(
                "choose one of --operation, --site, --error-code or --all (--site and --error-code may be combined)",
                field="selection",
            )
        if input_file is not None and operation_id is None:
            raise InvalidInput(
                "--input-file replaces one operation's input: use it with --operation", field="input-file"
            )
        controls = deps().controls()
        who = caller(as_)
        if operation_id is not None and not dry_run:
            controls.authorize_action(who, action, operation_id, reason)  # before storing a replacement input
        new_input = None if dry_run else staged_input(operation_id or "", input_file)
        report = controls.redrive(
            who,
            operation_id=operation_id,
            where=None if operation_id else DeadLetterFilter(site_id=site, error_code=error_code),
            dry_run=dry_run,
            new_input=new_input,
            reason=reason,
            action=action,
        )
        render_report(report, json)
        if operation_id is not None and report.refused:
            raise Conflict(report.refused[operation_id])


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
