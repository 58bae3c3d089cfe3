"""`sitedispatch deps list|show|set|clear|pause|resume`: what sites share, each dependency's cap, rates and breaker
(operators set, pause and resume them; audited)."""

from __future__ import annotations

import re
from typing import Annotated, Any

import typer

from sitedispatch.cli.args import AsOpt, JsonOpt, RequiredReasonOpt
from sitedispatch.cli.context import client
from sitedispatch.cli.output import console, emit_json, reported, table, when
from sitedispatch.client import typed
from sitedispatch.domain.errors import InvalidInput

app = typer.Typer(
    help="Dependencies sites share (a database cluster, a PHP pool): caps, rates, breakers.", no_args_is_help=True
)

PERIODS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3_600.0, "hour": 3_600.0, "d": 86_400.0, "day": 86_400.0}
RATE = re.compile(r"^(?:(?P<kind>[a-z_]+)=)?(?P<limit>\d+)/(?P<period>\d*\.?\d*)(?P<unit>[a-z]*)(?:\+(?P<burst>\d+))?$")
RateOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--rate",
        help="[KIND=]LIMIT/PERIOD[+BURST], e.g. 20/min+5 (all kinds) or import=30/h; repeat for one per kind",
    ),
]


def parse_rate(text: str) -> dict[str, Any]:
    """A rate as `deps set --rate` takes it, as the API's body has it."""
    found = RATE.match(text.strip())
    unit = found.group("unit") if found else ""
    if found is None or (unit and unit not in PERIODS) or not (found.group("period") or unit):
        raise InvalidInput(
            f"--rate takes [KIND=]LIMIT/PERIOD[+BURST] (PERIOD: seconds, or 1min, h, day), got {text!r}", field="rate"
        )
    period = float(found.group("period") or 1) * PERIODS.get(unit, 1.0)
    return {
        "kind": found.group("kind") or "all",
        "limit": int(found.group("limit")),
        "period_s": period,
        "burst": int(found.group("burst") or 1),
    }


def _rates(view: Any) -> str:
    if not view.rates:
        return "unlimited"
    return "; ".join(
        r.describe + (f", next start {when(r.next_start_at)}" if r.next_start_at else "") for r in view.rates
    )


def render(body: Any) -> None:
    from sitedispatch.operator.dependencies import DependencyView

    view = typed(DependencyView, body)
    cap = "uncapped" if view.max_running is None else f"{view.running} of {view.max_running} running"
    rows = [
        ["running", cap],
        ["rates", _rates(view)],
        ["breaker", view.state.value + (f": {view.reason}" if view.reason else "")],
    ]
    if view.reopen_at is not None and view.state.value == "open":
        rows.append(["probe from", when(view.reopen_at)])
    if view.probe:
        rows.append(["probe", view.probe])
    if view.changed_by:
        rows.append(["changed", f"by {view.changed_by} at {when(view.changed_at)}"])
    if view.settings_reason:
        rows.append(["settings", f"{view.settings_reason} ({when(view.settings_at)})"])
    shown = ", ".join(view.sites) + (
        f" (+{view.site_count - len(view.sites)})" if view.site_count > len(view.sites) else ""
    )
    rows.append(["sites", f"{view.site_count}: {shown}" if view.site_count else "none"])
    table(f"dependency {view.dependency_id}", ["", ""], rows)
    for failure in view.evidence:
        console.print(f"  failed: {failure.get('site_id')} {failure.get('operation_id')} {failure.get('code')}")


@app.command("list")
def list_(as_: AsOpt = None, json: JsonOpt = False) -> None:
    """The dependencies your sites name (operators: every one), with their use now."""
    from sitedispatch.operator.dependencies import DependencyView

    with reported(json):
        body = client(as_).call("GET", "/dependencies")
        if json:
            emit_json(body)
            return
        views = [typed(DependencyView, item) for item in body]
        if not views:
            console.print("no dependencies: name them on a site (sites dependencies SITE db:cluster-7 --reason ...)")
            return
        table(
            "dependencies",
            ["id", "running", "rates", "breaker", "sites"],
            [
                [
                    v.dependency_id,
                    v.running if v.max_running is None else f"{v.running}/{v.max_running}",
                    _rates(v),
                    v.state.value,
                    v.site_count,
                ]
                for v in views
            ],
        )


@app.command("show")
def show(dependency_id: str, as_: AsOpt = None, json: JsonOpt = False) -> None:
    """A dependency: its cap and rates and their use, its breaker, its sites."""
    with reported(json):
        body = client(as_).call("GET", f"/dependencies/{dependency_id}")
        emit_json(body) if json else render(body)


@app.command("set")
def set_(
    dependency_id: str,
    reason: RequiredReasonOpt,
    max_running: Annotated[
        int | None, typer.Option(help="attempts running at once on it, across every principal and lane")
    ] = None,
    rate: RateOpt = None,
    as_: AsOpt = None,
    json: JsonOpt = False,
) -> None:
    """Set a dependency's cap and rates (operators only; audited; replaces what was set). Starts from now on wait
    for them: no attempt spent, nothing accepted dropped."""
    with reported(json):
        if max_running is None and not rate:
            raise InvalidInput("give --max-running, --rate or both (deps clear removes them)", field="max_running")
        body = {"max_running": max_running, "rates": [parse_rate(r) for r in rate or []], "reason": reason}
        view = client(as_).call("PUT", f"/dependencies/{dependency_id}", body=body)
        emit_json(view) if json else render(view)


@app.command("clear")
def clear(dependency_id: str, reason: RequiredReasonOpt, as_: AsOpt = None, json: JsonOpt = False) -> None:
    """Remove a dependency's cap and rates (operators only); its breaker stays as it is."""
    with reported(json):
        view = client(as_).call("DELETE", f"/dependencies/{dependency_id}", query={"reason": reason})
        emit_json(view) if json else render(view)


@app.command("pause")
def pause(dependency_id: str, reason: RequiredReasonOpt, as_: AsOpt = None, json: JsonOpt = False) -> None:
    """Pause a dependency: nothing on it starts until it is resumed, no attempt spent (operators only)."""
    with reported(json):
        view = client(as_).call("POST", f"/dependencies/{dependency_id}/pause", body={"reason": reason})
        emit_json(view) if json else render(view)


@app.command("resume")
def resume(dependency_id: str, reason: RequiredReasonOpt, as_: AsOpt = None, json: JsonOpt = False) -> None:
    """Resume a paused dependency, or close a breaker its failures opened (operators only)."""
    with reported(json):
        view = client(as_).call("POST", f"/dependencies/{dependency_id}/resume", body={"reason": reason})
        emit_json(view) if json else render(view)
