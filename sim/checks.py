"""What must hold after every step, and at the end (the chaos campaign's checker, `chaos/invariants.py`, over the
simulation's final state). Step checks read the stores directly, never through a gate: they are not a step."""

from __future__ import annotations

from typing import Any

from chaos.invariants import LiveWatch, Violations
from sitedispatch.domain.model import Lease
from sitedispatch.domain.ports import PreparedCommit
from tests.fakes import MemoryWorld

from .scheduler import Actor


class StepChecks:
    """After every step: live sequences never go back and every live revision is whole (LiveWatch); a site's fence
    never goes back. At every port call that answers one: each fence is granted to one actor (one writer), and a
    commit lands only under a fence its committer was granted."""

    def __init__(self, world: MemoryWorld, sites: list[str], violations: Violations) -> None:
        self.world, self.sites, self.violations = world, sites, violations
        self.watch = LiveWatch(world, violations)
        self.fences: dict[str, int] = {}
        self.granted: dict[tuple[str, int], str] = {}
        self.rows: dict[str, Any] = {}

    def after_step(self) -> None:
        for site_id in self.sites:
            site = self.world.db.sites.get(site_id)
            if site is None or site is self.rows.get(site_id):
                continue  # the same row as at the last step (a write replaces it)
            self.rows[site_id] = site
            if site.fence < self.fences.get(site_id, 0):
                self.violations.add("fences never go back", f"{site_id}: {self.fences[site_id]} then {site.fence}")
            self.fences[site_id] = site.fence
            self.watch.sample(site_id)

    def seen(self, actor: Actor, label: str, args: tuple[Any, ...], result: Any) -> None:
        """A port call that succeeded (the gate reports each one)."""
        for lease in _leases(result):
            key = (lease.site_id, lease.fence)
            holder = self.granted.setdefault(key, actor.name)
            if holder != actor.name:
                self.violations.add("one writer: a fence is granted once", f"{key} to {holder} and {actor.name}")
            actor.leases.add(key)
        if label == "commits.commit":
            prepared: PreparedCommit = args[0]
            key = (prepared.commit.site_id, prepared.commit.fence)
            if key not in actor.leases:
                self.violations.add("a commit is made under its committer's fence", f"{key} by {actor.name}")


def _leases(result: Any) -> list[Lease]:
    if isinstance(result, Lease):
        return [result]
    if isinstance(result, tuple):
        return [item for item in result if isinstance(item, Lease)]
    return []
