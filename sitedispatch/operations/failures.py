"""How an attempt's failure is recorded: a failure of the destination counted towards pausing its site, and an
operation that cannot succeed dead-lettered with its evidence."""

from __future__ import annotations

from typing import Protocol

from sitedispatch import observability as obs
from sitedispatch.domain.errors import NotRunnable, StaleFence
from sitedispatch.domain.model import ErrorInfo, Operation, QueueMessage, lane_for
from sitedispatch.domain.ports import BlobStore, Clock, DependencyStore, OperationQueue, OperationStore, SiteStore
from sitedispatch.domain.settings import Settings
from sitedispatch.kinds.contract import SiteDriver
from sitedispatch.operations.evidence import Evidence, build_evidence

BREAKER_MIN_SITES = 2  # failures from fewer sites are those sites' own


class FailureDeps(Protocol):
    """What recording a failure writes to (the worker's dependencies have them)."""

    settings: Settings
    operations: OperationStore
    sites: SiteStore
    blobs: BlobStore
    queue: OperationQueue
    clock: Clock
    dependencies: DependencyStore


def count_towards_pause(
    deps: FailureDeps,
    op: Operation,
    error: ErrorInfo,
    driver: SiteDriver | None,
    probing: tuple[str, ...] = (),
) -> None:
    """Site health: N failures of the destination in a row pause the site, so one broken site stops consuming
    attempts. What counts: an error that may pass (unreachable, unavailable, a timeout: retried) or one of the
    destination refusing us (credentials, the mu-plugin); never an operation's own permanent error (its input, a
    site not yet provisioned), which says nothing about the site and would pause it for everyone's work. Which codes
    are the destination's is the site's driver's to say."""
    if not (error.retryable or (driver is not None and error.code in driver.destination_failures)):
        return
    failures = deps.settings.auto_pause_failures
    site = deps.sites.record_failure(
        op.site_id,
        failures,
        f"{failures} consecutive failures; last: {op.kind.value} {op.operation_id} {error.code}",
        deps.clock.now(),
    )
    if site.paused:
        obs.count(obs.Metric.SiteAutoPaused)
    count_towards_breakers(deps, op, site.dependencies, error, probing)


def count_towards_breakers(
    deps: FailureDeps, op: Operation, dependency_ids: tuple[str, ...], error: ErrorInfo, probing: tuple[str, ...]
) -> None:
    """The same failure counted on each of the site's dependencies: in one window, `dependency_failures_to_open`
    of them from two sites or more open its breaker (one site's failures are that site's: they pause it). A probe's
    failure opens it again, its cooldown doubled. A failure to count is logged: a breaker is a protection, not a
    guarantee of the work."""
    store, s = deps.dependencies, deps.settings
    now = deps.clock.now()
    for dependency_id in dependency_ids:
        try:
            if dependency_id in probing:
                store.probe_failed(dependency_id, op.operation_id, now, s.dependency_cooldown_max_s)
                continue
            failure = {
                "principal": op.principal,
                "site_id": op.site_id,
                "operation_id": op.operation_id,
                "code": error.code,
                "at": now,
            }
            count, sites, recent = store.record_failure(dependency_id, failure, now, window_s=s.dependency_window_s)
            if count >= s.dependency_failures_to_open and sites >= BREAKER_MIN_SITES:
                reason = f"{count} failures from {sites} sites in {s.dependency_window_s:g} s; last: {error.code}"
                if store.open(dependency_id, reason, recent, now, s.dependency_cooldown_s) is not None:
                    obs.logger.warning("dependency opened", extra={"dependency": dependency_id, "reason": reason})
        except Exception as exc:
            obs.logger.warning("could not count the failure on a dependency", extra={"error": repr(exc)})


def dead_letter(
    deps: FailureDeps,
    op: Operation,
    fence: int | None,
    error: ErrorInfo,
    message: QueueMessage,
    request_id: str,
    exc: BaseException | None = None,
) -> bool:
    """Dead with evidence: the S3 document first (so the row never names a missing one), then the dead transition
    carrying its compact copy, then the DLQ message carrying its key. False: another delivery ended it first."""
    site = deps.sites.get(op.site_id)
    lane = lane_for(op.kind)
    evidence = build_evidence(
        op,
        error,
        fence=fence,
        revision=site.head_revision if site else None,
        now=deps.clock.now(),
        request_id=request_id,
        lane=lane,
        exc=exc,
    )
    deps.blobs.put_if_absent(evidence.key, evidence.document())
    try:
        deps.operations.mark_dead(op, fence, error, deps.clock.now(), evidence=evidence.row())
    except (NotRunnable, StaleFence):
        return False
    deps.queue.dead_letter(message, op.dedup_id, lane=lane, attributes=dead_letter_attributes(op, evidence))
    obs.count(obs.Metric.OperationDead)
    obs.logger.error(
        "operation dead",
        extra={
            "error_class": error.error_class,
            "error_code": error.code,
            "error": error.message,
            "evidence": evidence.key,
            "recovery": evidence.recovery_command,
        },
    )
    return True


def dead_letter_attributes(op: Operation, evidence: Evidence) -> dict[str, str]:
    """What a DLQ message carries besides the operation id: enough to filter and to find the evidence."""
    return {
        "operation_id": op.operation_id,
        "site_id": op.site_id,
        "kind": op.kind.value,
        "principal": op.principal,
        "epoch": str(op.epoch),
        "attempt": str(op.attempt),
        "input_digest": op.input_digest,
        "error_code": evidence.error_code,
        "evidence_key": evidence.key,
    }
