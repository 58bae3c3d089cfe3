"""Who may see and do what, decided in one place, and every action audited.

A caller is a principal (it sees and acts only on its own sites, operations, dead letters, audit entries and status
rows), an operator (all of them) or a reader (sees all of them, acts on none: every request but a read is refused,
audited, by the API). Another principal's site or operation is `NotFound`, word for word what a
missing one gets, so ids and site names do not leak between tenants; what only operators may do (quotas) is
`Forbidden`. Every action (cancel, pause, resume, redrive, replay, quota) writes an audit entry with who, what,
target, reason, time and outcome, including the ones refused."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any, NoReturn

from sitedispatch import observability as obs
from sitedispatch.domain.errors import Forbidden, InvalidInput, NotFound
from sitedispatch.domain.model import (
    NOT_BLANK_PATTERN,
    AuditEntry,
    Operation,
    Site,
    check_principal,
)
from sitedispatch.domain.ports import (
    AuditLog,
    BlobStore,
    Clock,
    CommitStore,
    DependencyStore,
    OperationQueue,
    OperationStore,
    PublicationStore,
    QuotaStore,
    SiteStore,
)
from sitedispatch.domain.settings import Settings


def _matches(identity: str, patterns: str) -> bool:
    return any(fnmatch.fnmatchcase(identity, p.strip()) for p in patterns.split(",") if p.strip())


READS = frozenset({"GET", "HEAD"})


@dataclass(frozen=True)
class Caller:
    identity: str  # the --as name locally, the STS caller ARN on AWS
    operator: bool
    reader: bool = False  # reads what an operator reads; may do nothing (named in both lists: a reader)

    @classmethod
    def of(cls, identity: str, settings: Settings) -> Caller:
        reader = _matches(identity, settings.readers)
        return cls(identity, not reader and _matches(identity, settings.operators), reader)

    @property
    def sees_all(self) -> bool:
        return self.operator or self.reader

    def may_see(self, principal: str) -> bool:
        return self.sees_all or self.identity == principal

    def may_act_for(self, principal: str) -> bool:
        return self.operator or self.identity == principal


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
    dependencies: DependencyStore


class Access:
    def __init__(self, deps: ControlDeps) -> None:
        self.deps = deps

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

    def site(self, caller: Caller, site_id: str, action: str | None = None, reason: str | None = None) -> Site:
        """The site, if `caller` may see it (or perform `action` on it: a refusal is then audited as denied)."""
        site = self.deps.sites.get(site_id)
        if site is None:
            raise NotFound(f"site {site_id} not found")
        self._authorize(caller, site.principal, f"site {site_id}", action=action, reason=reason, site_id=site_id)
        return site

    @staticmethod
    def visible_principal(caller: Caller) -> str | None:
        """Whose rows a status report may show the caller: its own, or (None) everyone's for an operator."""
        return None if caller.sees_all else caller.identity

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
        if caller.may_act_for(owner) if action is not None else caller.may_see(owner):
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
        obs.count(obs.Metric.AuthorizationRefused)
        raise hidden or Forbidden(message)

    def refuse_reader(self, caller: Caller, method: str, path: str) -> None:
        """A reader may read: any other request is refused (403) and audited as denied, whatever it would do."""
        if caller.reader and method not in READS:
            self._deny(
                caller, f"{caller.identity} may only read: it is a reader", "write", f"{method} {path}", None, None
            )

    def _operator_only(self, caller: Caller, action: str, target: str, reason: str) -> None:
        check_principal(target)
        if not NOT_BLANK_PATTERN.search(reason):
            raise InvalidInput("a reason is required (it goes into the audit trail)", field="reason")
        if not caller.operator:
            self._deny(
                caller, f"{caller.identity} may not change quotas: only operators may", action, target, None, reason
            )

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
                detail={"operator": caller.operator, **({"reader": True} if caller.reader else {}), **detail},
            )
        )

    def _reload(self, operation_id: str) -> Operation:
        op = self.deps.operations.get(operation_id)
        assert op is not None
        return op
