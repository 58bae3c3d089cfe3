"""Operator and producer controls on accepted work, authorized and audited in one place.

A caller is a principal (it sees and acts only on its own sites, operations, dead letters, audit entries and status
rows) or an operator (all of them). This module is the one place that decides it: the API calls nothing else for a
read or an action. Another principal's site or operation is `NotFound`, word for word what a missing one gets, so
ids and site names do not leak between tenants; what only operators may do (quotas) is `Forbidden`. Every action
(cancel, pause, resume, redrive, replay, quota) writes an audit entry with who, what, target, reason, time and
outcome, including the ones refused.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from sitedispatch import observability as obs
from sitedispatch.domain.errors import Conflict, Forbidden, InvalidInput, LimitReached, NotFound, NotRunnable
from sitedispatch.domain.model import (
    NOT_BLANK_PATTERN,
    AuditEntry,
    Commit,
    Operation,
    Publication,
    QueueMessage,
    Quota,
    Site,
    Status,
    check_principal,
    check_tenant,
    lane_for,
)
from sitedispatch.domain.ports import (
    AuditLog,
    BlobStore,
    Clock,
    CommitStore,
    DeadLetter,
    OperationQueue,
    OperationStore,
    PublicationStore,
    QuotaStore,
    SiteStore,
)
from sitedispatch.domain.resources import operation_lanes
from sitedispatch.domain.settings import Settings
from sitedispatch.flow.admission import (
    backpressure,
    limit_of,
    limits_for,
    max_outstanding,
    max_running,
    quota_bounds,
    share_group_for,
)
from sitedispatch.flow.counters import principal_group, running_group, tenant_group
from sitedispatch.flow.placement import place
from sitedispatch.flow.shares import freed_by, release

DLQ_SCAN = 10_000


@dataclass(frozen=True)
class Caller:
    identity: str  # the --as name locally, the STS caller ARN on AWS
    operator: bool

    @classmethod
    def of(cls, identity: str, settings: Settings) -> Caller:
        patterns = [p.strip() for p in settings.operators.split(",") if p.strip()]
        return cls(identity, any(fnmatch.fnmatchcase(identity, pattern) for pattern in patterns))

    def may_act_for(self, principal: str) -> bool:
        return self.operator or self.identity == principal


@dataclass(frozen=True)
class DeadLetterFilter:
    site_id: str | None = None
    kind: str | None = None
    error_code: str | None = None
    older_than_s: float | None = None
    newer_than_s: float | None = None

    def matches(self, op: Operation, now: float) -> bool:
        evidence = op.evidence or {}
        age = now - (op.finished_at or op.updated_at)
        code = evidence.get("error_code") or (op.error.code if op.error else None)
        return (
            (self.site_id is None or op.site_id == self.site_id)
            and (self.kind is None or op.kind.value == self.kind)
            and (self.error_code is None or code == self.error_code)
            and (self.older_than_s is None or age >= self.older_than_s)
            and (self.newer_than_s is None or age <= self.newer_than_s)
        )


@dataclass
class RedriveReport:
    dry_run: bool
    selected: list[str] = field(default_factory=list)
    redriven: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # operation -> why (already redriven: idempotent)
    refused: dict[str, str] = field(default_factory=dict)  # operation -> why (superseded, cancelled, limits)
    dlq_messages_removed: int = 0


@dataclass(frozen=True)
class PrincipalLimits:
    principal: str
    tenant: str | None  # None: the principal's own limits (its outstanding operations in all)
    quota: Quota | None  # the operator's override, if any
    max_outstanding: int  # in effect
    max_running: int  # in effect, in each lane
    outstanding: int  # now
    running: dict[str, int]  # now, per lane


@dataclass(frozen=True)
class SiteHistory:
    commits: list[Commit]
    publications: list[Publication]


@dataclass(frozen=True)
class LiveRoute:
    site_id: str
    route: str
    revision_id: str | None
    seq: int
    bytes: int
    content: str


@dataclass
class ControlDeps:
    settings: Settings
    operations: OperationStore
    sites: SiteStore
    blobs: BlobStore
    queue: OperationQueue
    audit: AuditLog
    clock: Clock
    quotas: QuotaStore
    commits: CommitStore
    publications: PublicationStore


class Controls:
    def __init__(self, deps: ControlDeps) -> None:
        self.deps = deps

    # -- reads -------------------------------------------------------------------------------------------------

    def operation(self, caller: Caller, operation_id: str) -> Operation:
        return self._act(caller, None, operation_id, None)

    def operations(
        self, caller: Caller, *, site_id: str | None = None, status: Status | None = None, limit: int = 100
    ) -> list[Operation]:
        if site_id is not None:
            self.site(caller, site_id)
        found = self.deps.operations.list(site_id=site_id, status=status, limit=limit if caller.operator else DLQ_SCAN)
        return [op for op in found if caller.may_act_for(op.principal)][:limit]

    def site(self, caller: Caller, site_id: str, action: str | None = None, reason: str | None = None) -> Site:
        """The site, if `caller` may see it (or perform `action` on it: a refusal is then audited as denied)."""
        site = self.deps.sites.get(site_id)
        if site is None:
            raise NotFound(f"site {site_id} not found")
        self._authorize(caller, site.principal, f"site {site_id}", action=action, reason=reason, site_id=site_id)
        return site

    def history(self, caller: Caller, site_id: str, limit: int = 50) -> SiteHistory:
        """The site's commits and publications, newest first."""
        self.site(caller, site_id)
        return SiteHistory(
            self.deps.commits.history(site_id, limit=limit), self.deps.publications.list(site_id, limit=limit)
        )

    def live_route(self, caller: Caller, site_id: str, route: str) -> LiveRoute:
        """The live content of one route of the site."""
        from sitedispatch.publication.live import read_live_route

        self.site(caller, site_id)
        body, site = read_live_route(self.deps.sites, self.deps.blobs, site_id, route)
        return LiveRoute(site_id, route, site.live_revision, site.live_seq, len(body), body.decode("utf-8", "replace"))

    def audit_entries(
        self,
        caller: Caller,
        since: float,
        *,
        actor: str | None = None,
        action: str | None = None,
        target: str | None = None,
        site_id: str | None = None,
        limit: int = 100,
    ) -> list[AuditEntry]:
        """Audit entries, newest first: a principal reads the entries of its own actions, an operator every one."""
        if not caller.operator:
            if actor not in (None, caller.identity):
                raise Forbidden(f"{caller.identity} may only read its own audit entries")
            actor = caller.identity
        now = self.deps.clock.now()
        return self.deps.audit.list(since, now, actor=actor, action=action, target=target, site_id=site_id, limit=limit)

    @staticmethod
    def visible_principal(caller: Caller) -> str | None:
        """Whose rows a status report may show the caller: its own, or (None) everyone's for an operator."""
        return None if caller.operator else caller.identity

    def dead_letters(
        self, caller: Caller, where: DeadLetterFilter = DeadLetterFilter(), limit: int = 100
    ) -> list[Operation]:
        """Dead operations (the DynamoDB record is the index of the DLQ), newest first, filtered."""
        now = self.deps.clock.now()
        dead = self.deps.operations.list(site_id=where.site_id, status=Status.DEAD, limit=DLQ_SCAN)
        return [op for op in dead if caller.may_act_for(op.principal) and where.matches(op, now)][:limit]

    def evidence(self, caller: Caller, operation_id: str) -> dict[str, Any]:
        op = self.operation(caller, operation_id)
        if not op.evidence:
            state = f"{op.status.value}" + (f" (epoch {op.epoch})" if op.epoch else "")
            raise NotFound(f"operation {operation_id} has no dead-letter evidence: it is {state}")
        return dict(json.loads(self.deps.blobs.get(op.evidence["key"])))

    # -- actions -------------------------------------------------------------------------------------------------

    def cancel(self, caller: Caller, operation_id: str, reason: str) -> Operation:
        """A queued operation is cancelled at once; a running one is asked to stop and ends `cancelled` without
        committing (its commit transaction is refused from now on). A terminal one is a Conflict."""
        op = self._act(caller, "cancel", operation_id, reason)
        try:
            result = self._cancel(op, reason)
        except Conflict as refused:
            self._audit(caller, "cancel", op, reason, "refused", why=str(refused))
            raise
        self._audit(caller, "cancel", op, reason, "ok", status=result.status.value)
        return result

    def set_paused(self, caller: Caller, site_id: str, paused: bool, reason: str | None) -> Site:
        action = "pause" if paused else "resume"
        site = self.site(caller, site_id, action, reason)
        updated = self.deps.sites.set_paused(site_id, paused, reason if paused else None)
        self._record(caller, action, site_id, site_id, reason, "ok", {"was_paused": site.paused})
        return updated

    def redrive(
        self,
        caller: Caller,
        *,
        operation_id: str | None = None,
        where: DeadLetterFilter | None = None,
        dry_run: bool = False,
        new_input: tuple[str, str] | None = None,
        reason: str = "",
        action: str = "redrive",
    ) -> RedriveReport:
        """Put dead operations back in their lane in a new attempt epoch and remove their DLQ messages.

        By operation, or every dead operation matching `where` (by site, by error code, or all). Idempotent: an
        operation already redriven is skipped (it is no longer dead at the epoch that was selected), so running
        the same redrive twice redrives once. Superseded or cancelled operations are refused with the reason."""
        report = RedriveReport(dry_run=dry_run)
        if operation_id is not None:
            targets = [self._act(caller, action, operation_id, reason)]
        else:
            targets = sorted(
                self.dead_letters(caller, where or DeadLetterFilter(), limit=DLQ_SCAN), key=lambda op: op.created_at
            )  # oldest first: a site's work keeps its order
        if new_input is not None and len(targets) != 1:
            raise Conflict("--input-file replaces the input of one operation: name it with --operation")
        revived: dict[str, int] = {}
        for op in targets:
            report.selected.append(op.operation_id)
            why_not = _not_redrivable(op)
            if why_not is not None:
                (
                    report.skipped
                    if op.status in {Status.ACCEPTED, Status.QUEUED, Status.RUNNING, Status.SUCCEEDED}
                    else report.refused
                )[op.operation_id] = why_not
                if not dry_run:
                    outcome = "skipped" if op.operation_id in report.skipped else "refused"
                    self._audit(caller, action, op, reason, outcome, why=why_not)
                continue
            if dry_run:
                continue
            try:
                self._requeue(op, new_input)
            except LimitReached as full:
                limit = limit_of(limits_for(self.deps.settings, op), full.counter)
                why = str(backpressure(limit, full, self.deps.settings.default_operation_s))
                report.refused[op.operation_id] = why
                self._audit(caller, action, op, reason, "refused", why=why)
                continue
            except NotRunnable:
                report.skipped[op.operation_id] = "already redriven (no longer dead at the selected epoch)"
                continue
            revived[op.operation_id] = op.epoch
            report.redriven.append(op.operation_id)
            self._audit(
                caller,
                action,
                op,
                reason,
                "ok",
                epoch=op.epoch + 1,
                evidence=(op.evidence or {}).get("key"),
                input_replaced=new_input is not None,
            )
        if revived:
            report.dlq_messages_removed = self._remove_dead_letters(
                {lane_for(op.kind) for op in targets if op.operation_id in revived},
                lambda letter: revived.get(letter.attributes.get("operation_id", "")) == _epoch(letter),
            )
        obs.count("OperationsRedriven", len(report.redriven))
        return report

    def replay(
        self, caller: Caller, operation_id: str, new_input: tuple[str, str] | None = None, reason: str = ""
    ) -> RedriveReport:
        """A dead operation whose DLQ message is gone (expired, purged, or never sent because the worker died
        between the dead transition and the send): the same requeue as a redrive, by operation."""
        return self.redrive(caller, operation_id=operation_id, new_input=new_input, reason=reason, action="replay")

    # -- quotas ------------------------------------------------------------------------------------------------

    def limits(self, caller: Caller, principal: str, tenant: str | None = None) -> PrincipalLimits:
        """A principal's (or one of its tenants') limits in effect (its override, else the deployment's) and how
        much of them it uses now. A principal may read its own; operators any."""
        check_principal(principal)
        if tenant is not None:
            check_tenant(tenant)
        if not caller.may_act_for(principal):  # a principal is not a tenant's resource: its name is no secret
            raise Forbidden(f"{caller.identity} may only read its own limits")
        return self._limits(principal, tenant)

    def set_quota(
        self,
        caller: Caller,
        principal: str,
        *,
        max_outstanding: int | None,
        max_running: int | None,
        reason: str,
        tenant: str | None = None,
    ) -> PrincipalLimits:
        """Override a principal's limits, or one of its tenants' (operators only). Lowering one below what is
        already outstanding or running refuses new work until it drains; accepted work is never dropped."""
        tenant = _own(principal, tenant)
        self._operator_only(caller, "quota", principal, reason)
        if max_outstanding is None and max_running is None:
            raise InvalidInput("give --max-outstanding, --max-running or both", field="max_outstanding")
        for name, value in (("max_outstanding", max_outstanding), ("max_running", max_running)):
            if value is not None and not 1 <= value <= self.deps.settings.max_outstanding_global:
                raise InvalidInput(
                    f"{name} must be between 1 and the global limit "
                    f"{self.deps.settings.max_outstanding_global}, got {value}",
                    field=name,
                )
        before = self.deps.quotas.get(principal, tenant)
        quota = Quota(principal, max_outstanding, max_running, caller.identity, self.deps.clock.now(), reason, tenant)
        bounded = list(quota_bounds(principal, tenant, quota))
        held = {counter: reading.value for counter, reading in self.deps.operations.read_counters(bounded).items()}
        self.deps.quotas.put(quota, quota_bounds(principal, tenant, quota, held))
        detail: dict[str, Any] = {
            "max_outstanding": max_outstanding,
            "max_running": max_running,
            "was": None
            if before is None
            else {"max_outstanding": before.max_outstanding, "max_running": before.max_running},
        }
        if tenant is not None:
            detail["tenant"] = tenant
        self._record(caller, "quota", principal, None, reason, "ok", detail)
        return self._limits(principal, tenant)

    def clear_quota(self, caller: Caller, principal: str, reason: str, tenant: str | None = None) -> PrincipalLimits:
        """Back to the deployment's limits (operators only)."""
        tenant = _own(principal, tenant)
        self._operator_only(caller, "quota", principal, reason)
        existed = self.deps.quotas.clear(principal, tenant, list(quota_bounds(principal, tenant, None)))
        detail: dict[str, Any] = {"cleared": existed} | ({"tenant": tenant} if tenant is not None else {})
        self._record(caller, "quota", principal, None, reason, "ok" if existed else "skipped", detail)
        return self._limits(principal, tenant)

    def _limits(self, principal: str, tenant: str | None) -> PrincipalLimits:
        settings, quota = self.deps.settings, self.deps.quotas.get(principal, tenant)
        key = tenant or principal
        outstanding = (principal_group(principal, 0) if tenant is None else tenant_group(principal, key, 0)).shard_ids()
        running = {lane: running_group(lane, principal, key, 0).shard_ids() for lane in operation_lanes()}
        readings = self.deps.operations.read_counters([*outstanding, *(c for ids in running.values() for c in ids)])

        def total(ids: list[str]) -> int:
            return sum(readings[c].value for c in ids if c in readings)

        return PrincipalLimits(
            principal,
            tenant,
            quota,
            max_outstanding(settings, quota, tenant=tenant is not None),
            max_running(settings, quota),
            total(outstanding),
            {lane: total(ids) for lane, ids in running.items()},
        )

    def _operator_only(self, caller: Caller, action: str, target: str, reason: str) -> None:
        check_principal(target)
        if not NOT_BLANK_PATTERN.search(reason):
            raise InvalidInput("a reason is required (it goes into the audit trail)", field="reason")
        if not caller.operator:
            self._deny(
                caller, f"{caller.identity} may not change quotas: only operators may", action, target, None, reason
            )

    # -- internals -----------------------------------------------------------------------------------------------

    def _requeue(self, op: Operation, new_input: tuple[str, str] | None) -> Operation:
        d = self.deps
        revived = place(
            d.operations,
            op,
            limits_for(d.settings, op),
            share_group_for(d.settings, op),
            lambda slots, placement: d.operations.revive(op, d.clock.now(), slots, new_input, placement),
        )
        if revived.waiting_for:
            return revived  # its principal fills its share of the lane: sent as earlier work finishes
        # A crash here leaves an `accepted` row without a message: the reconciler's orphan sweep sends it.
        d.queue.send(QueueMessage.of(revived), revived.dedup_id, lane_for(revived.kind))
        d.operations.mark_queued(revived.operation_id, d.clock.now())
        return revived

    def _remove_dead_letters(self, lanes: Iterable[str], remove: Callable[[DeadLetter], bool]) -> int:
        removed = 0
        for lane in sorted(lanes):
            gone, _ = self.deps.queue.sweep_dead_letters(lane, remove)
            removed += len(gone)
        return removed

    def _cancel(self, op: Operation, reason: str) -> Operation:
        d = self.deps
        if op.status in {Status.ACCEPTED, Status.QUEUED}:
            try:
                d.operations.end(
                    op,
                    Status.CANCELLED,
                    d.clock.now(),
                    from_statuses=(Status.ACCEPTED, Status.QUEUED),
                    reason=reason or "cancelled",
                )
            except NotRunnable:
                pass  # it started (or was released) meanwhile: fall through to the cooperative cancel
            else:
                freed = freed_by(d.settings, op)
                if freed is not None:  # it held a place of its key's share: the oldest one waiting takes it
                    release(d.operations, d.queue, d.clock, *freed)
                return self._reload(op.operation_id)
        try:
            d.operations.request_cancel(op.operation_id, reason or "cancelled", d.clock.now())
        except NotRunnable:
            current = self._reload(op.operation_id)
            raise Conflict(f"operation {op.operation_id} is already {current.status.value}") from None
        return self._reload(op.operation_id)

    def authorize_action(self, caller: Caller, action: str, operation_id: str, reason: str = "") -> Operation:
        """The operation, if `caller` may perform `action` on it (a refusal is audited as denied)."""
        return self._act(caller, action, operation_id, reason)

    def _act(self, caller: Caller, action: str | None, operation_id: str, reason: str | None) -> Operation:
        op = self.deps.operations.get(operation_id)
        if op is None:
            raise NotFound(f"operation {operation_id} not found")
        self._authorize(
            caller, op.principal, f"operation {operation_id}", action=action, reason=reason, site_id=op.site_id
        )
        return op

    def _authorize(
        self,
        caller: Caller,
        owner: str,
        what: str,
        *,
        action: str | None = None,
        reason: str | None = None,
        site_id: str | None = None,
    ) -> None:
        if caller.may_act_for(owner):
            return
        self._deny(
            caller,
            f"{caller.identity} may not act on {what}: it belongs to another principal",
            action,
            what.split()[-1],
            site_id,
            reason,
            hidden=NotFound(f"{what} not found"),
        )

    def _deny(
        self,
        caller: Caller,
        message: str,
        action: str | None,
        target: str,
        site_id: str | None,
        reason: str | None,
        hidden: NotFound | None = None,
    ) -> NoReturn:
        """Refuse: `Forbidden`, or `hidden` (another tenant's resource looks missing); an action refused is audited
        as `denied` with the real reason."""
        if action is not None:
            self._record(caller, action, target, site_id, reason, "denied", {"why": message})
        obs.count("AuthorizationRefused")
        raise hidden or Forbidden(message)

    def _audit(
        self, caller: Caller, action: str, op: Operation, reason: str | None, outcome: str, **detail: Any
    ) -> None:
        self._record(
            caller,
            action,
            op.operation_id,
            op.site_id,
            reason,
            outcome,
            {"kind": op.kind.value, "epoch": op.epoch, **{k: v for k, v in detail.items() if v is not None}},
        )

    def _record(
        self,
        caller: Caller,
        action: str,
        target: str,
        site_id: str | None,
        reason: str | None,
        outcome: str,
        detail: dict[str, Any],
    ) -> None:
        self.deps.audit.record(
            AuditEntry(
                at=self.deps.clock.now(),
                actor=caller.identity,
                action=action,
                target=target,
                outcome=outcome,
                reason=reason or None,
                site_id=site_id,
                detail={"operator": caller.operator, **detail},
            )
        )

    def _reload(self, operation_id: str) -> Operation:
        op = self.deps.operations.get(operation_id)
        assert op is not None
        return op


def _epoch(letter: DeadLetter) -> int | None:
    try:
        return int(letter.attributes.get("epoch", ""))
    except ValueError:
        return None


def _not_redrivable(op: Operation) -> str | None:
    if op.status == Status.DEAD:
        return None
    if op.status == Status.SUPERSEDED:
        return (
            f"superseded by {op.superseded_by}: that operation does this one's work; a redrive would "
            "redo what was meant not to happen"
        )
    if op.status == Status.CANCELLED:
        return f"cancelled ({op.error.message if op.error else 'no reason'}): submit a new operation instead"
    if op.status == Status.SUCCEEDED:
        return "already succeeded" + (f" (after a redrive, epoch {op.epoch})" if op.epoch else "")
    return f"already redriven: {op.status.value} in epoch {op.epoch}"


def _own(principal: str, tenant: str | None) -> str | None:
    """A quota's tenant: None for the principal's own (naming the principal as its tenant is the same)."""
    if tenant is None or tenant == principal:
        return None
    check_tenant(tenant)
    return tenant
