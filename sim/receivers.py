"""The webhook receivers: each POST is answered 204, or while the faults last, at the seed's rate, with what real
receivers answer when they are down (a 5xx, a 429 with Retry-After, no answer); each endpoint's accepted event ids
are kept in the order they were accepted, for the checker."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from random import Random

from chaos.invariants import Violations
from sitedispatch.domain.webhooks import AttemptResult
from tests.fakes import MemoryWorld

from .faults import FaultPlan


@dataclass
class Receivers:
    rng: Random
    failing: float  # the share of POSTs refused while the faults last
    faults: FaultPlan
    accepted: dict[str, list[str]] = field(default_factory=dict)  # url -> event ids, in the order accepted

    def send(self, url: str, headers: Mapping[str, str], body: bytes) -> AttemptResult:
        if self.faults.on and self.rng.random() < self.failing:
            return self.rng.choice(
                [
                    AttemptResult(503, 0.2, response="down"),
                    AttemptResult(429, 0.1, retry_after_s=self.rng.uniform(1.0, 120.0)),
                    AttemptResult(None, 15.0, error="timed out"),
                ]
            )
        self.accepted.setdefault(url, []).append(headers["webhook-id"])
        return AttemptResult(204, 0.05)


def check_webhooks(world: MemoryWorld, receivers: Receivers, violations: Violations) -> dict[str, int]:
    """Every enabled endpoint accepted every event of its principal's feed it wants, nothing else, and the first
    acceptance of each in the feed's order (a delivery may come again: at least once)."""
    figures = {"endpoints": 0, "endpoints_disabled": 0, "webhooks_accepted": 0}
    for endpoint in world.db.endpoints.values():
        figures["endpoints"] += 1
        got = receivers.accepted.get(endpoint.url, [])
        figures["webhooks_accepted"] += len(got)
        if endpoint.disabled is not None:
            figures["endpoints_disabled"] += 1
            continue
        wanted = [  # as the API documents an endpoint's filters (not through the core's `wants`)
            entry.event.event_id
            for entry in world.db.feed.get(endpoint.principal, [])
            if (not endpoint.types or entry.event.type in endpoint.types)
            and (endpoint.tenant is None or entry.event.tenant == endpoint.tenant)
        ]
        first = list(dict.fromkeys(got))
        missing = [i for i in wanted if i not in set(first)]
        if missing:
            violations.add(
                "every event reaches each endpoint that wants it",
                f"{endpoint.endpoint_id}: {len(missing)} of {len(wanted)} never accepted",
            )
        if set(first) - set(wanted):
            violations.add("an endpoint gets only what it wants", f"{endpoint.endpoint_id}: {set(first) - set(wanted)}")
        if first != [i for i in wanted if i in set(first)]:
            violations.add("an endpoint gets its events in the feed's order", endpoint.endpoint_id)
    return figures
