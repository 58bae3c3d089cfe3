"""`sitedispatch sites register|list|get|history|read|pause|resume|delete|dependencies`."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from sitedispatch.cli.args import AsOpt, JsonOpt, RequiredReasonOpt
from sitedispatch.cli.context import client
from sitedispatch.cli.output import console, emit_json, reported, table, when
from sitedispatch.client import typed
from sitedispatch.domain.errors import InvalidInput, SiteDispatchError
from sitedispatch.domain.model import Publication, PublicationStatus, Site

app = typer.Typer(help="Inspect sites.", no_args_is_help=True)
DependencyOpt = Annotated[
    list[str] | None,
    typer.Option("--dependency", help="what the site shares with others (TYPE:NAME, e.g. db:cluster-7); repeat"),
]


@app.command("register")
def register(
    site_id: str,
    driver: Annotated[str, typer.Option(help="reference | wordpress")] = "wordpress",
    url: Annotated[str | None, typer.Option(help="a WordPress site's home URL")] = None,
    credential: Annotated[
        str | None,
        typer.Option(
            help="file:///path.json or a Secrets Manager secret (ARN or secretsmanager:NAME) holding "
            '{"user": ..., "application_password": ...}; only this reference is stored'
        ),
    ] = None,
    dependency: DependencyOpt = None,
    as_: AsOpt = None,
    json: JsonOpt = False,
) -> None:
    """Register a site with its driver, before its first operation (then `submit provision`)."""
    with reported(json):
        request = {"site_id": site_id, "driver": driver, "url": url, "credential": credential}
        body = client(as_).call("POST", "/sites", body=request | {"dependencies": dependency or []})
        site = typed(Site, body)
        if json:
            emit_json(body)
        else:
            console.print(f"registered {site.site_id} ({site.connection.describe()}) for {site.principal}")
            console.print(
                f"next: sitedispatch submit provision --site {site.site_id} --param title=... "
                f"--param admin_email=... --as {site.principal}"
            )


def _paused(site: Site) -> str:
    if not site.paused:
        return "no"
    by = f" (by {site.paused_by}, {when(site.paused_at)})" if site.paused_by else ""
    return f"yes: {site.pause_reason}{by}"


@app.command("list")
def list_sites(
    search: Annotated[str | None, typer.Option(help="only sites whose id contains this")] = None,
    paused: Annotated[bool, typer.Option("--paused", help="only paused sites")] = False,
    running: Annotated[bool, typer.Option("--running", help="only sites not paused")] = False,
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 100,
    as_: AsOpt = None,
    json: JsonOpt = False,
) -> None:
    """Your sites (an operator's or reader's: every site), in the table's order; the API's pages are followed up to
    --limit."""
    with reported(json):
        if paused and running:
            raise InvalidInput("--paused and --running exclude each other: give one (or neither: every site)", "paused")
        state = True if paused else False if running else None
        body = client(as_).every("/sites", {"search": search, "paused": state}, limit=limit)
        if json:
            emit_json(body)
            return
        sites = [typed(Site, item) for item in body]
        table(
            f"{len(sites)} site{'' if len(sites) == 1 else 's'}",
            ["site", "principal", "paused", "live seq", "live since"],
            [[s.site_id, s.principal, _paused(s), s.live_seq, when(s.live_at)] for s in sites],
        )


@app.command("get")
def get(site_id: str, as_: AsOpt = None, json: JsonOpt = False) -> None:
    """Show a site: owner, head version and revision, lease and fence."""
    with reported(json):
        body = client(as_).call("GET", f"/sites/{site_id}")
        if json:
            emit_json(body)
            return
        site = typed(Site, body)
        table(
            "site",
            ["field", "value"],
            [
                ["site", site.site_id],
                ["principal", site.principal],
                ["created", when(site.created_at)],
                ["driver", site.connection.describe()],
                ["head version", site.head_version],
                ["head revision", site.head_revision or "-"],
                ["fence", site.fence],
                ["lease", f"{site.lease_owner} until {when(site.lease_expires_at)}" if site.lease_owner else "free"],
                ["paused", _paused(site)],
                ["consecutive failures", site.consecutive_failures],
                ["dependencies", ", ".join(site.dependencies) or "-"],
                ["average operation", f"{site.avg_operation_s:.2f}s" if site.avg_operation_s else "-"],
                ["live revision", site.live_revision or "-"],
                ["live seq", site.live_seq],
                ["live since", when(site.live_at)],
            ],
        )


def describe_publication(p: Publication) -> str:
    """One line: where a publication is, and what went wrong on its way, if anything did."""
    chunks = "one step" if p.total_chunks is None else f"{len(p.done_chunks)}/{p.total_chunks} chunks"
    done = p.status in {PublicationStatus.PUBLISHED, PublicationStatus.SUPERSEDED}
    line = f"publication {p.seq}: {p.status.value}" + ("" if done else f", {chunks} done")
    if p.retried_steps:
        line += f"; {p.retried_steps} steps delivered again, the last because {p.last_failure}"
    elif p.last_failure:
        line += f"; last failure: {p.last_failure}"
    return line


@app.command("history")
def history(
    site_id: str, limit: Annotated[int, typer.Option(min=1, max=1000)] = 50, as_: AsOpt = None, json: JsonOpt = False
) -> None:
    """The site's commits and publications, newest first."""
    from sitedispatch.operator.reads import SiteHistory

    with reported(json):
        body = client(as_).call("GET", f"/sites/{site_id}/history", query={"limit": limit})
        if json:
            emit_json(body)
            return
        found = typed(SiteHistory, body)
        commits, publications = found.commits, found.publications
        table(
            f"commits of {site_id}",
            ["version", "operation", "kind", "revision", "fence", "committed"],
            [
                [c.version, c.operation_id, c.kind.value, c.revision_id[:16], c.fence, when(c.committed_at)]
                for c in commits
            ],
        )
        table(
            f"publications of {site_id}",
            ["seq", "revision", "status", "chunks", "retried", "created", "finished"],
            [
                [
                    p.seq,
                    p.revision_id[:16],
                    p.status.value,
                    "one step" if p.total_chunks is None else f"{len(p.done_chunks)}/{p.total_chunks}",
                    p.retried_steps,
                    when(p.created_at),
                    when(p.finished_at),
                ]
                for p in publications
            ],
        )
        for p in publications:
            if p.last_failure:
                console.print(describe_publication(p), soft_wrap=True)


