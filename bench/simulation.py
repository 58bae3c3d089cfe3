"""A discrete-event model of both designs: the minute-cron round-robin and site-grouped FIFO queues with Lambda.

What the queue model knows about AWS (all parameters, `AwsLimits`):
- an event source mapping runs at most `max_concurrency` invocations of a queue at once (batch size 1 here);
- a FIFO queue hands out one in-flight message per message group (a site's operations run one at a time; a
  publication chunk is its own group, so chunks of one site run in parallel);
- SQS FIFO throughput per API action: `fifo_tps` messages per second per queue (300 without batching in standard
  FIFO mode; high-throughput mode raises it to `fifo_tps_high`);
- a new execution environment pays `cold_start_s` once; Lambda adds environments for a queue as work arrives, up to
  the cap (`scale_up_per_minute` new environments per minute after the first `initial_environments`).
Durations (`Durations`) come from the local runtime (measured) or from assumptions stated with them.

The cron model: one tick a minute; a tick does one operation for one site, or renders one route of one publication,
picking sites round-robin (the system this project replaces).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

CRON_PERIOD_S = 60.0
CHUNK_ROUTES = 25


@dataclass(frozen=True)
class AwsLimits:
    max_concurrency: int = 20  # per queue (event source mapping)
    fifo_tps: float = 300.0  # deliveries per second per queue, standard FIFO mode, no batching
    fifo_tps_high: float = 3000.0  # high-throughput FIFO mode (per partition; the quota grows with partitions)
    high_throughput: bool = True
    cold_start_s: float = 0.9
    initial_environments: int = 5  # environments Lambda starts at once for a new queue backlog
    scale_up_per_minute: int = 300  # further environments per minute (SQS event sources)

    @property
    def tps(self) -> float:
        return self.fifo_tps_high if self.high_throughput else self.fifo_tps


@dataclass(frozen=True)
class Durations:
    operation_s: float = 2.0  # a provision (WordPress install) end to end in one invocation
    publish_operation_s: float = 0.3  # the publish operation itself (commit + outbox)
    plan_s: float = 0.2  # planning a publication (load the manifest, cut routes into chunks)
    route_s: float = 0.05  # rendering and storing one route
    finish_s: float = 0.2  # receipt + promotion + live.json
    hop_s: float = 0.02  # one queue hop: send -> receive by a free environment


@dataclass
class Environments:
    """A queue's pool of execution environments, growing as Lambda scales it."""

    limits: AwsLimits
    free_at: list[float] = field(default_factory=list)  # heap of times environments become free
    created: int = 0

    def acquire(self, ready_at: float) -> tuple[float, float]:
        """(start time, cold start paid) for work ready at `ready_at`: a free warm environment if there is one,
        else a new one as soon as Lambda's scaling allows it, else the first environment that frees up."""
        if self.free_at and self.free_at[0] <= ready_at:
            heapq.heappop(self.free_at)
            return ready_at, 0.0
        earliest_free = self.free_at[0] if self.free_at else math.inf
        if self.created < self.limits.max_concurrency:
            new_at = max(ready_at, self._allowed_at(self.created + 1))
            if new_at < earliest_free:
                self.created += 1
                return new_at, self.limits.cold_start_s
        return max(heapq.heappop(self.free_at), ready_at), 0.0

    def _allowed_at(self, k: int) -> float:
        """When the k-th environment of this queue may exist."""
        extra = k - self.limits.initial_environments
        return 0.0 if extra <= 0 else extra / self.limits.scale_up_per_minute * 60.0

    def release(self, at: float) -> None:
        heapq.heappush(self.free_at, at)


class FifoLane:
    """One FIFO queue and its event source mapping: at most one in-flight message per group, `tps` deliveries a
    second, and the environment pool."""

    def __init__(self, limits: AwsLimits) -> None:
        self.limits = limits
        self.environments = Environments(limits)
        self.slots: set[int] = set()  # delivery slots of 1/tps seconds already used
        self.group_free: dict[str, float] = {}

    def run(self, ready_at: float, group: str, duration_s: float, hop_s: float) -> float:
        """Schedule one message (groups in arrival order, as FIFO keeps them); returns when its work is done."""
        ready = max(ready_at + hop_s, self.group_free.get(group, 0.0))
        slot = math.floor(ready * self.limits.tps)
        while slot in self.slots:  # the queue delivers at most `tps` messages a second
            slot += 1
        self.slots.add(slot)
        ready = max(ready, slot / self.limits.tps)
        start, cold = self.environments.acquire(ready)
        done = start + cold + duration_s
        self.environments.release(done)
        self.group_free[group] = done
        return done


