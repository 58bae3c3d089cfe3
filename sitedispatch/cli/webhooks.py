"""`sitedispatch webhooks`: endpoints told of your events by signed POSTs; their deliveries and redelivery."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from sitedispatch.cli.args import AsOpt, JsonOpt
from sitedispatch.cli.context import client
from sitedispatch.cli.output import console, emit_json, reported, table, when
from sitedispatch.domain.events import EventType

app = typer.Typer(help="Webhooks: each of your events POSTed to your endpoints, signed.", no_args_is_help=True)
EndpointArg = Annotated[str, typer.Argument(help="the endpoint's id (whk_...)")]


def _show(endpoint: dict[str, Any]) -> None:
    state = "enabled" if endpoint["enabled"] else f"disabled ({endpoint['disabled']}) {when(endpoint['disabled_at'])}"
    wants = ", ".join(endpoint["types"]) or "every type"
    console.print(f"[bold]{endpoint['endpoint_id']}[/] {endpoint['url']}")
    console.print(f"  {state}; wants {wants}" + (f" of tenant {endpoint['tenant']}" if endpoint["tenant"] else ""))
    console.print(f"  done up to feed place {endpoint['cursor']}", end="")
    if endpoint["failures"]:
        console.print(f"; {endpoint['failures']} failed attempts, next {when(endpoint['next_attempt_at'])}", end="")
    if endpoint["redelivering"]:
        console.print(f"; sending places {endpoint['redelivering'][0]}-{endpoint['redelivering'][1]} again", end="")
    console.print()


def _answer(endpoint: dict[str, Any], as_json: bool) -> None:
    emit_json(endpoint) if as_json else _show(endpoint)


@app.command("create")
def create(
    url: Annotated[str, typer.Argument(help="https URL of a public host (the local runtime also takes loopback)")],
    type_: Annotated[list[EventType] | None, typer.Option("--type", help="only this type (repeatable)")] = None,
    tenant: Annotated[str | None, typer.Option(help="only events of this tenant")] = None,
    description: Annotated[str, typer.Option(help="a note for people")] = "",
    as_: AsOpt = None,
    json: JsonOpt = False,
) -> None:
    """Register an endpoint: each event after now is POSTed to it. Prints its signing secret, once: keep it."""
    body = {"url": url, "types": [t.value for t in type_ or []], "tenant": tenant, "description": description}
    with reported(json):
        created = client(as_).call("POST", "/webhooks", body=body)
        if json:
            emit_json(created)
            return
        _show(created["endpoint"])
        console.print(f"  signing secret (shown once): [bold]{created['secret']}[/]")


@app.command("list")
def owned(as_: AsOpt = None, json: JsonOpt = False) -> None:
    """Your endpoints."""
    with reported(json):
        endpoints = client(as_).call("GET", "/webhooks")["endpoints"]
        if json:
            emit_json(endpoints)
            return
        for endpoint in endpoints:
            _show(endpoint)
        if not endpoints:
            console.print("no webhook endpoints: `sitedispatch webhooks create URL` registers one")


@app.command("show")
def show(endpoint_id: EndpointArg, as_: AsOpt = None, json: JsonOpt = False) -> None:
    """One endpoint and its latest deliveries."""
    with reported(json):
        api = client(as_)
        endpoint = api.call("GET", f"/webhooks/{endpoint_id}")
        page = api.call("GET", f"/webhooks/{endpoint_id}/deliveries", query={"limit": 20})
        if json:
            emit_json({"endpoint": endpoint, **page})
            return
        _show(endpoint)
        _deliveries(page["deliveries"])


@app.command("deliveries")
def deliveries(
    endpoint_id: EndpointArg,
    before: Annotated[int | None, typer.Option(min=1, help="only feed places before this one")] = None,
    limit: Annotated[int, typer.Option(min=1, max=100)] = 20,
    as_: AsOpt = None,
    json: JsonOpt = False,
) -> None:
    """The endpoint's deliveries, newest first, each with its attempts."""
    with reported(json):
        page = client(as_).call("GET", f"/webhooks/{endpoint_id}/deliveries", query={"before": before, "limit": limit})
        if json:
            emit_json(page)
            return
        _deliveries(page["deliveries"])
        if page["before"] is not None:
            console.print(f"[dim]older: --before {page['before']}[/]")


def _deliveries(found: list[dict[str, Any]]) -> None:
    rows = []
    for delivery in found:
        last = delivery["attempts"][-1] if delivery["attempts"] else {}
        answer = last.get("status") or last.get("error") or "-"
        rows.append(
            [
                delivery["seq"],
                delivery["type"],
                "yes" if delivery["delivered"] else "no",
                len(delivery["attempts"]),
                answer,
                when(last.get("at")),
            ]
        )
    table("deliveries", ["place", "type", "delivered", "attempts", "last answer", "last attempt"], rows)


@app.command("redeliver")
def redeliver(
    endpoint_id: EndpointArg,
    from_seq: Annotated[int, typer.Option("--from", min=1, help="the first feed place to send again")],
    to_seq: Annotated[int | None, typer.Option("--to", min=1, help="the last (default: --from alone)")] = None,
    as_: AsOpt = None,
    json: JsonOpt = False,
) -> None:
    """Send the events of feed places FROM..TO again (those the endpoint wants), before what follows."""
    count = 1 if to_seq is None else to_seq - from_seq + 1
    if count < 1:
        raise typer.BadParameter(f"--to {to_seq} is before --from {from_seq}")
    with reported(json):
        endpoint = client(as_).call(
            "POST", f"/webhooks/{endpoint_id}/redeliver", body={"from_seq": from_seq, "count": count}
        )
        _answer(endpoint, json)


@app.command("rotate")
def rotate(endpoint_id: EndpointArg, as_: AsOpt = None, json: JsonOpt = False) -> None:
    """A new signing secret. For 24 hours each delivery carries both signatures: switch your receiver meanwhile."""
    with reported(json):
        rotated = client(as_).call("POST", f"/webhooks/{endpoint_id}/rotate")
        if json:
            emit_json(rotated)
            return
        console.print(f"new signing secret (shown once): [bold]{rotated['secret']}[/]")
        console.print(f"the old one also signs until {when(rotated['previous_valid_until'])}")


@app.command("enable")
def enable(endpoint_id: EndpointArg, as_: AsOpt = None, json: JsonOpt = False) -> None:
    """Enable a disabled endpoint: it goes on from where it stopped."""
    with reported(json):
        endpoint = client(as_).call("POST", f"/webhooks/{endpoint_id}/enable")
        _answer(endpoint, json)


@app.command("delete")
def delete(endpoint_id: EndpointArg, as_: AsOpt = None, json: JsonOpt = False) -> None:
    """Delete an endpoint, its secret and its deliveries."""
    with reported(json):
        endpoint = client(as_).call("DELETE", f"/webhooks/{endpoint_id}")
        if json:
            emit_json(endpoint)
            return
        console.print(f"deleted {endpoint['endpoint_id']} ({endpoint['url']})")
