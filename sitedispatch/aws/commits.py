"""The commit transaction (CommitStore): one TransactWriteItems across the commits, sites, operations, publications
and counters tables, so an operation's effect, its head, its status and the publication it asks for move together or
not at all."""

from __future__ import annotations

from sitedispatch.aws.events import EventOutbox
from sitedispatch.aws.flow import bucket_actions
from sitedispatch.aws.tables import DUE_PARTITION, OPEN, CommitItem, Models, index_shard
from sitedispatch.aws.writes import TransactionFailed, get_item, transaction
from sitedispatch.domain.errors import AlreadyCommitted, Conflict, NotRunnable, StaleFence
from sitedispatch.domain.model import Commit, Kind, Status
from sitedispatch.domain.ports import PreparedCommit

RECORD, HEAD, OPERATION, PUBLICATION = "commit record", "site head", "operation", "publication"


def to_commit(item: CommitItem) -> Commit:
    return Commit(
        operation_id=item.operation_id,
        site_id=item.site_id,
        kind=Kind(item.kind),
        version=int(item.version),
        revision_id=item.revision_id,
        parent_revision=item.parent_revision,
        fence=int(item.fence),
        committed_at=float(item.committed_at),
        summary=item.summary or {},
    )


class DynamoCommitStore:
    def __init__(self, models: Models, outbox: EventOutbox) -> None:
        self.models = models
        self.outbox = outbox

    def commit(self, prepared: PreparedCommit, now: float) -> None:
        Commits, Sites, Operations = self.models.Commit, self.models.Site, self.models.Operation
        Publications, Counters = self.models.Publication, self.models.Counter
        c, lease = prepared.commit, prepared.lease
        record = Commits(
            c.operation_id,
            site_id=c.site_id,
            kind=c.kind.value,
            version=c.version,
            revision_id=c.revision_id,
            parent_revision=c.parent_revision,
            fence=c.fence,
            committed_at=c.committed_at,
            summary=c.summary,
        )
        site_actions = [
            Sites.head_version.set(c.version),
            Sites.head_revision.set(c.revision_id),
            Sites.lease_owner.remove(),
            Sites.lease_expires_at.remove(),
            Sites.consecutive_failures.set(0),
        ]
        if prepared.avg_operation_s is not None:
            site_actions.append(Sites.avg_operation_s.set(prepared.avg_operation_s))
        if prepared.next_due_at is not None:
            site_actions += [Sites.next_due_at.set(prepared.next_due_at), Sites.due.set(DUE_PARTITION)]
        else:
            site_actions += [Sites.next_due_at.remove(), Sites.due.remove()]
        op_actions = [
            Operations.status.set(Status.SUCCEEDED.value),
            Operations.result.set(prepared.result),
            Operations.finished_at.set(now),
            Operations.updated_at.set(now),
            Operations.error.remove(),
            Operations.holds.remove(),
            Operations.share.remove(),
            Operations.dependency_slots.remove(),
            Operations.rate_reserved.remove(),
        ]
        op_condition = (
            (Operations.status == Status.RUNNING.value)
            & (Operations.fence == lease.fence)
            & Operations.cancel_requested.does_not_exist()
        )
        if prepared.slot is not None:
            op_actions.append(Operations.running_slot.remove())
            op_condition &= Operations.running_slot == prepared.slot
        try:
            with transaction(Commits) as tx:
                tx.save(RECORD, record, condition=Commits.operation_id.does_not_exist())
                tx.update(
                    HEAD,
                    Sites(c.site_id),
                    site_actions,
                    condition=(Sites.fence == lease.fence)
                    & (Sites.lease_owner == lease.owner)
                    & (Sites.head_version == prepared.expected_version),
                )
                tx.update(OPERATION, Operations(c.operation_id), op_actions, condition=op_condition)
                if prepared.publication is not None:
                    pub = prepared.publication
                    tx.save(
                        PUBLICATION,
                        Publications(
                            pub.site_id,
                            pub.seq,
                            revision_id=pub.revision_id,
                            operation_id=pub.operation_id,
                            status=pub.status.value,
                            created_at=pub.created_at,
                            open=index_shard(OPEN, pub.site_id),
                        ),
                        condition=Publications.seq.does_not_exist(),
                    )
                tx.decrement(Counters, (*prepared.counters, *((prepared.slot,) if prepared.slot else ())), now)
                for tally in prepared.tallies:
                    actions = bucket_actions(Counters, tally.minute, tally.count, tally.amount)
                    tx.update(f"tally:{tally.bucket_id}", Counters(tally.bucket_id), actions)
                if prepared.event is not None:
                    self.outbox.add(tx, prepared.event)
        except TransactionFailed as failed:
            raise failed.mapped(
                [
                    (RECORD, lambda: AlreadyCommitted(c.operation_id)),
                    (HEAD, lambda: StaleFence(f"site {c.site_id}: fence {lease.fence} is no longer current")),
                    (OPERATION, lambda: NotRunnable(c.operation_id)),
                    # Sequences are head versions and the head moved under our fence: cannot happen unless the
                    # publications table was written by hand. Refuse loudly rather than overwrite.
                    (PUBLICATION, lambda: Conflict(f"publication {c.site_id}#{c.version} already exists")),
                ]
            ) from failed.cause

    def get(self, operation_id: str) -> Commit | None:
        item = get_item(self.models.Commit, operation_id)
        return None if item is None else to_commit(item)

    def history(self, site_id: str, limit: int = 100) -> list[Commit]:
        """Newest version first (the by-site index: eventually consistent on AWS)."""
        items = self.models.Commit.by_site.query(site_id, scan_index_forward=False, limit=limit)
        return [to_commit(item) for item in items]
