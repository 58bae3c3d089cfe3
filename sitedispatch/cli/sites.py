"""`sitedispatch sites get|history`."""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import NotFound
from .context import deps
from .output import emit_json, reported, table, when

app = typer.Typer(help="Inspect sites.", no_args_is_help=True)
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]


@app.command("get")
def get(site_id: str, json: JsonOpt = False) -> None:
    """Show a site: owner, head version and revision, lease and fence."""
    with reported(json):
        site = deps().sites.get(site_id)
        if site is None:
            raise NotFound(f"site {site_id} not found")
        if json:
            emit_json(site)
            return
        table("site", ["field", "value"], [
            ["site", site.site_id], ["principal", site.principal], ["created", when(site.created_at)],
            ["head version", site.head_version], ["head revision", site.head_revision or "-"],
            ["fence", site.fence], ["lease", f"{site.lease_owner} until {when(site.lease_expires_at)}"
                                    if site.lease_owner else "free"],
            ["paused", site.paused],
        ])


@app.command("history")
def history(site_id: str, limit: Annotated[int, typer.Option(min=1, max=1000)] = 50, json: JsonOpt = False) -> None:
    """The site's commits, newest first."""
    with reported(json):
        d = deps()
        if d.sites.get(site_id) is None:
            raise NotFound(f"site {site_id} not found")
        commits = d.commits.history(site_id, limit=limit)
        if json:
            emit_json(commits)
            return
        table(f"commits of {site_id}", ["version", "operation", "kind", "revision", "fence", "committed"],
              [[c.version, c.operation_id, c.kind.value, c.revision_id[:16], c.fence, when(c.committed_at)]
               for c in commits])
