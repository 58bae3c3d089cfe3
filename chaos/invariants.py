"""The invariant checker: reads only durable state (tables, bucket) and the audit trail, during and after a run.

During: a sampler records every site's live sequence (must never decrease) and, for each live revision it meets,
checks that its receipt exists and every route in it is readable.
After: at most one commit per operation and a gap-free version chain per site with strictly increasing fences; every
accepted operation terminal; nothing but succeeded operations committed; every dead operation with complete
evidence; every terminal operation's event in its principal's feed (places without gap, each event once) and on the
bus; counters equal to the recount; every publication finished and the newest published one live; an audit
entry for every operator action the driver took.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sitedispatch.domain.errors import NotFound
from sitedispatch.domain.events import terminal_event_id
from sitedispatch.domain.model import RUNNABLE, Kind, PublicationStatus, Status, sha256_hex
from sitedispatch.domain.settings import Settings
from sitedispatch.flow.admission import recount
from sitedispatch.flow.counters import is_flow_counter
from sitedispatch.operations.evidence import EVIDENCE_FIELDS
from sitedispatch.publication.live import object_key, receipt_key


@dataclass
class Violations:
    found: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, invariant: str, detail: str) -> None:
        with self.lock:
            self.found.append(f"{invariant}: {detail}")


class LiveWatch:
    """G4 at each look: a site's live sequence never decreases, and a live revision met is whole (its receipt
    exists, every route in it is readable and is what the receipt says). Each revision is read once."""

    def __init__(self, deps: Any, violations: Violations) -> None:
        self.deps, self.violations = deps, violations
        self.samples = 0
        self.revisions_checked = 0
        self.routes_read = 0
        self._last: dict[str, int] = {}
        self._checked: set[tuple[str, str]] = set()

    def sample(self, site_id: str) -> None:
        site = self.deps.sites.get(site_id)
        if site is None:
            return
        self.samples += 1
        previous = self._last.get(site_id, 0)
        if site.live_seq < previous:
            self.violations.add("live seq never decreases", f"{site_id}: {previous} then {site.live_seq}")
        self._last[site_id] = site.live_seq
        if site.live_revision is None or (site_id, site.live_revision) in self._checked:
            return
        self._checked.add((site_id, site.live_revision))
        try:
            receipt = json.loads(self.deps.blobs.get(receipt_key(site_id, site.live_revision)))
        except NotFound:
            self.violations.add("a live revision has its receipt", f"{site_id} {site.live_revision[:12]}")
            return
        for entry in receipt["routes"]:
            try:
                body = self.deps.blobs.get(object_key(site_id, site.live_revision, entry["route"]))
            except NotFound:
                self.violations.add("every route of a live revision is readable", f"{site_id} {entry['route']}")
                continue
            if sha256_hex(body) != entry["sha256"]:
                self.violations.add("a live route is what its receipt says", f"{site_id} {entry['route']}")
            self.routes_read += 1
        self.revisions_checked += 1


class Sampler(threading.Thread):
    """Looks at the live pointers (LiveWatch) and the dependencies' caps while the run goes on, every
    `interval_s`."""

    def __init__(self, deps: Any, sites: list[str], violations: Violations, interval_s: float = 0.25) -> None:
        super().__init__(daemon=True, name="sampler")
        self.sites, self.violations, self.interval_s = sites, violations, interval_s
        self.deps = deps
        self.watch = LiveWatch(deps, violations)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.interval_s):
            for site_id in self.sites:
                try:
                    self.watch.sample(site_id)
                except Exception as exc:  # the emulator is busy: a failed read is not a violation, skip it
                    if "ThrottlingException" in repr(exc):
                        continue
                    self.violations.add("sampler", f"{site_id}: {exc!r}")
            try:
                check_dependency_caps(self.deps, self.violations)
            except Exception as exc:
                if "ThrottlingException" not in repr(exc):
                    self.violations.add("sampler", f"dependencies: {exc!r}")


@dataclass
class DriverLedger:
    """What the workload driver did, for the after-checks: accepted operations and operator actions."""

    accepted: set[str] = field(default_factory=set)
    actions: Counter[str] = field(default_factory=Counter)  # action -> times the driver performed it
    started_at: float = field(default_factory=time.time)


def max_running(spans: list[tuple[float, float]]) -> int:
    """The most spans open at once (start inclusive, end exclusive)."""
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def check_dependency_caps(deps: Any, violations: Violations) -> None:
    """Never more attempts holding a place of a dependency than its cap: its running shards, read now (an attempt
    runs only holding one; the operations' own start and end times are read before each transaction, so under
    stalls they cannot prove an overlap). The simulation checks the running operations after every step too."""
    capped = [d for d in deps.dependency_store.list(None) if d.max_running is not None]
    if not capped:
        return
    running = deps.dependency_store.running([d.dependency_id for d in capped])
    for dependency in capped:
        if running[dependency.dependency_id] > dependency.max_running:
            violations.add(
                "never more attempts running on a dependency than its cap",
                f"{dependency.dependency_id}: {running[dependency.dependency_id]} held, cap {dependency.max_running}",
            )


def check_after(
    deps: Any, settings: Settings, sites: list[str], ledger: DriverLedger, violations: Violations
) -> dict[str, int]:
    """The invariants on the final durable state. Returns figures for the report."""
    ops = {}
    for status in Status:
        for op in deps.operations.list(status=status, limit=100_000):
            ops[op.operation_id] = op
    missing = ledger.accepted - set(ops)
    for op_id in sorted(missing):
        violations.add("accepted operations are kept", f"{op_id} vanished")
    for op in ops.values():
        if op.status in RUNNABLE:
            violations.add("every accepted operation ends terminal", f"{op.operation_id} is {op.status.value}")

    commits_by_site: dict[str, list[Any]] = {}
    for site_id in sites:
        history = sorted(deps.commits.history(site_id, limit=100_000), key=lambda c: c.version)
        commits_by_site[site_id] = history
        versions = [c.version for c in history]
        if versions != list(range(1, len(versions) + 1)):
            violations.add("versions form a chain", f"{site_id}: {versions}")
        fences = [c.fence for c in history]
        if any(b <= a for a, b in itertools.pairwise(fences)):
            violations.add("fences strictly increase per site", f"{site_id}: {fences}")
        ids = [c.operation_id for c in history]
        for op_id, n in Counter(ids).items():
            if n > 1:
                violations.add("at most one commit per operation", f"{op_id} committed {n} times")
        for parent, child in itertools.pairwise(history):
            if child.parent_revision != parent.revision_id:
                violations.add("each commit builds on the previous head", f"{site_id} v{child.version}")
        site = deps.sites.get(site_id)
        if site is not None and history and site.head_version != history[-1].version:
            violations.add("head is the last commit", f"{site_id}: head {site.head_version} vs {versions[-1]}")
        if site is not None and site.head_revision:
            _check_no_item_twice(deps, site_id, site.head_revision, violations)

    committed = {c.operation_id for history in commits_by_site.values() for c in history}
    for op in ops.values():
        if op.status == Status.SUCCEEDED and op.operation_id not in committed and op.site_id in sites:
            violations.add("a succeeded operation has its commit", op.operation_id)
        if op.status != Status.SUCCEEDED and op.operation_id in committed:
            violations.add("only succeeded operations commit", f"{op.operation_id} is {op.status.value}")
        if op.status == Status.DEAD:
            _check_evidence(deps, op, violations)

    _check_events(deps, list(ops.values()), violations)

    counters = {k: v for k, v in deps.operations.counters().items() if is_flow_counter(k)}
    expected = recount([op for op in ops.values() if op.status in RUNNABLE])
    for name in sorted(counters.keys() | expected.keys()):
        if counters.get(name, 0) != expected.get(name, 0):
            violations.add("counters equal the recount", f"{name}: {counters.get(name, 0)} != {expected.get(name, 0)}")

    for site_id in sites:
        publications = deps.publications.list(site_id, limit=100_000)
        unfinished = [
            p.seq for p in publications if p.status not in {PublicationStatus.PUBLISHED, PublicationStatus.SUPERSEDED}
        ]
        if unfinished:
            violations.add("every publication finishes", f"{site_id}: {unfinished} still open")
        published = [p.seq for p in publications if p.status == PublicationStatus.PUBLISHED]
        site = deps.sites.get(site_id)
        if site is not None and published and site.live_seq != max(published):
            violations.add(
                "the newest published revision is live",
                f"{site_id}: live {site.live_seq}, newest published {max(published)}",
            )

    audited = Counter(
        entry.action for entry in deps.audit.list(ledger.started_at - 60, deps.clock.now() + 60, limit=100_000)
    )
    for action, times in ledger.actions.items():
        if audited[action] < times:
            violations.add("every operator action is audited", f"{action}: {times} done, {audited[action]} audited")
    check_dependency_caps(deps, violations)
    imports = [c for history in commits_by_site.values() for c in history if c.kind == Kind.IMPORT]
    return {
        "operations": len(ops),
        "commits": len(committed),
        "imports_in_steps": sum(int(c.summary.get("steps", 1)) > 1 for c in imports),
        "imports_resumed": sum(int(c.summary.get("resumed_from_step", 0)) > 0 for c in imports),
        "dead": sum(op.status == Status.DEAD for op in ops.values()),
        "cancelled": sum(op.status == Status.CANCELLED for op in ops.values()),
        "superseded": sum(op.status == Status.SUPERSEDED for op in ops.values()),
        "redriven": sum(op.epoch > 0 for op in ops.values()),
    }


def _check_events(deps: Any, ops: list[Any], violations: Violations) -> None:
    """G9: every terminal operation has its one event, in its principal's feed and on the bus; each feed holds
    places 1..n, each event once."""
    terminal = [op for op in ops if op.status.terminal]
    wanted = {terminal_event_id(op.operation_id, op.epoch): op for op in terminal}
    stored = {s.event.event_id: s for s in deps.events.get_many(list(wanted))}
    for event_id, op in wanted.items():
        found = stored.get(event_id)
        if found is None:
            violations.add("every terminal operation has its event", f"{op.operation_id} ({op.status.value})")
        elif found.seq is None or not found.on_bus:
            violations.add("every event is delivered", f"{op.operation_id}: place {found.seq}, bus {found.on_bus}")
        elif found.event.detail.get("status") != op.status.value:
            violations.add("an event tells the outcome", f"{op.operation_id}: {found.event.detail.get('status')}")
    for principal in sorted({op.principal for op in ops}):
        feed = deps.events.read(principal, 0, 100_000)
        if [entry.seq for entry in feed] != list(range(1, len(feed) + 1)):
            violations.add("a feed's places have no gap", f"{principal}: {len(feed)} entries")
        for event_id, n in Counter(entry.event.event_id for entry in feed).items():
            if n > 1:
                violations.add("an event takes one feed place", f"{principal}: {event_id} {n} times")


def _check_no_item_twice(deps: Any, site_id: str, revision: str, violations: Violations) -> None:
    """An import resumed after a kill or continued across invocations creates nothing twice: the head revision
    holds each imported item (its guid) once, and each post id once."""
    from sitedispatch.drivers.reference.store import ContentStore

    try:
        manifest = ContentStore(deps.blobs, site_id).manifest(revision)
    except Exception as exc:
        violations.add("the head revision is readable", f"{site_id} {revision[:12]}: {exc!r}")
        return
    for what, values in (("guid", [p.guid for p in manifest.posts]), ("id", [p.id for p in manifest.posts])):
        twice = sorted(str(v) for v, n in Counter(values).items() if n > 1)
        if twice:
            violations.add("no item twice", f"{site_id}: post {what}s {twice[:5]} more than once")


def _check_evidence(deps: Any, op: Any, violations: Violations) -> None:
    if not op.evidence:
        violations.add("every dead operation has evidence", f"{op.operation_id}: no evidence on the row")
        return
    try:
        document = json.loads(deps.blobs.get(op.evidence["key"]))
    except Exception as exc:
        violations.add("every dead operation has evidence", f"{op.operation_id}: {exc!r}")
        return
    if set(document) != EVIDENCE_FIELDS:
        violations.add("evidence is complete", f"{op.operation_id}: {sorted(EVIDENCE_FIELDS ^ set(document))}")
    if document.get("operation_id") != op.operation_id or not document.get("recovery_command"):
        violations.add("evidence names its operation and recovery", op.operation_id)