@app.command("read")
def read(
    site_id: str,
    route: Annotated[str, typer.Argument(help="e.g. / or /sample-page/ or /feed/")] = "/",
    as_: AsOpt = None,
    json: JsonOpt = False,
) -> None:
    """Print the live content of a route (from the site's live revision; a principal reads its own sites)."""
    with reported(json):
        live = client(as_).call("GET", f"/sites/{site_id}/live", query={"route": route})
        emit_json(live) if json else sys.stdout.write(live["content"])


@app.command("pause")
def pause(
    site_id: str,
    reason: Annotated[str, typer.Option(help="why (required, as in the console: shown by sites get, audited)")],
    as_: AsOpt = None,
    json: JsonOpt = False,
) -> None:
    """Pause a site: its queued operations wait (deferred, no attempt spent); other sites are untouched. Pausing a
    paused site replaces its reason, and says what it was."""
    with reported(json):
        api = client(as_)
        try:  # how it was; the pause itself decides (and audits) whether the caller may
            before: Site | None = typed(Site, api.call("GET", f"/sites/{site_id}"))
        except SiteDispatchError:
            before = None
        site = api.call("POST", f"/sites/{site_id}/pause", body={"reason": reason})
        if json:
            emit_json(site)
            return
        was = ""
        if before is not None and before.paused:
            was = f" (it was paused already: {_paused(before)}; that reason is replaced)"
        sys.stdout.write(f"paused {site_id}: {reason}{was}\n")


@app.command("resume")
def resume(
    site_id: str,
    reason: Annotated[str, typer.Option(help="why (recorded)")] = "",
    as_: AsOpt = None,
    json: JsonOpt = False,
) -> None:
    """Resume a paused site (also clears its consecutive-failure count)."""
    with reported(json):
        site = client(as_).call("POST", f"/sites/{site_id}/resume", body={"reason": reason})
        emit_json(site) if json else sys.stdout.write(f"resumed {site_id}\n")


@app.command("delete")
def delete(site_id: str, reason: RequiredReasonOpt, as_: AsOpt = None, json: JsonOpt = False) -> None:
    """Delete a site that has nothing (no commit, nothing queued or running), e.g. one registered by mistake: its id
    is free again. Its owner or an operator; audited."""
    with reported(json):
        site = client(as_).call("DELETE", f"/sites/{site_id}", query={"reason": reason})
        emit_json(site) if json else sys.stdout.write(f"deleted {site_id} (it was {site['principal']}'s)\n")


@app.command("dependencies")
def dependencies(
    site_id: str,
    reason: RequiredReasonOpt,
    dependency_ids: Annotated[list[str] | None, typer.Argument(help="TYPE:NAME ids; none: the site names none")] = None,
    as_: AsOpt = None,
    json: JsonOpt = False,
) -> None:
    """Set what a site shares with other sites (its owner or an operator; audited): attempts not yet started wait
    for those dependencies' caps, rates and breakers (deps show ID)."""
    with reported(json):
        body = {"dependencies": dependency_ids or [], "reason": reason}
        site = typed(Site, client(as_).call("PUT", f"/sites/{site_id}/dependencies", body=body))
        if json:
            emit_json(site)
        else:
            sys.stdout.write(f"{site_id} names {', '.join(site.dependencies) or 'no dependency'}\n")
