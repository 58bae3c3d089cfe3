"""`sitedispatch`: submit work, follow it, inspect sites and queues, run the local runtime and the demo."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sitedispatch.cli import audit, deps, dlq, events, local, ops, quotas, sites, webhooks
from sitedispatch.cli.args import AsOpt, JsonOpt, parse_params
from sitedispatch.cli.console import console as console_command
from sitedispatch.cli.context import client, use_env_file, use_stack
from sitedispatch.cli.doctor import doctor as doctor_command
from sitedispatch.cli.output import console, emit_json, render_status, reported, use_wide_tables
from sitedispatch.client import ApiClient, typed
from sitedispatch.domain.errors import InvalidInput
from sitedispatch.domain.resources import ENV_PREFIX

app = typer.Typer(help=__doc__, no_args_is_help=True, pretty_exceptions_enable=False)
app.add_typer(ops.app, name="ops")
app.add_typer(sites.app, name="sites")
app.add_typer(dlq.app, name="dlq")
app.add_typer(audit.app, name="audit")
app.add_typer(events.app, name="events")
app.add_typer(webhooks.app, name="webhooks")
app.add_typer(quotas.app, name="quotas")
app.add_typer(deps.app, name="deps")
app.add_typer(local.app, name="local")
app.command("console")(console_command)
app.command("doctor")(doctor_command)


@app.callback()
def main(
    ctx: typer.Context,
    env_file: Annotated[
        Path | None,
        typer.Option(help="environment file of a local runtime (default .sitedispatch/local.env when present)"),
    ] = None,
    stack: Annotated[
        str | None,
        typer.Option(
            envvar=f"{ENV_PREFIX}STACK", help="a deployed stack's name: its outputs say where the resources are"
        ),
    ] = None,
    wide: Annotated[
        bool, typer.Option("--wide", help="tables as wide as their content: every id and command on one line")
    ] = False,
) -> None:
    use_wide_tables(wide)
    if ctx.invoked_subcommand == "demo":  # the demo reads the stores in this process: their logs stay off stdout
        from sitedispatch.observability import to_stderr

        to_stderr()
    use_env_file(env_file)
    use_stack(stack)


@app.command()
def submit(
    kind: Annotated[
        str | None, typer.Argument(help="provision | import | publish | wp_cron | recover (not with --batch)")
    ] = None,
    site: Annotated[str | None, typer.Option("--site", help="site id")] = None,
    input_file: Annotated[
        Path | None, typer.Option("--input-file", help="JSON input; for import, the WXR file")
    ] = None,
    param: Annotated[list[str] | None, typer.Option("--param", help="KEY=VALUE, repeatable")] = None,
    idempotency_key: Annotated[str | None, typer.Option(help="same key + same input = same operation")] = None,
    tenant: Annotated[
        str | None,
        typer.Option(help="the customer you act for: limits, shares and estimates apply per tenant (default: you)"),
    ] = None,
    batch: Annotated[
        Path | None,
        typer.Option(
            "--batch",
            help="a JSON Lines file, one operation a line: kind, site_id, params, idempotency_key, tenant",
        ),
    ] = None,
    as_: Annotated[
        str | None, typer.Option("--as", help="principal (locally, default `default`; on AWS your IAM identity)")
    ] = None,
    json: JsonOpt = False,
) -> None:
    """Submit one operation for a site, or a file of them (--batch). Exit 2 invalid input, 4 idempotency conflict,
    75 backpressure (with --batch: if any item was refused for it; they are listed)."""
    with reported(json):
        api = client(as_)
        if batch is not None:
            if kind or site or input_file or param or idempotency_key or tenant:
                raise InvalidInput("--batch takes everything from its file: give no KIND or other option", "batch")
            raise typer.Exit(submit_batch(api, batch, json))
        if kind is None or site is None:
            raise InvalidInput("give KIND and --site (or --batch FILE.jsonl)", field="site" if kind else "kind")
        if kind == "import":
            if input_file is None or param:
                raise InvalidInput("import takes exactly --input-file WXR_FILE", field="input-file")
            data = api.upload(site, input_file)
        else:
            data, _ = parse_params(input_file, param or [], kind)
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else {}
        body = {"kind": kind, "site_id": site, "params": data} | ({"tenant": tenant} if tenant is not None else {})
        op = api.call("POST", "/operations", body=body, headers=headers)
        if json:
            emit_json(op)
        else:
            verb = "accepted" if op["created"] else "already submitted"
            console.print(f"{verb}: [bold]{op['operation_id']}[/] {op['kind']} for {op['site_id']} ({op['status']})")
            console.print(f"follow it: sitedispatch ops wait {op['operation_id']}")


def submit_batch(api: ApiClient, path: Path, as_json: bool) -> int:
    """Submit a file of operations; the exit code: 75 if any was refused for backpressure, else that of the first
    refusal, else 0."""
    from sitedispatch.cli.batch import submit_file
    from sitedispatch.cli.output import exit_code_for
    from sitedispatch.domain.errors import error_from_document

    report = submit_file(api, path, show_progress=not as_json)
    if as_json:
        emit_json(
            {
                "lines": report.lines,
                "answered": report.answered,
                "accepted": report.accepted,
                "existing": report.existing,
                "refused": report.refused,
                "operations": report.operations,
            }
        )
    else:
        if report.answered < report.lines:
            console.print(
                f"interrupted: {report.answered} of {report.lines} lines answered; the same file again submits what "
                "is missing (each line's idempotency key makes a line already in a no-op)"
            )
        console.print(f"{report.accepted} accepted, {report.existing} already submitted, {len(report.refused)} refused")
        for refusal in report.refused:
            console.print(f"  line {refusal['line']}: {refusal['status']} {refusal['error']}: {refusal['message']}")
        if report.backpressured:
            console.print(f"retry the {len(report.backpressured)} refused for backpressure later (same file: safe)")
    if report.answered < report.lines:
        return 130  # as a shell reports Ctrl-C
    if report.backpressured:
        return 75
    if report.refused:
        first = report.refused[0]
        return exit_code_for(error_from_document(first, first["status"]))
    return 0


@app.command()
def status(as_: AsOpt = None, json: JsonOpt = False) -> None:
    """Queue depth, in-flight, oldest age and DLQ depth; the operation backlog (a principal's own rows)."""
    from sitedispatch.operator.status import StatusReport

    with reported(json):
        report = client(as_).call("GET", "/status")
        emit_json(report) if json else render_status(typed(StatusReport, report))


@app.command()
def reconcile(
    schedule: Annotated[str, typer.Option(help="reconcile | wp-events | queue-repair")] = "reconcile",
    as_: AsOpt = None,
    json: JsonOpt = False,
) -> None:
    """Run one reconciler sweep by hand (what the schedule of that name runs; operators only)."""
    with reported(json):
        sweep = client(as_).call("POST", "/reconcile", body={"schedule": schedule})
        if json:
            emit_json(sweep)
            return
        console.print(f"{sweep['schedule']}: {sweep['repaired']}")
        if sweep.get("failed"):
            console.print(f"failed steps (the others ran; see the reconciler's log): {', '.join(sweep['failed'])}")


@app.command()
def demo(
    sites_: Annotated[int, typer.Option("--sites", min=1, max=100, help="fleet size")] = 10,
    latency: Annotated[float, typer.Option(help="simulated provisioning latency per site (s)")] = 2.0,
    workdir: Annotated[Path, typer.Option(help="logs")] = Path(".sitedispatch") / "demo",
    wordpress: Annotated[
        bool | None,
        typer.Option(
            "--wordpress/--no-wordpress",
            help="include a real WordPress site (default: when Debian's packages are installed)",
        ),
    ] = None,
    hold: Annotated[
        bool | None,
        typer.Option(
            "--hold/--no-hold",
            help="keep the fleet and the operator console up after the report, until Ctrl-C (default: in a terminal)",
        ),
    ] = None,
    json: JsonOpt = False,
) -> None:
    """Start the local runtime, provision a fleet at once, compare with the cron round-robin it replaces; follow it
    in the operator console (its URL is printed first)."""
    import sys

    from sitedispatch.local.demo import run_demo

    keep = sys.stdin.isatty() if hold is None else hold
    with reported(json):  # a second demo in the same folder, a runtime that does not come up: one line
        code = run_demo(sites_, latency, workdir, as_json=json, wordpress=wordpress, hold=keep)
    raise typer.Exit(code)
