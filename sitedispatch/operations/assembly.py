"""Commit assembly: what one successful attempt writes in its single commit transaction (CommitStore.commit)."""

from __future__ import annotations

from sitedispatch.domain.events import operation_ended
from sitedispatch.domain.model import Commit, Lease, Operation, Publication, PublicationStatus, Site, Status, lane_for
from sitedispatch.domain.ports import PreparedCommit
from sitedispatch.flow.admission import held_by
from sitedispatch.flow.pace import Pace
from sitedispatch.kinds.contract import Mutation

AVERAGE_WEIGHT = 0.3  # of the latest operation in the site's running average of operation time


def prepare_commit(
    op: Operation,
    site: Site,
    lease: Lease,
    mutation: Mutation,
    now: float,
    pace: Pace | None = None,
) -> PreparedCommit:
    """The commit record (version = head + 1, under our fence), the publication it asks for (its outbox row), the
    operation's result, what the operation holds (as its row says) to release, the site's updated pace and due
    time, and the completion counted on its fairness key's `pace`."""
    commit = Commit(
        operation_id=op.operation_id,
        site_id=op.site_id,
        kind=op.kind,
        version=site.head_version + 1,
        revision_id=mutation.revision_id,
        parent_revision=site.head_revision,
        fence=lease.fence,
        committed_at=now,
        summary=mutation.summary,
    )
    publication = (
        Publication(
            site_id=op.site_id,
            seq=commit.version,
            revision_id=mutation.publish_revision or mutation.revision_id,
            operation_id=op.operation_id,
            status=PublicationStatus.PENDING,
            created_at=now,
        )
        if mutation.publish
        else None
    )
    result: dict[str, object] = {"version": commit.version, "revision_id": mutation.revision_id}
    if publication:
        result["publication"] = {"seq": publication.seq, "revision_id": publication.revision_id}
    took = now - (op.started_at or now)
    average = (
        took if site.avg_operation_s is None else (AVERAGE_WEIGHT * took + (1 - AVERAGE_WEIGHT) * site.avg_operation_s)
    )
    return PreparedCommit(
        commit=commit,
        lease=lease,
        expected_version=site.head_version,
        result=result,
        publication=publication,
        counters=tuple(counter for counter in held_by(op) if counter != op.running_slot),
        avg_operation_s=round(average, 3),
        slot=op.running_slot,
        next_due_at=mutation.next_due_at,
        tallies=(pace.tally(lane_for(op.kind), op.principal, op.tenant_key, took, now),) if pace is not None else (),
        event=operation_ended(op, Status.SUCCEEDED, now, revision_id=mutation.revision_id, version=commit.version),
    )