def queue_fleet_provision_s(
    n_sites: int, limits: AwsLimits, durations: Durations, arrivals: list[float] | None = None
) -> float:
    """Every site asks for its provision at t=0 (or at `arrivals[i]`): when is the last one committed?"""
    lane = FifoLane(limits)
    return max(
        lane.run(arrivals[i] if arrivals else 0.0, f"site-{i}", durations.operation_s, durations.hop_s)
        for i in range(n_sites)
    )


def queue_publication_latencies_s(
    n_sites: int, routes: int, limits: AwsLimits, durations: Durations, chunk_routes: int = CHUNK_ROUTES
) -> list[float]:
    """Every site asks for a publication of `routes` routes at t=0: time from request to live, per site."""
    operations, publications = FifoLane(limits), FifoLane(limits)
    committed = [
        operations.run(0.0, f"site-{i}", durations.publish_operation_s, durations.hop_s) for i in range(n_sites)
    ]
    # plans are their own group per publication, queued in commit order
    order = sorted(range(n_sites), key=lambda i: committed[i])
    planned = {i: publications.run(committed[i], f"plan-{i}", durations.plan_s, durations.hop_s) for i in order}
    chunks = max(1, math.ceil(routes / chunk_routes))
    done: dict[int, float] = {}
    for i in sorted(planned, key=lambda i: planned[i]):
        last = 0.0
        for c in range(chunks):
            size = min(chunk_routes, routes - c * chunk_routes)
            last = max(last, publications.run(planned[i], f"chunk-{i}-{c}", size * durations.route_s, durations.hop_s))
        done[i] = last + durations.finish_s
    return [done[i] for i in range(n_sites)]


def cron_fleet_provision_s(n_sites: int, durations: Durations, period_s: float = CRON_PERIOD_S) -> float:
    """One site per tick: the last site starts at tick N-1."""
    return (n_sites - 1) * period_s + durations.operation_s


