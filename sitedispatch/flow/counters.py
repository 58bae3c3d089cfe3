"""The counters flow control keeps, named once, and how a limit is spread over shards.

No item is written by every operation, nor by every operation of one principal or one tenant: each such limit is a
`Group` of shard counters (`NAME#k`), each holding an exact part of the maximum (the parts add up to it). An
operation takes a place on one shard (its home, by a hash) and, when that shard alone is full, on the shard with
the most room, found by reading the group's shards (one BatchGetItem): so a refusal comes only when every shard is
full, that is at the group's maximum, give or take the places other submits take between that read and the retry.
The operation's row records the shards it took (`Operation.holds`, `share`, `running_slot`), and every end
releases exactly those, whatever the settings say by then.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sitedispatch.domain.ports import Slot

SEPARATOR = "#"  # between a counter's parts; principals, tenants, lanes and site ids never contain it

GLOBAL = "global"
PRINCIPAL = "principal"  # outstanding operations of a principal, whatever their tenant
TENANT = "tenant"  # outstanding operations of one (principal, tenant), when the tenant is not the principal
SITE = "site"  # queued operations of one site (and its owner); one site runs one at a time, so it is never hot
RUNNING = "running"  # attempts running at once, per lane and fairness key
SHARE = "queued"  # the fairness key's share of a lane's queue
DEPENDENCY_RUNNING = "deprun"  # attempts running on a dependency (flow/dependencies.py), each shard its breaker's flag
QUOTA = "quota"  # an operator's override, kept beside the counters it bounds

# Shards per group. Outstanding counts are moved by every submit and every end, at the rate producers submit;
# running and share counts by starts and ends, at most at the rate a fairness key's operations run.
OUTSTANDING_SHARDS = 16
SHARE_SHARDS = 8
RUNNING_SHARDS = 4

# A fairness key's share of a lane's queue: this many of its operations per running slot are in the queue (or
# running) at once; the rest wait, accepted, and are sent oldest first as earlier ones finish. Two per slot keep
# its slots fed between a finish and the next send, and bound what another key's message finds ahead of it.
SHARE_PER_RUNNING_SLOT = 2


def key(*parts: str) -> str:
    return SEPARATOR.join(parts)


@dataclass(frozen=True)
class Group:
    """A limit of `maximum` kept on `shards` counters."""

    name: str
    maximum: int
    shards: int

    def shard(self, k: int) -> str:
        """Shard k's counter (a group of one shard is its own name)."""
        return self.name if self.shards == 1 else key(self.name, str(k))

    def shard_ids(self) -> list[str]:
        return [self.shard(k) for k in range(self.shards)]

    def shard_maximum(self, k: int) -> int:
        """Shard k's exact part of the maximum (the parts add up to it; a shard's part may be 0)."""
        return self.maximum // self.shards + (1 if k < self.maximum % self.shards else 0)

    def parts_around(self, held: Sequence[int]) -> list[int]:
        """Exact parts of the maximum for shards that already hold `held`: each shard's part first covers what it
        holds (while the maximum lasts), the rest is spread as `shard_maximum` spreads it. A maximum set at or
        below what is held so leaves no shard with room until work ends; parts that ignored what is held would let
        a shard holding nothing admit past the new maximum."""
        parts = [0] * self.shards
        left = self.maximum
        for k in range(self.shards):
            parts[k] = min(max(held[k], 0), left)
            left -= parts[k]
        for k in range(self.shards):
            parts[k] += left // self.shards + (1 if k < left % self.shards else 0)
        return parts

    def home(self, placed_by: str) -> int:
        return zlib.crc32(placed_by.encode()) % self.shards

    def slot(self, k: int) -> Slot:
        return Slot(self.shard(k), self.shard_maximum(k))

    def home_slot(self, placed_by: str) -> Slot:
        return self.slot(self.home(placed_by))

    def index_of(self, counter_id: str) -> int | None:
        """Which shard of this group `counter_id` is (None: not one of its shards)."""
        if self.shards == 1:
            return 0 if counter_id == self.name else None
        name, _, k = counter_id.rpartition(SEPARATOR)
        if name != self.name or not k.isdigit() or int(k) >= self.shards:
            return None
        return int(k)


