"""DynamoDB implementations of the operation, site (lease) and commit stores.

Every guard is a condition expression evaluated by DynamoDB; ConditionalCheckFailed is mapped to a typed domain error.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from pynamodb.exceptions import DeleteError, DoesNotExist, PutError, TransactWriteError, UpdateError
from pynamodb.transactions import TransactWrite

from ..admission import quota_key
from ..errors import (
    AlreadyCommitted,
    AlreadyExists,
    Conflict,
    LeaseHeld,
    LimitReached,
    NotFound,
    NotRunnable,
    StaleFence,
)
from ..model import (
    REFERENCE_DRIVER,
    RUNNABLE,
    AuditEntry,
    Commit,
    ErrorInfo,
    Kind,
    Lease,
    Operation,
    Publication,
    PublicationStatus,
    Quota,
    Site,
    SiteConnection,
    Status,
)
from ..ports import PreparedCommit, Slot, checked_registration
from ..recent import Bucket
from .tables import DUE_PARTITION, Models

CONDITION_FAILED = "ConditionalCheckFailedException"
RUNNABLE_VALUES = tuple(s.value for s in RUNNABLE)


def _under_limit(C: Any, default: int) -> Any:
    """The counter is below its maximum: the one kept on the item (an operator's quota) or, without one, `default`
    (the deployment's). Read in the same conditional write, so a quota costs no read on the hot paths."""
    def below(bound: Any) -> Any:
        return C.value.does_not_exist() | (C.value < bound)

    return (C.maximum.does_not_exist() & below(default)) | (C.maximum.exists() & below(C.maximum))


def _condition_failed(exc: PutError | UpdateError | DeleteError) -> bool:
    return exc.cause_response_code == CONDITION_FAILED


MAX_KEY_BYTES = 1024  # DynamoDB's limit for a sort key (2048 for a partition key); ours are far shorter


def _get_item(model: Any, hash_key: str, range_key: Any = None) -> Any:
    """The item, or None when there is none, including when the key could not name one (DynamoDB refuses an empty
    or oversized key value with a ValidationException: for a reader that only means "no such item")."""
    if not hash_key or len(hash_key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        return None
    try:
        return model.get(hash_key, range_key, consistent_read=True)
    except DoesNotExist:
        return None


def _error_dict(error: ErrorInfo) -> dict[str, Any]:
    return {"error_class": error.error_class, "code": error.code, "message": error.message,
            "retryable": error.retryable}


def _to_operation(item: Any) -> Operation:
    error = item.error
    return Operation(
        operation_id=item.operation_id, site_id=item.site_id, principal=item.principal, kind=Kind(item.kind),
        status=Status(item.status), input_key=item.input_key, input_digest=item.input_digest,
        idempotency_key=item.idempotency_key, created_at=float(item.created_at), updated_at=float(item.updated_at),
        attempt=int(item.attempt or 0), attempt_budget=int(item.attempt_budget or 0), epoch=int(item.epoch or 0),
        fence=None if item.fence is None else int(item.fence), queued_at=item.queued_at,
        started_at=item.started_at, finished_at=item.finished_at, not_before=item.not_before,
        error=ErrorInfo(error["error_class"], error["code"], error["message"], error["retryable"]) if error else None,
        result=item.result or {}, cancel_requested=item.cancel_requested, superseded_by=item.superseded_by,
        running_slot=item.running_slot, evidence=item.evidence,
    )


def _to_site(item: Any) -> Site:
    return Site(
        site_id=item.site_id, principal=item.principal, created_at=float(item.created_at),
        head_version=int(item.head_version or 0), head_revision=item.head_revision, fence=int(item.fence or 0),
        lease_owner=item.lease_owner, lease_expires_at=item.lease_expires_at, paused=bool(item.paused),
        pause_reason=item.pause_reason, consecutive_failures=int(item.consecutive_failures or 0),
        avg_operation_s=None if item.avg_operation_s is None else float(item.avg_operation_s),
        live_seq=int(item.live_seq or 0), live_revision=item.live_revision, live_at=item.live_at,
        next_due_at=None if item.next_due_at is None else float(item.next_due_at),
        connection=SiteConnection(item.driver or REFERENCE_DRIVER, item.endpoint, item.credential_ref),
    )


def _to_publication(item: Any) -> Publication:
    return Publication(
        site_id=item.site_id, seq=int(item.seq), revision_id=item.revision_id, operation_id=item.operation_id,
        status=PublicationStatus(item.status), created_at=float(item.created_at),
        total_chunks=None if item.total_chunks is None else int(item.total_chunks),
        done_chunks=frozenset(int(n) for n in (item.done_chunks or ())), finished_at=item.finished_at,
    )


def _to_commit(item: Any) -> Commit:
    return Commit(
        operation_id=item.operation_id, site_id=item.site_id, kind=Kind(item.kind), version=int(item.version),
        revision_id=item.revision_id, parent_revision=item.parent_revision, fence=int(item.fence),
        committed_at=float(item.committed_at), summary=item.summary or {},
    )


def _failed_positions(exc: TransactWriteError) -> set[int]:
    """Positions of the items whose condition failed. pynamodb sends a transaction's items grouped by kind, in this
    order: condition checks, deletes, puts, updates; positions count in that order, not in the order of the calls."""
    return {n for n, reason in enumerate(exc.cancellation_reasons)
            if reason is not None and reason.code == "ConditionalCheckFailed"}


def _transact(connection: Any) -> TransactWrite:
    return TransactWrite(connection=connection)


def _decrement(tx: TransactWrite, counter_model: Any, counters: Sequence[str], now: float) -> None:
    for counter in counters:
        tx.update(counter_model(counter), actions=[counter_model.value.add(-1), counter_model.changed_at.set(now)])


class DynamoOperationStore:
    def __init__(self, models: Models) -> None:
        self.M: Any = models.Operation
        self.C: Any = models.Counter

    def create(self, op: Operation, limits: Sequence[tuple[str, int]] = ()) -> None:
        M, C = self.M, self.C
        item = M(op.operation_id, site_id=op.site_id, principal=op.principal, kind=op.kind.value,
                 status=op.status.value, input_key=op.input_key, input_digest=op.input_digest,
                 idempotency_key=op.idempotency_key, created_at=op.created_at, updated_at=op.updated_at,
                 attempt=op.attempt, attempt_budget=op.attempt_budget, epoch=op.epoch)
        try:
            with _transact(M._get_connection().connection) as tx:
                for counter, maximum in limits:
                    tx.update(C(counter), actions=[C.value.add(1), C.changed_at.set(op.created_at)],
                              condition=_under_limit(C, maximum))
                tx.save(item, condition=M.operation_id.does_not_exist())
        except TransactWriteError as exc:
            # pynamodb sends puts before updates: [operation row, counter 1, counter 2, ...]
            failed = _failed_positions(exc)
            if 0 in failed:
                raise AlreadyExists(op.operation_id) from exc
            for position, (counter, maximum) in enumerate(limits, start=1):
                if position in failed:
                    raise self._limit_reached(counter, maximum) from exc
            raise

    def counter(self, counter_id: str) -> int:
        try:
            return int(self.C.get(counter_id, consistent_read=True).value or 0)
        except DoesNotExist:
            return 0

    def _limit_reached(self, counter_id: str, default: int) -> LimitReached:
        try:
            item = self.C.get(counter_id, consistent_read=True)
        except DoesNotExist:
            return LimitReached(counter_id, 0, default)
        return LimitReached(counter_id, int(item.value or 0),
                            default if item.maximum is None else int(item.maximum))

    def counters(self, prefix: str = "") -> dict[str, int]:
        return {item.counter_id: int(item.value or 0) for item in self.C.scan()
                if item.counter_id.startswith(prefix)}

    def repair_counter(self, counter_id: str, observed: int, value: int, quiet_since: float, now: float) -> bool:
        C = self.C
        unchanged = (C.value == observed) if observed else (C.value.does_not_exist() | (C.value == 0))
        try:
            C(counter_id).update(actions=[C.value.set(value), C.changed_at.set(now)],
                                 condition=unchanged & (C.changed_at.does_not_exist() | (C.changed_at <= quiet_since)))
            return True
        except UpdateError as exc:
            if _condition_failed(exc):
                return False
            raise

    def get(self, operation_id: str) -> Operation | None:
        item = _get_item(self.M, operation_id)
        return None if item is None else _to_operation(item)

    def mark_queued(self, operation_id: str, now: float) -> bool:
        M = self.M
        try:
            M(operation_id).update(
                actions=[M.status.set(Status.QUEUED.value), M.queued_at.set(now), M.updated_at.set(now)],
                condition=M.status == Status.ACCEPTED.value,
            )
            return True
        except UpdateError as exc:
            if _condition_failed(exc):
                return False
            raise

    def start_attempt(self, operation_id: str, fence: int, now: float, slot: Slot | None = None,
                      current: Operation | None = None) -> Operation:
        M = self.M
        actions = [M.status.set(Status.RUNNING.value), M.attempt.add(1), M.fence.set(fence), M.started_at.set(now),
                   M.updated_at.set(now), M.not_before.remove()]
        # An attempt under an older fence never overwrites one under a newer fence (two deliveries at once).
        runnable = (M.status.is_in(*RUNNABLE_VALUES) & (M.attempt < M.attempt_budget)
                    & (M.fence.does_not_exist() | (M.fence < fence)))
        if slot is not None:
            try:
                with _transact(M._get_connection().connection) as tx:
                    tx.update(M(operation_id), actions=[*actions, M.running_slot.set(slot.counter)],
                              condition=runnable & M.running_slot.does_not_exist())
                    tx.update(self.C(slot.counter), actions=[self.C.value.add(1), self.C.changed_at.set(now)],
                              condition=_under_limit(self.C, slot.maximum))
            except TransactWriteError as exc:
                failed = _failed_positions(exc)  # [operation update, counter update]
                if 0 not in failed and 1 in failed:
                    raise self._limit_reached(slot.counter, slot.maximum) from exc
                if 0 not in failed:
                    raise
                # Not runnable, or the row already holds a slot (an earlier attempt died): keep that slot.
                runnable &= M.running_slot.exists()
            else:
                if current is not None:  # the row as it was, plus what this transaction set: no extra read
                    return replace(current, status=Status.RUNNING, attempt=current.attempt + 1, fence=fence,
                                   started_at=now, updated_at=now, not_before=None, running_slot=slot.counter)
                op = self.get(operation_id)
                assert op is not None
                return op
        item = M(operation_id)
        try:
            item.update(actions=actions, condition=runnable)
        except UpdateError as exc:
            if _condition_failed(exc):
                raise NotRunnable(operation_id) from exc
            raise
        return _to_operation(item)

    def schedule_retry(self, operation_id: str, fence: int, error: ErrorInfo, not_before: float, now: float,
                       slot: str | None = None) -> None:
        M = self.M
        actions = [M.status.set(Status.QUEUED.value), M.error.set(_error_dict(error)), M.not_before.set(not_before),
                   M.updated_at.set(now)]
        try:
            self._transition(operation_id, actions, (M.status == Status.RUNNING.value) & (M.fence == fence), (),
                             slot, now)
        except NotRunnable as exc:
            raise StaleFence(operation_id) from exc

    def mark_dead(self, operation_id: str, fence: int | None, error: ErrorInfo, now: float,
                  counters: Sequence[str] = (), slot: str | None = None,
                  evidence: dict[str, Any] | None = None) -> None:
        M = self.M
        condition = M.status.is_in(*RUNNABLE_VALUES)
        if fence is not None:
            condition &= M.fence == fence
        actions = [M.status.set(Status.DEAD.value), M.error.set(_error_dict(error))]
        if evidence is not None:
            actions.append(M.evidence.set(evidence))
        self._end(operation_id, actions, condition, counters, now, slot)

    def end(self, operation_id: str, status: Status, now: float, counters: Sequence[str], *,
            from_statuses: Sequence[Status], reason: str = "", superseded_by: str | None = None,
            slot: str | None = None) -> None:
        """-> cancelled or superseded, from one of `from_statuses` only, releasing the operation's counters."""
        M = self.M
        actions = [M.status.set(status.value),
                   M.error.set({"error_class": status.value, "code": status.value, "message": reason,
                                "retryable": False})]
        if superseded_by:
            actions.append(M.superseded_by.set(superseded_by))
        self._end(operation_id, actions, M.status.is_in(*(s.value for s in from_statuses)), counters, now, slot)

    def _end(self, operation_id: str, actions: list[Any], condition: Any, counters: Sequence[str], now: float,
             slot: str | None) -> None:
        M = self.M
        self._transition(operation_id, [*actions, M.finished_at.set(now), M.updated_at.set(now)], condition,
                         counters, slot, now)

    def _transition(self, operation_id: str, actions: list[Any], condition: Any, counters: Sequence[str],
                    slot: str | None, now: float) -> None:
        """Update the operation row and release `counters` and its running `slot` in one transaction. The row must
        hold exactly the slot given (none when None), so a slot is released once, by whoever holds it."""
        M = self.M
        if slot is not None:
            actions = [*actions, M.running_slot.remove()]
            condition &= M.running_slot == slot
            counters = (*counters, slot)
        else:
            condition &= M.running_slot.does_not_exist()
        if not counters:
            try:
                M(operation_id).update(actions=actions, condition=condition)
            except UpdateError as exc:
                if _condition_failed(exc):
                    raise NotRunnable(operation_id) from exc
                raise
            return
        try:
            with _transact(M._get_connection().connection) as tx:
                tx.update(M(operation_id), actions=actions, condition=condition)
                _decrement(tx, self.C, counters, now)
        except TransactWriteError as exc:
            if 0 in _failed_positions(exc):  # [operation update, counter updates...]
                raise NotRunnable(operation_id) from exc
            raise

    def revive(self, operation_id: str, epoch: int, now: float, limits: Sequence[tuple[str, int]],
               new_input: tuple[str, str] | None = None) -> Operation:
        M, C = self.M, self.C
        actions = [M.status.set(Status.ACCEPTED.value), M.epoch.set(epoch + 1), M.attempt.set(0),
                   M.updated_at.set(now), M.error.remove(), M.evidence.remove(), M.finished_at.remove(),
                   M.not_before.remove(), M.queued_at.remove(), M.started_at.remove()]
        if new_input is not None:
            actions += [M.input_key.set(new_input[0]), M.input_digest.set(new_input[1])]
        try:
            with _transact(M._get_connection().connection) as tx:
                for counter, maximum in limits:
                    tx.update(C(counter), actions=[C.value.add(1), C.changed_at.set(now)],
                              condition=_under_limit(C, maximum))
                tx.update(M(operation_id), actions=actions,
                          condition=(M.status == Status.DEAD.value) & (M.epoch == epoch))
        except TransactWriteError as exc:
            failed = _failed_positions(exc)  # updates in call order: [counters..., operation]
            if len(limits) in failed:
                raise NotRunnable(operation_id) from exc
            for position, (counter, maximum) in enumerate(limits):
                if position in failed:
                    raise self._limit_reached(counter, maximum) from exc
            raise
        op = self.get(operation_id)
        assert op is not None
        return op

    def request_cancel(self, operation_id: str, reason: str, now: float) -> None:
        """Mark a running operation so that its commit is refused (the commit checks this attribute)."""
        M = self.M
        try:
            M(operation_id).update(actions=[M.cancel_requested.set(reason or "cancelled"), M.updated_at.set(now)],
                                   condition=M.status.is_in(*RUNNABLE_VALUES))
        except UpdateError as exc:
            if _condition_failed(exc):
                raise NotRunnable(operation_id) from exc
            raise

    def list(self, *, site_id: str | None = None, status: Status | None = None, limit: int = 100) -> list[Operation]:
        M = self.M
        if site_id is not None:
            condition = M.status == status.value if status else None
            items = M.by_site.query(site_id, filter_condition=condition, scan_index_forward=False)
        elif status is not None:
            items = M.by_status.query(status.value, scan_index_forward=False)
        else:
            items = M.scan()
        out = []
        for item in items:
            out.append(_to_operation(item))
            if len(out) >= limit:
                break
        if site_id is None and status is None:
            out.sort(key=lambda op: op.created_at, reverse=True)
        return out


class DynamoSiteStore:
    def __init__(self, models: Models) -> None:
        self.M: Any = models.Site

    def get(self, site_id: str) -> Site | None:
        item = _get_item(self.M, site_id)
        return None if item is None else _to_site(item)

    def register(self, site_id: str, principal: str, now: float, connection: SiteConnection | None = None
                 ) -> Site:
        M = self.M
        given = connection or SiteConnection()
        try:
            M(site_id, principal=principal, created_at=now, driver=given.driver, endpoint=given.endpoint,
              credential_ref=given.credential_ref).save(condition=M.site_id.does_not_exist())
        except PutError as exc:
            if not _condition_failed(exc):
                raise
        site = self.get(site_id)
        assert site is not None
        return checked_registration(site, principal, connection)

    def claim_lease(self, site_id: str, operation_id: str, now: float, duration: float) -> Lease:
        M = self.M
        item = M(site_id)
        try:
            item.update(
                actions=[M.fence.add(1), M.lease_owner.set(operation_id), M.lease_expires_at.set(now + duration)],
                condition=M.site_id.exists() & (
                    M.lease_owner.does_not_exist() | (M.lease_owner == operation_id) | (M.lease_expires_at <= now)
                ),
            )
        except UpdateError as exc:
            if _condition_failed(exc):
                current = self.get(site_id)
                raise LeaseHeld(site_id, current.lease_owner if current else None,
                                float(current.lease_expires_at or now) if current else now) from exc
            raise
        return Lease(site_id, operation_id, int(item.fence), float(item.lease_expires_at))

    def extend_lease(self, lease: Lease, now: float, duration: float) -> Lease:
        M = self.M
        try:
            M(lease.site_id).update(
                actions=[M.lease_expires_at.set(now + duration)],
                condition=(M.fence == lease.fence) & (M.lease_owner == lease.owner),
            )
        except UpdateError as exc:
            if _condition_failed(exc):
                raise StaleFence(f"site {lease.site_id}: fence {lease.fence} is no longer current") from exc
            raise
        return Lease(lease.site_id, lease.owner, lease.fence, now + duration)

    def release_lease(self, lease: Lease) -> bool:
        M = self.M
        try:
            M(lease.site_id).update(actions=[M.lease_owner.remove(), M.lease_expires_at.remove()],
                                    condition=(M.fence == lease.fence) & (M.lease_owner == lease.owner))
            return True
        except UpdateError as exc:
            if _condition_failed(exc):
                return False
            raise

    def due(self, now: float, limit: int = 1000) -> list[Site]:
        M = self.M
        return [_to_site(item) for item in M.by_due.query(DUE_PARTITION, M.next_due_at <= now, limit=limit)]

    def list(self, limit: int = 100) -> list[Site]:
        sites = [_to_site(item) for item in self.M.scan(limit=limit)]
        return sorted(sites, key=lambda s: s.site_id)

    def set_paused(self, site_id: str, paused: bool, reason: str | None) -> Site:
        M = self.M
        actions = [M.paused.set(paused), M.pause_reason.set(reason) if paused else M.pause_reason.remove()]
        if not paused:
            actions.append(M.consecutive_failures.set(0))
        item = M(site_id)
        try:
            item.update(actions=actions, condition=M.site_id.exists())
        except UpdateError as exc:
            if _condition_failed(exc):
                raise NotFound(f"site {site_id} not found") from exc
            raise
        return _to_site(item)

    def record_failure(self, site_id: str, pause_at: int, reason: str) -> Site:
        """Count a failed attempt; the one that reaches `pause_at` in a row pauses the site (conditional, once)."""
        M = self.M
        item = M(site_id)
        item.update(actions=[M.consecutive_failures.add(1)], condition=M.site_id.exists())
        if int(item.consecutive_failures) >= pause_at and not item.paused:
            with contextlib.suppress(UpdateError):
                item.update(actions=[M.paused.set(True), M.pause_reason.set(reason)],
                            condition=M.paused == False)  # noqa: E712 - a DynamoDB condition, not a comparison
        return _to_site(item)

    def promote(self, site_id: str, seq: int, revision_id: str, now: float) -> bool:
        M = self.M
        try:
            M(site_id).update(
                actions=[M.live_seq.set(seq), M.live_revision.set(revision_id), M.live_at.set(now)],
                condition=M.site_id.exists() & (M.live_seq.does_not_exist() | (M.live_seq < seq)),
            )
            return True
        except UpdateError as exc:
            if _condition_failed(exc):
                return False
            raise


class DynamoCommitStore:
    """The commit transaction spans the three tables: record, head (fenced) + release, operation status."""

    def __init__(self, models: Models) -> None:
        self.models = models

    def commit(self, prepared: PreparedCommit, now: float) -> None:
        C, S, Op, P = self.models.Commit, self.models.Site, self.models.Operation, self.models.Publication
        c, lease = prepared.commit, prepared.lease
        record = C(c.operation_id, site_id=c.site_id, kind=c.kind.value, version=c.version,
                   revision_id=c.revision_id, parent_revision=c.parent_revision, fence=c.fence,
                   committed_at=c.committed_at, summary=c.summary)
        connection = C._get_connection().connection
        try:
            with TransactWrite(connection=connection) as tx:
                tx.save(record, condition=C.operation_id.does_not_exist())
                site_actions = [S.head_version.set(c.version), S.head_revision.set(c.revision_id),
                                S.lease_owner.remove(), S.lease_expires_at.remove(), S.consecutive_failures.set(0)]
                if prepared.avg_operation_s is not None:
                    site_actions.append(S.avg_operation_s.set(prepared.avg_operation_s))
                if prepared.next_due_at is not None:
                    site_actions += [S.next_due_at.set(prepared.next_due_at), S.due.set(DUE_PARTITION)]
                else:
                    site_actions += [S.next_due_at.remove(), S.due.remove()]
                tx.update(
                    S(c.site_id),
                    actions=site_actions,
                    condition=(S.fence == lease.fence) & (S.lease_owner == lease.owner)
                    & (S.head_version == prepared.expected_version),
                )
                op_actions = [Op.status.set(Status.SUCCEEDED.value), Op.result.set(prepared.result),
                              Op.finished_at.set(now), Op.updated_at.set(now), Op.error.remove()]
                op_condition = ((Op.status == Status.RUNNING.value) & (Op.fence == lease.fence)
                                & Op.cancel_requested.does_not_exist())
                if prepared.slot is not None:
                    op_actions.append(Op.running_slot.remove())
                    op_condition &= Op.running_slot == prepared.slot
                tx.update(Op(c.operation_id), actions=op_actions, condition=op_condition)
                if prepared.publication is not None:
                    pub = prepared.publication
                    tx.save(P(pub.site_id, pub.seq, revision_id=pub.revision_id, operation_id=pub.operation_id,
                              status=pub.status.value, created_at=pub.created_at),
                            condition=P.seq.does_not_exist())
                _decrement(tx, self.models.Counter,
                           (*prepared.counters, *((prepared.slot,) if prepared.slot else ())), now)
        except TransactWriteError as exc:
            # puts, then updates: [commit record, (publication), site, operation, counters...]
            failed = _failed_positions(exc)
            has_publication = int(prepared.publication is not None)
            if 0 in failed:
                raise AlreadyCommitted(c.operation_id) from exc
            if 1 + has_publication in failed:
                raise StaleFence(f"site {c.site_id}: fence {lease.fence} is no longer current") from exc
            if 2 + has_publication in failed:
                raise NotRunnable(c.operation_id) from exc
            if has_publication and 1 in failed:
                # Sequences are head versions and the head moved under our fence: cannot happen unless the
                # publications table was written by hand. Refuse loudly rather than overwrite.
                raise Conflict(f"publication {c.site_id}#{c.version} already exists") from exc
            raise

    def get(self, operation_id: str) -> Commit | None:
        item = _get_item(self.models.Commit, operation_id)
        return None if item is None else _to_commit(item)

    def history(self, site_id: str, limit: int = 100) -> list[Commit]:
        items = self.models.Commit.by_site.query(site_id, scan_index_forward=False, limit=limit)
        return [_to_commit(item) for item in items]


class DynamoQuotaStore:
    """Principals' quota overrides: the record (`quota#PRINCIPAL`, for reading and audit) and the maximum kept on each
    counter it bounds (what the admission and running-slot conditions read), written in one transaction."""

    def __init__(self, models: Models) -> None:
        self.C: Any = models.Counter

    def get(self, principal: str) -> Quota | None:
        item = _get_item(self.C, quota_key(principal))
        if item is None:
            return None
        return Quota(principal, None if item.max_outstanding is None else int(item.max_outstanding),
                     None if item.max_running is None else int(item.max_running), item.updated_by or "",
                     float(item.changed_at or 0.0), item.reason)

    def put(self, quota: Quota, bounds: Mapping[str, int | None]) -> None:
        C = self.C
        record = C(quota_key(quota.principal), max_outstanding=quota.max_outstanding, max_running=quota.max_running,
                   updated_by=quota.updated_by, changed_at=quota.updated_at, reason=quota.reason, value=0)
        with _transact(C._get_connection().connection) as tx:
            tx.save(record)
            for counter, maximum in bounds.items():
                tx.update(C(counter), actions=[C.maximum.remove() if maximum is None else C.maximum.set(maximum)])

    def clear(self, principal: str, bounds: Sequence[str]) -> bool:
        C = self.C
        try:
            with _transact(C._get_connection().connection) as tx:
                tx.delete(C(quota_key(principal)), condition=C.counter_id.exists())
                for counter in bounds:
                    tx.update(C(counter), actions=[C.maximum.remove()])
        except TransactWriteError as exc:
            if 0 in _failed_positions(exc):
                return False
            raise
        return True


class DynamoMinuteBuckets:
    """The per-minute counts of `sitedispatch.recent` in the counters table. Adding is one conditional UpdateItem
    (ADD while the bucket holds this minute); the first add of a minute starts the bucket over (a second conditional
    UpdateItem), and a concurrent first add makes the loser add instead. Reading a window is one BatchGetItem."""

    ATTEMPTS = 3

    def __init__(self, models: Models) -> None:
        self.C: Any = models.Counter

    def add(self, bucket_id: str, minute: int, count: int, amount: int) -> None:
        C = self.C
        for _ in range(self.ATTEMPTS):
            try:
                C(bucket_id).update(actions=[C.value.add(count), C.total.add(amount)], condition=C.minute == minute)
                return
            except UpdateError as exc:
                if not _condition_failed(exc):
                    raise
            try:
                C(bucket_id).update(actions=[C.value.set(count), C.total.set(amount), C.minute.set(minute)],
                                    condition=C.minute.does_not_exist() | (C.minute < minute))
                return
            except UpdateError as exc:
                if not _condition_failed(exc):
                    raise
        # The bucket holds a later minute than this clock's: a count from the past is dropped, not misfiled.

    def read(self, bucket_ids: Sequence[str]) -> dict[str, Bucket]:
        wanted = list(dict.fromkeys(bucket_ids))
        return {item.counter_id: Bucket(int(item.minute), int(item.value or 0), int(item.total or 0))
                for item in (self.C.batch_get(wanted) if wanted else []) if item.minute is not None}


class DynamoPublicationStore:
    def __init__(self, models: Models) -> None:
        self.M: Any = models.Publication

    def get(self, site_id: str, seq: int) -> Publication | None:
        item = _get_item(self.M, site_id, seq)
        return None if item is None else _to_publication(item)

    def _update(self, site_id: str, seq: int, actions: list[Any], condition: Any) -> Publication:
        item = self.M(site_id, seq)
        try:
            item.update(actions=actions, condition=self.M.seq.exists() & condition)
        except UpdateError as exc:
            if _condition_failed(exc):
                current = self.get(site_id, seq)
                if current is None:
                    raise NotFound(f"publication {site_id}#{seq}") from exc
                raise Conflict(f"publication {site_id}#{seq} is {current.status.value} "
                               f"with {current.total_chunks} chunks") from exc
            raise
        return _to_publication(item)

    def plan(self, site_id: str, seq: int, total_chunks: int, now: float) -> Publication:
        M = self.M
        return self._update(site_id, seq, [M.total_chunks.set(total_chunks)],
                            M.total_chunks.does_not_exist() | (M.total_chunks == total_chunks))

    def chunk_done(self, site_id: str, seq: int, chunk: int) -> Publication:
        M = self.M
        return self._update(site_id, seq, [M.done_chunks.add({chunk})], M.total_chunks.exists())

    def finish(self, site_id: str, seq: int, status: PublicationStatus, now: float) -> None:
        M = self.M
        with contextlib.suppress(Conflict):  # already finished by a duplicate finisher: the first word stands
            self._update(site_id, seq, [M.status.set(status.value), M.finished_at.set(now)],
                         M.status.is_in(PublicationStatus.PENDING.value, PublicationStatus.PLANNED.value))

    def list(self, site_id: str, limit: int = 100) -> list[Publication]:
        return [_to_publication(item) for item in self.M.query(site_id, scan_index_forward=False, limit=limit)]


DAY_S = 86_400


def audit_day(at: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(at))


class DynamoAuditLog:
    def __init__(self, models: Models) -> None:
        self.M: Any = models.Audit

    def record(self, entry: AuditEntry) -> None:
        self.M(audit_day(entry.at), f"{entry.at:017.6f}#{uuid.uuid4().hex[:8]}", at=entry.at, actor=entry.actor,
               action=entry.action, target=entry.target, site_id=entry.site_id, reason=entry.reason,
               outcome=entry.outcome, detail=entry.detail or None).save()

    def list(self, since: float, until: float, *, actor: str | None = None, action: str | None = None,
             target: str | None = None, site_id: str | None = None, limit: int = 100) -> list[AuditEntry]:
        M = self.M
        out: list[AuditEntry] = []
        day = until
        while day >= since - DAY_S and len(out) < limit:  # newest day first, each day newest first
            for item in M.query(audit_day(day), M.entry_id.between(f"{since:017.6f}", f"{until:017.6f}~"),
                                scan_index_forward=False):
                entry = AuditEntry(at=float(item.at), actor=item.actor, action=item.action, target=item.target,
                                   outcome=item.outcome, reason=item.reason, site_id=item.site_id,
                                   detail=item.detail or {})
                if _matches(entry, actor=actor, action=action, target=target, site_id=site_id):
                    out.append(entry)
                    if len(out) >= limit:
                        break
            day -= DAY_S
        return out


def _matches(entry: AuditEntry, **wanted: str | None) -> bool:
    return all(value is None or getattr(entry, name) == value for name, value in wanted.items())
