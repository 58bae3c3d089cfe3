"""`sitedispatch audit list`: who did what to which operation or site, when, why, and how it ended."""

from __future__ import annotations

from typing import Annotated

import typer

from sitedispatch.cli.args import AsOpt, JsonOpt, parse_age
from sitedispatch.cli.context import client
from sitedispatch.cli.output import emit_json, reported, table, when

app = typer.Typer(help="The audit trail of operator and producer actions.", no_args_is_help=True)


@app.command("list")
def list_(
    since: Annotated[str, typer.Option(help="how far back (e.g. 15m, 2h, 7d)")] = "1d",
    actor: Annotated[str | None, typer.Option(help="only this actor")] = None,
    action: Annotated[
        str | None, typer.Option(help="only this action (cancel, pause, resume, redrive, replay)")
    ] = None,
    target: Annotated[str | None, typer.Option(help="only this operation or site id")] = None,
    site: Annotated[str | None, typer.Option(help="only actions on this site")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 100,
    as_: AsOpt = None,
    json: JsonOpt = False,
) -> None:
    """Audit entries, newest first. A principal sees the entries of its own actions."""
    with reported(json):
        query = {
            "since_s": parse_age(since, "since") or 0,
            "actor": actor,
            "action": action,
            "target": target,
            "site_id": site,
            "limit": limit,
        }
        entries = client(as_).call("GET", "/audit", query=query)
        if json:
            emit_json(entries)
            return
        table(
            f"audit ({len(entries)})",
            ["at", "actor", "action", "target", "outcome", "reason", "detail"],
            [
                [
                    when(e["at"]),
                    e["actor"],
                    e["action"],
                    e["target"],
                    e["outcome"],
                    e["reason"] or "-",
                    ", ".join(f"{k}={v}" for k, v in e["detail"].items() if k != "operator"),
                ]
                for e in entries
            ],
            styler=lambda row: {"ok": "green", "denied": "red", "refused": "yellow"}.get(row[4], ""),
        )
