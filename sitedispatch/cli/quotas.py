"""`sitedispatch quotas get|set|clear`: a principal's limits, and operators' overrides of them (audited)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from sitedispatch.cli.args import AsOpt, JsonOpt, RequiredReasonOpt
from sitedispatch.cli.context import client
from sitedispatch.cli.deps import RateOpt, parse_rate
from sitedispatch.cli.output import console, emit_json, reported, table, when
from sitedispatch.client import typed

app = typer.Typer(
    help="Principals' limits: read them, override them (operators), clear overrides.", no_args_is_help=True
)


def render(body: Any) -> None:
    from sitedispatch.operator.quotas import PrincipalLimits

    limits = typed(PrincipalLimits, body)
    quota = limits.quota
    source = (
        f"override by {quota.updated_by} at {when(quota.updated_at)}: {quota.reason}"
        if quota
        else "the deployment's settings"
    )
    running = ", ".join(f"{lane} {count}" for lane, count in limits.running.items())
    of = limits.principal if limits.tenant is None else f"{limits.principal}, tenant {limits.tenant}"
    table(
        f"limits of {of}",
        ["limit", "in effect", "in use now"],
        [
            ["outstanding operations", limits.max_outstanding, limits.outstanding],
            ["running attempts per lane", limits.max_running, running],
            ["starts per period", "; ".join(limits.rates) or "unlimited", "-"],
        ],
    )
    console.print(f"source: {source}")


TenantOpt = Annotated[str | None, typer.Option(help="one of the principal's tenants (its fairness key) instead")]


@app.command("get")
def get(principal: str, tenant: TenantOpt = None, as_: AsOpt = None, json: JsonOpt = False) -> None:
    """A principal's (or one of its tenants') limits in effect and their use (a principal reads its own)."""
    with reported(json):
        limits = client(as_).call("GET", "/quotas", query={"principal": principal, "tenant": tenant})
        emit_json(limits) if json else render(limits)


@app.command("set")
def set_(
    principal: str,
    reason: RequiredReasonOpt,
    max_outstanding: Annotated[int | None, typer.Option(help="accepted, unfinished operations at once")] = None,
    max_running: Annotated[int | None, typer.Option(help="attempts running at once, in each lane")] = None,
    rate: RateOpt = None,
    no_rates: Annotated[bool, typer.Option("--no-rates", help="remove the key's rates")] = False,
    tenant: TenantOpt = None,
    as_: AsOpt = None,
    json: JsonOpt = False,
) -> None:
    """Override a principal's limits (operators only; audited). It applies to the next submit and the next attempt.
    Lowering a limit below current use refuses new work until it drains; nothing accepted is dropped. --rate limits
    the key's starts (a principal's: all its tenants' together), as a dependency's rates do."""
    with reported(json):
        body: dict[str, Any] = {
            "principal": principal,
            "max_outstanding": max_outstanding,
            "max_running": max_running,
            "reason": reason,
        } | ({"tenant": tenant} if tenant is not None else {})
        if rate or no_rates:
            body["rates"] = [parse_rate(r) for r in rate or []]
        limits = client(as_).call("PUT", "/quotas", body=body)
        emit_json(limits) if json else render(limits)


@app.command("clear")
def clear(
    principal: str, reason: RequiredReasonOpt, tenant: TenantOpt = None, as_: AsOpt = None, json: JsonOpt = False
) -> None:
    """Remove a principal's (or a tenant's) override: the deployment's settings apply again (operators only)."""
    with reported(json):
        query = {"principal": principal, "reason": reason, "tenant": tenant}
        limits = client(as_).call("DELETE", "/quotas", query=query)
        emit_json(limits) if json else render(limits)
