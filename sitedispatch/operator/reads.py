"""What a caller reads: its operations, sites, their history and live routes, dead letters with their evidence, and
the audit log."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sitedispatch.domain.errors import Forbidden, NotFound
from sitedispatch.domain.model import (
    AuditEntry,
    Commit,
    Operation,
    Publication,
    Site,
    Status,
)
from sitedispatch.domain.paging import Page
from sitedispatch.operator.access import Access, Caller

DLQ_SCAN = 10_000
PAGE_READS = 150  # rows a page of operations or sites reads at least (a page of `limit` more reads `limit`)


@dataclass(frozen=True)
class DeadLetterFilter:
    site_id: str | None = None
    kind: str | None = None
    error_code: str | None = None
    older_than_s: float | None = None
    newer_than_s: float | None = None

    @property
    def class_only(self) -> str | None:
        """The error class, when it is all this filter selects by."""
        others = (self.site_id, self.kind, self.older_than_s, self.newer_than_s)
        return self.error_code if all(value is None for value in others) else None

    def matches(self, op: Operation, now: float) -> bool:
        age = now - (op.finished_at or op.updated_at)
        return (
            (self.site_id is None or op.site_id == self.site_id)
            and (self.kind is None or op.kind.value == self.kind)
            and (self.error_code is None or op.error_code == self.error_code)
            and (self.older_than_s is None or age >= self.older_than_s)
            and (self.newer_than_s is None or age <= self.newer_than_s)
        )


@dataclass(frozen=True)
class OperationFilter:
    kind: str | None = None
    principal: str | None = None
    tenant: str | None = None
    error_code: str | None = None
    newer_than_s: float | None = None  # created at most this long ago

    def matches(self, op: Operation, now: float) -> bool:
        return (
            (self.kind is None or op.kind.value == self.kind)
            and (self.principal is None or op.principal == self.principal)
            and (self.tenant is None or op.tenant == self.tenant)
            and (self.error_code is None or op.error_code == self.error_code)
            and (self.newer_than_s is None or now - op.created_at <= self.newer_than_s)
        )


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


class Reads(Access):
    def operation(self, caller: Caller, operation_id: str) -> Operation:
        return self._act(caller, None, operation_id, None)

    def operations(
        self,
        caller: Caller,
        *,
        site_id: str | None = None,
        status: Status | None = None,
        where: OperationFilter = OperationFilter(),
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[Operation]:
        """A page of the operations the caller may see that match: a site's newest first by creation, a status's
        newest first by last update, else in the table's order. Each page reads at most `limit` or PAGE_READS rows,
        whichever is more, so a page may be short while its cursor goes on (a filter the rows do not match much)."""
        if site_id is not None:
            self.site(caller, site_id)
        now = self.deps.clock.now()
        return self.deps.operations.page(
            site_id=site_id,
            status=status,
            accept=lambda op: caller.may_see(op.principal) and where.matches(op, now),
            cursor=cursor,
            limit=limit,
            reads=max(limit, PAGE_READS),
        )

    def sites(
        self,
        caller: Caller,
        *,
        search: str | None = None,
        paused: bool | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[Site]:
        """A page of the sites the caller may see whose id contains `search`, paused or not, in the table's order;
        each page reads at most `limit` or PAGE_READS rows (a page may be short while its cursor goes on)."""
        return self.deps.sites.page(
            accept=lambda site: (
                caller.may_see(site.principal)
                and (search is None or search in site.site_id)
                and (paused is None or site.paused == paused)
            ),
            cursor=cursor,
            limit=limit,
            reads=max(limit, PAGE_READS),
        )

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
        if not caller.sees_all:
            if actor not in (None, caller.identity):
                raise Forbidden(f"{caller.identity} may only read its own audit entries")
            actor = caller.identity
        now = self.deps.clock.now()
        return self.deps.audit.list(since, now, actor=actor, action=action, target=target, site_id=site_id, limit=limit)

    def dead_letters(
        self, caller: Caller, where: DeadLetterFilter = DeadLetterFilter(), limit: int = 100
    ) -> list[Operation]:
        """Dead operations (the DynamoDB record is the index of the DLQ), newest first, filtered."""
        now = self.deps.clock.now()

        def accept(op: Operation) -> bool:
            return caller.may_see(op.principal) and where.matches(op, now)

        if where.error_code is not None and where.site_id is None:  # a class: its own index, not every dead one
            of_class = [op for op in self.deps.operations.dead_of_class(where.error_code, DLQ_SCAN) if accept(op)]
            return sorted(of_class, key=lambda op: (-op.updated_at, op.operation_id))[:limit]
        return self.deps.operations.page(
            site_id=where.site_id, status=Status.DEAD, accept=accept, limit=limit, reads=DLQ_SCAN
        ).items

    def evidence(self, caller: Caller, operation_id: str) -> dict[str, Any]:
        op = self.operation(caller, operation_id)
        if not op.evidence:
            state = f"{op.status.value}" + (f" (epoch {op.epoch})" if op.epoch else "")
            raise NotFound(f"operation {operation_id} has no dead-letter evidence: it is {state}")
        return dict(json.loads(self.deps.blobs.get(op.evidence["key"])))