def fairness_key(principal: str, tenant: str | None) -> tuple[str, str]:
    """(principal, tenant) with the tenant defaulting to the principal: what limits and shares apply to."""
    return principal, tenant or principal


def global_group(maximum: int) -> Group:
    return Group(GLOBAL, maximum, OUTSTANDING_SHARDS)


def principal_group(principal: str, maximum: int) -> Group:
    return Group(key(PRINCIPAL, principal), maximum, OUTSTANDING_SHARDS)


def tenant_group(principal: str, tenant: str, maximum: int) -> Group:
    return Group(key(TENANT, principal, tenant), maximum, OUTSTANDING_SHARDS)


def running_group(lane: str, principal: str, tenant: str, maximum: int) -> Group:
    return Group(key(RUNNING, lane, principal, tenant), maximum, RUNNING_SHARDS)


def share_group(lane: str, principal: str, tenant: str, running_maximum: int, label: str = "") -> Group:
    """A fairness key's share of a lane's queue for its sites' work on one set of dependencies (`label`; "" for
    sites that name none): work a dependency holds waits in its own set's share, so the key's work on another
    dependency (or none) never waits behind it."""
    name = key(SHARE, lane, principal, tenant, *((label,) if label else ()))
    return Group(name, SHARE_PER_RUNNING_SLOT * running_maximum, SHARE_SHARDS)


def dependency_label(dependency_ids: Iterable[str]) -> str:
    """The set of dependencies a site's work waits by, as a share names it: the ids sorted, joined ("" for none)."""
    return ",".join(sorted(set(dependency_ids)))


def share_label(counter_id: str | None) -> str:
    """The dependency set a share's name (or one of its shards) carries ("" for none, and for any other counter)."""
    parts = (counter_id or "").split(SEPARATOR)
    if parts[0] != SHARE or len(parts) < 5 or parts[4].isdigit():
        return ""
    return parts[4]


def site_counter(site_id: str) -> str:
    return key(SITE, site_id)


def quota_key(principal: str, tenant: str | None = None) -> str:
    return key(QUOTA, principal) if tenant is None or tenant == principal else key(QUOTA, principal, tenant)


# What a flow counter's id names besides its group and shard: global#k, principal#P#k, tenant#P#T#k,
# running#LANE#P#T#k, queued#LANE#P#T#k or queued#LANE#P#T#DEPS#k (all sharded) and site#SITE (one counter).
NAMED_PARTS = {GLOBAL: 0, PRINCIPAL: 1, TENANT: 2, RUNNING: 3, SHARE: 3}


def named_by(counter_id: str) -> tuple[str, tuple[str, ...]] | None:
    """A flow counter's group name and what it names (a principal, a tenant, a lane, a site), its shard dropped;
    None for any other counter."""
    name, *parts = counter_id.split(SEPARATOR)
    if name == SITE:
        return (name, tuple(parts)) if len(parts) == 1 else None
    size = NAMED_PARTS.get(name)
    if name == SHARE and share_label(counter_id):
        parts = [*parts[:size], parts[-1]]  # a share of one dependency set: its key's, as a person sums it
    if size is None or len(parts) != size + 1 or not parts[-1].isdigit():
        return None
    return name, tuple(parts[:-1])


def is_flow_counter(counter_id: str) -> bool:
    """Whether a counter is one an operation holds (what the recount compares)."""
    held = (GLOBAL, PRINCIPAL, TENANT, SITE, RUNNING, SHARE, DEPENDENCY_RUNNING)
    return counter_id.startswith(tuple(key(name, "") for name in held))