def cron_publication_latencies_s(
    n_sites: int, routes: int, durations: Durations, period_s: float = CRON_PERIOD_S
) -> list[float]:
    """One route per tick, sites round-robin: site k's last route is rendered at tick (routes-1)*N + k."""
    return [((routes - 1) * n_sites + k) * period_s + durations.route_s + durations.finish_s for k in range(n_sites)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[index]


# -- sustainable throughput: which limit binds -------------------------------------------------------------------
# AWS's published limits, as last read (2024-11; this machine has no internet, so not re-read on the run date). Each
# is one operation-independent number; the model divides it by what one operation uses of it.
SOURCES = {
    "esm": "https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html (maximum concurrency 2..1000 per "
    "event source mapping; FIFO: at most one invocation per active message group)",
    "account": "https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html (1,000 concurrent executions "
    "per account and region by default, shared by every function)",
    "fifo": "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html "
    "(high-throughput FIFO, which the stack enables: 70,000 non-batched transactions per second per API action "
    "in us-east-1, us-west-2 and eu-west-1; 300 per second without high throughput)",
    "item": "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html (one "
    "partition, hence one item, serves at most 1,000 write units per second; a transactional write costs 2 units "
    "per item of up to 1 KB)",
    "table": "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html (on-demand: "
    "40,000 write request units per second per table by default, raised on request)",
    "new_table": "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/on-demand-capacity-mode.html (a "
    "new on-demand table serves up to 4,000 write request units per second at once and doubles its previous peak "
    "within 30 minutes; warm throughput can raise it ahead of time)",
}
ITEM_WRITE_UNITS_S = 1_000.0
TABLE_WRITE_UNITS_S = 40_000.0
NEW_TABLE_WRITE_UNITS_S = 4_000.0
FIFO_TPS_PER_ACTION = 70_000.0
ACCOUNT_CONCURRENCY = 1_000


@dataclass(frozen=True)
class Ceiling:
    limit: str
    ops_per_s: float
    why: str
    initial: bool = False  # holds only while a new deployment ramps up (not a sustained limit)


def ceilings(
    per_op: dict[str, int],
    write_units_by_table: dict[str, int],
    operation_s: float,
    publication_s: float,
    esm_max_concurrency: dict[str, int],
    principals: int = 1,
    tenants: int = 1,
    running_cap: int = 10,
) -> list[Ceiling]:
    """The operations per second each limit allows, for operations of `operation_s` in the operations lane that
    each publish (`publication_s` in the publications lane), spread over many sites, `principals` principals and
    `tenants` fairness keys of each. `per_op`: the requests of one operation by API; `write_units_by_table`: its
    DynamoDB write units per table; `running_cap`: attempts one fairness key runs at once (a setting)."""
    from sitedispatch.flow.counters import OUTSTANDING_SHARDS, RUNNING_SHARDS, SHARE_SHARDS

    keys = principals * tenants
    sqs_actions = {k: v for k, v in per_op.items() if k.startswith("sqs:")}
    busiest_action, busiest = max(sqs_actions.items(), key=lambda kv: kv[1], default=("sqs:none", 1))
    table, units = max(write_units_by_table.items(), key=lambda kv: kv[1], default=("none", 1))
    # A counter shard an operation moves twice (+1 at submit or start, -1 at its end), each time in a transaction:
    # 4 write units per operation per item; a group of shards takes as many times that.
    per_item = ITEM_WRITE_UNITS_S / 4.0
    return [
        Ceiling(
            "operations lane: event source mapping maximum concurrency",
            esm_max_concurrency["operations"] / operation_s,
            f"{esm_max_concurrency['operations']} at once / {operation_s} s each ({SOURCES['esm']})",
        ),
        Ceiling(
            "publications lane: event source mapping maximum concurrency",
            esm_max_concurrency["publications"] / publication_s,
            f"{esm_max_concurrency['publications']} at once / {publication_s} s each",
        ),
        Ceiling(
            "Lambda account concurrency",
            ACCOUNT_CONCURRENCY / (operation_s + publication_s),
            f"{ACCOUNT_CONCURRENCY} environments / {operation_s + publication_s} s of functions per operation "
            f"({SOURCES['account']})",
        ),
        Ceiling(
            f"SQS FIFO per API action ({busiest_action})",
            FIFO_TPS_PER_ACTION / busiest,
            f"{FIFO_TPS_PER_ACTION:.0f} per second / {busiest} per operation ({SOURCES['fifo']})",
        ),
        Ceiling(
            "a fairness key's running cap (the setting)",
            running_cap * keys / operation_s,
            f"{running_cap} at once per key / {operation_s} s each, x {keys} key(s)",
        ),
        Ceiling(
            "DynamoDB: a fairness key's running shards",
            per_item * RUNNING_SHARDS * keys,
            f"{RUNNING_SHARDS} shards x {ITEM_WRITE_UNITS_S:.0f} write units per second per item / 4 per operation, "
            f"x {keys} key(s) ({SOURCES['item']})",
        ),
        Ceiling(
            "DynamoDB: a fairness key's share shards",
            per_item * SHARE_SHARDS * keys,
            f"{SHARE_SHARDS} shards x {per_item:.0f} operations per second each, x {keys} key(s)",
        ),
        Ceiling(
            "DynamoDB: a principal's outstanding shards",
            per_item * OUTSTANDING_SHARDS * principals,
            f"{OUTSTANDING_SHARDS} shards x {per_item:.0f} operations per second each, x {principals} principal(s)",
        ),
        Ceiling(
            "DynamoDB: the global admission limit's shards",
            per_item * OUTSTANDING_SHARDS,
            f"{OUTSTANDING_SHARDS} shards x {per_item:.0f} operations per second each",
        ),
        Ceiling(
            f"DynamoDB: the {table} table's write quota",
            TABLE_WRITE_UNITS_S / units,
            f"{TABLE_WRITE_UNITS_S:.0f} write units per second / {units} per operation ({SOURCES['table']})",
        ),
        Ceiling(
            f"DynamoDB: a new on-demand {table} table's initial write throughput",
            NEW_TABLE_WRITE_UNITS_S / units,
            f"{NEW_TABLE_WRITE_UNITS_S:.0f} write units per second / {units} per operation ({SOURCES['new_table']})",
            initial=True,
        ),
    ]


def binding(rows: list[Ceiling], sustained: bool = True) -> Ceiling:
    """The lowest ceiling: of the sustained limits, or including a new deployment's ramp-up ones."""
    return min((c for c in rows if not (sustained and c.initial)), key=lambda c: c.ops_per_s)
