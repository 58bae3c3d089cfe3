"""`sitedispatch events tail`: the caller's events in order, once or as they happen."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from sitedispatch.cli.args import AsOpt, JsonOpt
from sitedispatch.cli.context import client
from sitedispatch.cli.output import console, reported, when
from sitedispatch.domain.events import EventType

app = typer.Typer(help="Events: what happened to your operations and sites, in order.", no_args_is_help=True)
FOLLOW_WAIT_S = 20  # each request of --follow waits this long for an event (the API's longest wait)
PAGE = 100


@app.command("tail")
def tail(
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep waiting for new events (Ctrl-C stops)")] = False,
    after: Annotated[int, typer.Option(min=0, help="start after this cursor (0: the oldest kept)")] = 0,
    type_: Annotated[list[EventType] | None, typer.Option("--type", help="only this type (repeatable)")] = None,
    tenant: Annotated[str | None, typer.Option(help="only events of this tenant")] = None,
    principal: Annotated[str | None, typer.Option(help="whose events (operators only)")] = None,
    as_: AsOpt = None,
    json: JsonOpt = False,
) -> None:
    """Every event after the cursor, oldest first; with --follow, then each new one as it happens. --json prints
    one event per line (JSON Lines); the last line of a human listing names the cursor to continue from."""
    api = client(as_)
    query: dict[str, Any] = {"type": [t.value for t in type_ or []], "tenant": tenant, "principal": principal}
    with reported(json):
        try:
            while True:
                page = api.call(
                    "GET",
                    "/events",
                    query={**query, "after": after, "limit": PAGE, "wait_s": FOLLOW_WAIT_S if follow else 0},
                )
                for event in page["events"]:
                    show(event, json)
                caught_up = page["after"] == after  # nothing more was there to read
                after = page["after"]
                if caught_up and not follow:
                    break
        except KeyboardInterrupt:
            pass
        if not json:
            console.print(f"[dim]cursor {after}: `sitedispatch events tail --after {after}` continues from here[/]")


def show(event: dict[str, Any], as_json: bool) -> None:
    if as_json:
        import json as json_module

        sys.stdout.write(json_module.dumps(event, sort_keys=True, separators=(",", ":")) + "\n")
        sys.stdout.flush()
        return
    subject = event.get("operation_id") or event.get("endpoint_id") or ""
    outcome = " ".join(
        str(event[key])
        for key in ("kind", "error_code", "revision_id", "publication_seq", "by", "reason")
        if event.get(key) is not None
    )
    site = event.get("site_id") or "-"
    console.print(f"{event['seq']:>6}  {when(event['time'])}  {event['type']:<22} {site}  {subject}  {outcome}")
