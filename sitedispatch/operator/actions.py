"""Actions on accepted work: cancel an operation, pause or resume a site, delete an empty one."""

from __future__ import annotations

from sitedispatch import observability as obs
from sitedispatch.domain.errors import Conflict, NotRunnable
from sitedispatch.domain.events import OPERATOR
from sitedispatch.domain.model import (
    Operation,
    Site,
    Status,
)
from sitedispatch.flow.shares import freed_by, release
from sitedispatch.operator.access import Access, Caller
from sitedispatch.operator.dependencies import name_dependencies


class Actions(Access):
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

    def set_paused(self, caller: Caller, site_id: str, paused: bool, reason: str | None) -> Site:
        action = "pause" if paused else "resume"
        site = self.site(caller, site_id, action, reason)
        by = OPERATOR if caller.operator else caller.identity  # an event names no operator's identity
        updated = self.deps.sites.set_paused(site_id, paused, reason if paused else None, by, self.deps.clock.now())
        woken = 0 if paused else self._wake_held(site_id)
        self._record(caller, action, site_id, site_id, reason, "ok", {"was_paused": site.paused, "woken": woken})
        return updated

    def delete_site(self, caller: Caller, site_id: str, reason: str) -> Site:
        """Delete a site that has nothing: never committed, nothing queued or running (a registration mistyped, or
        never used). Its id is free again; operations that ended on it keep their rows. Audited either way."""
        site = self.site(caller, site_id, "delete", reason)
        if not self.deps.sites.delete_empty(site_id):
            why = (
                f"site {site_id} has {site.head_version} commits: its history is kept (pause it instead)"
                if site.head_version
                else f"site {site_id} has work queued or running: cancel it first (ops list --site {site_id})"
            )
            self._record(caller, "delete", site_id, site_id, reason, "refused", {"why": why})
            raise Conflict(why)
        if site.dependencies:  # no longer among their sites
            name_dependencies(self.deps, site, ())
        self._record(caller, "delete", site_id, site_id, reason, "ok", {"principal": site.principal})
        return site

    def _wake_held(self, site_id: str) -> int:
        """The deliveries the pause deferred, made visible now (a worker that finds the site resumed before it held
        its own wakes it itself). A failure is logged: what it leaves comes back when its deferral ends."""
        d = self.deps
        try:
            held = d.sites.take_held(site_id)
            lanes = sorted({h.lane for h in held})
            return sum(d.queue.wake(lane, [h.receipt for h in held if h.lane == lane]) for lane in lanes)
        except Exception as exc:
            obs.logger.warning(
                "could not wake the deliveries the pause held", extra={"site_id": site_id, "error": repr(exc)}
            )
            return 0
