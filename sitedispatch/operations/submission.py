"""Submit: validate, derive the operation id, store the input, write the row, send the message, mark queued."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sitedispatch import observability as obs
from sitedispatch.domain.errors import (
    AlreadyExists,
    Conflict,
    IdempotencyConflict,
    InvalidInput,
    LabelMoved,
    LimitReached,
    NotFound,
    SiteRegistered,
    TooLarge,
    UnclaimedSite,
)
from sitedispatch.domain.model import (
    DRIVERS,
    SITE_ID_PATTERN,
    Kind,
    Operation,
    Site,
    SiteConnection,
    Status,
    check_principal,
    check_tenant,
    lane_for,
    operation_id_for,
    sha256_hex,
)
from sitedispatch.domain.ports import BlobStore, Clock, OperationQueue, OperationStore, SiteOwner, SiteStore
from sitedispatch.domain.schemas import parse_input
from sitedispatch.domain.settings import Settings
from sitedispatch.flow.admission import (
    Limit,
    backpressure,
    limit_of,
    limits_for,
    message_for,
    paused_backpressure,
    share_group_for,
)
from sitedispatch.flow.counters import site_counter
from sitedispatch.flow.estimates import principal_operation_s, site_operation_s
from sitedispatch.flow.pace import Pace
from sitedispatch.flow.placement import Write, place
from sitedispatch.flow.shares import SiteLabels
from sitedispatch.kinds.contract import SiteDriver
from sitedispatch.operations.uploads import (
    UPLOAD_CONTENT_TYPE,
    check_upload,
    file_digest,
    import_params,
    upload_key,
)


@dataclass(frozen=True)
class Submitted:
    operation: Operation
    created: bool  # False: the idempotency key named an existing operation with the same input


@dataclass
class SubmitDeps:
    settings: Settings
    operations: OperationStore
    sites: SiteStore
    blobs: BlobStore
    queue: OperationQueue
    clock: Clock
    pace: Pace | None = None  # principals' measured pace: a refusal at the principal limit estimates with it
    drivers: Mapping[str, SiteDriver] = field(
        default_factory=dict
    )  # a registration's connection is its driver's to check
    new_key: Callable[[], str] = field(default=lambda: uuid.uuid4().hex)  # a submit without an idempotency key's
    labels: SiteLabels = field(default_factory=SiteLabels)  # the process's: what each site's counter names


# A submit told its site's dependency set changed (LabelMoved) tries again with the new one this many times in all.
LABEL_TRIES = 3

# An input this small is kept in the operation's row: no S3 write at submit, no read at the attempt. Larger ones go
# to S3 (a DynamoDB write is billed per KB of the whole row, and the row is written at every transition).
INLINE_INPUT_BYTES = 1024


def unregistered(site_id: str) -> NotFound:
    """The refusal of work other than a provision for a site never registered (a typo creates nothing)."""
    return NotFound(
        f"site {site_id} is not registered: a site's first operation is a provision (or register it first: POST /sites)"
    )


def input_key(site_id: str, digest: str) -> str:
    return f"inputs/{site_id}/{digest}.json"


class Submitter:
    def __init__(self, deps: SubmitDeps) -> None:
        self.deps = deps

    def register_site(self, site_id: str, principal: str, connection: SiteConnection) -> Site:
        """Register a site with its driver before its first operation (a site submitted to without registering
        is a reference site). Registering again with the same connection is a no-op; another is a Conflict."""
        if not SITE_ID_PATTERN.fullmatch(site_id):
            raise InvalidInput(f"site id {site_id!r} must match {SITE_ID_PATTERN.pattern}", field="site")
        check_principal(principal, field="as")
        if connection.driver not in DRIVERS or connection.driver not in self.deps.drivers:
            raise InvalidInput(f"driver must be one of {', '.join(DRIVERS)}", field="driver")
        connection = self.deps.drivers[connection.driver].connection(connection)
        site = self.deps.sites.register(site_id, principal, self.deps.clock.now(), connection)
        obs.logger.info("site registered", extra={"site_id": site_id, "driver": connection.driver})
        return site

    def submit(
        self,
        *,
        kind: str,
        site_id: str,
        principal: str,
        params: dict[str, Any],
        idempotency_key: str | None = None,
        raw_size: int | None = None,
        tenant: str | None = None,
    ) -> Submitted:
        """Accept one operation, or refuse it before anything is written. `tenant`: the fairness key limits and
        shares apply to (a customer of the principal; default the principal)."""
        op, body = self.prepare(
            kind=kind,
            site_id=site_id,
            principal=principal,
            params=params,
            idempotency_key=idempotency_key,
            raw_size=raw_size,
            tenant=tenant,
        )
        self.keep_input(op, body)
        try:
            op = self.create(op)
        except AlreadyExists:
            return self.existing(op)
        if op.waiting_for:
            return Submitted(op, True)
        # A crash here leaves an `accepted` row without a message: the reconciler re-sends (sending twice is safe).
        sent_at = self.deps.clock.now()
        self.deps.queue.send(message_for(op), op.dedup_id, lane_for(op.kind))
        return Submitted(self.queued(op, sent_at), True)

    def prepare(
        self,
        *,
        kind: str,
        site_id: str,
        principal: str,
        params: dict[str, Any],
        idempotency_key: str | None = None,
        raw_size: int | None = None,
        tenant: str | None = None,
    ) -> tuple[Operation, bytes]:
        """The operation a submit would create and its canonical input, validated; nothing written."""
        d = self.deps
        kind_enum = _parse_kind(kind)
        if not SITE_ID_PATTERN.fullmatch(site_id):
            raise InvalidInput(f"site id {site_id!r} must match {SITE_ID_PATTERN.pattern}", field="site")
        check_principal(principal, field="as")
        if tenant is not None:
            check_tenant(tenant)
        if idempotency_key is not None and not (0 < len(idempotency_key) <= 256):
            raise InvalidInput("idempotency key must be 1..256 characters", field="idempotency_key")
        body, digest = self._validated(kind_enum, params, raw_size, principal, site_id)
        key = idempotency_key or d.new_key()
        now = d.clock.now()
        inline = len(body) <= INLINE_INPUT_BYTES
        op = Operation(
            operation_id=operation_id_for(principal, site_id, kind_enum.value, key),
            site_id=site_id,
            principal=principal,
            kind=kind_enum,
            status=Status.ACCEPTED,
            input_key=input_key(site_id, digest),
            input_digest=digest,
            idempotency_key=key,
            created_at=now,
            updated_at=now,
            attempt_budget=d.settings.attempt_budget,
            inline_input=body.decode() if inline else None,
            tenant="" if tenant in (None, principal) else tenant,
        )
        return op, body

    def keep_input(self, op: Operation, body: bytes) -> None:
        """An input too large for the row goes to S3 under its digest (before the row that names it); not for a site
        never registered, which the create would refuse after (the one read only such inputs pay)."""
        if op.inline_input is None:
            if op.kind != Kind.PROVISION and self.deps.sites.get(op.site_id) is None:
                raise unregistered(op.site_id)
            self.deps.blobs.put_if_absent(op.input_key, body)

    def existing(self, op: Operation) -> Submitted:
        """The same key again (a client's retry, or a concurrent submit that won the race): never a new one."""
        existing = self.deps.operations.get(op.operation_id)
        assert existing is not None
        return self._same_or_conflict(existing, op.input_digest)

    def queued(self, op: Operation, sent_at: float) -> Operation:
        """Sent: accepted -> queued. The row as written (no read back): queued, unless a fast worker moved it on
        first."""
        if self.deps.operations.mark_queued(op.operation_id, sent_at):
            return replace(op, status=Status.QUEUED, queued_at=sent_at, updated_at=sent_at)
        return op

    def create(self, op: Operation) -> Operation:
        """The row and its admission, counted (OperationAccepted, OperationWaiting); see _create."""
        created = self._create(op)
        obs.count(obs.Metric.OperationAccepted)
        if created.waiting_for:
            # Its key already fills its share of the lane's queue: it is sent as earlier work finishes.
            obs.count(obs.Metric.OperationWaiting)
        return created

    def _create(self, op: Operation) -> Operation:
        """One transaction: the row (unless its id exists), a place on a shard of every admission limit, the
        site's owner checked on its counter, and a place of the fairness key's share of the lane (or, that share
        full, the row waits for it); flow/placement.py moves to other shards when one is full. The first submit to
        a site (its counter names no owner yet) registers the site and submits again, claiming it. The operation
        as written."""
        d = self.deps
        limits = limits_for(d.settings, op)
        owner = site_counter(op.site_id)

        def create(site_owner: SiteOwner) -> Operation:
            for _ in range(LABEL_TRIES):
                label = d.labels.get(op.site_id)
                try:
                    return place(
                        d.operations,
                        op,
                        limits,
                        share_group_for(d.settings, op, label),
                        _writer(d, op, site_owner, label),
                    )
                except LabelMoved as moved:  # its set changed, or this process had not seen the site
                    d.labels.learn(op.site_id, moved.label)
            raise Conflict(f"site {op.site_id}'s dependencies changed while it was submitted to: submit again")

        checked, claimed = SiteOwner(owner), SiteOwner(owner, claim=True, register=True)
        # A provision is most often a site's first operation: it tries registering the site first.
        first, then = (claimed, checked) if op.kind == Kind.PROVISION else (checked, claimed)
        try:
            try:
                return create(first)
            except (UnclaimedSite, SiteRegistered):
                if op.kind != Kind.PROVISION and d.sites.get(op.site_id) is None:
                    # only a provision creates a site: other work for a name never registered is a typo's
                    raise unregistered(op.site_id) from None
                try:
                    return create(then)
                except (UnclaimedSite, SiteRegistered):  # registered before, never submitted to: claimed if ours
                    d.sites.register(op.site_id, op.principal, op.created_at)  # Conflict: another principal's
                    return create(SiteOwner(owner, claim=True))
        except LimitReached as full:
            obs.count(obs.Metric.Backpressured)
            raise self._backpressure(op, limit_of(limits, full.counter), full) from None

    def _backpressure(self, op: Operation, limit: Limit, full: LimitReached) -> Exception:
        d = self.deps
        site = d.sites.get(op.site_id)
        per_operation = site_operation_s(site, d.settings.default_operation_s)
        if limit.name in {"principal", "tenant"} and d.pace is not None:
            _, per_operation = principal_operation_s(
                d.pace, lane_for(op.kind), op.principal, op.tenant_key, op.created_at, per_operation
            )
        refusal = backpressure(limit, full, per_operation)
        if limit.name == "site" and site is not None and site.paused:
            return paused_backpressure(refusal, site.site_id, site.pause_reason, d.settings.pause_deferral_s)
        return refusal

    def _validated(
        self, kind: Kind, params: dict[str, Any], raw_size: int | None, principal: str, site_id: str
    ) -> tuple[bytes, str]:
        payload = parse_input(kind, params)
        if kind == Kind.IMPORT:
            check_upload(self.deps.blobs, principal, site_id, payload.model_dump())
        body = payload.canonical_bytes()
        size = max(len(body), raw_size or 0)
        if size > self.deps.settings.max_input_bytes:
            raise InvalidInput(
                f"input is {size} bytes, over the {self.deps.settings.max_input_bytes}-byte limit", field="input"
            )
        return body, sha256_hex(body)

    def store_input(
        self, kind: Kind, site_id: str, principal: str, params: dict[str, Any], raw_size: int | None = None
    ) -> tuple[str, str]:
        """Validate and store a replacement input (a redrive with a corrected input): (key, digest). An import's
        names an upload of `principal`, the caller who redrives. An input that does not fit the operation's kind is
        a Conflict: the operation's state (its kind), not the request's form, is what refuses it."""
        try:
            body, digest = self._validated(kind, params, raw_size, principal, site_id)
        except TooLarge:
            raise
        except InvalidInput as unfit:
            raise Conflict(f"the input does not fit a {kind.value} operation: {unfit}") from unfit
        self.deps.blobs.put_if_absent(input_key(site_id, digest), body)
        return input_key(site_id, digest), digest

    def stage_upload(self, site_id: str, path: Path, principal: str) -> dict[str, Any]:
        """Store a file for an `import` of `principal` from this process (what POST /uploads and a PUT do for a
        client of the API; streamed: hashed first, then PUT If-None-Match under its digest) and return the import
        input that names it. The queue message never carries the file."""
        if not SITE_ID_PATTERN.fullmatch(site_id):
            raise InvalidInput(f"site id {site_id!r} must match {SITE_ID_PATTERN.pattern}", field="site")
        size, digest = file_digest(path)
        if size > self.deps.settings.max_upload_bytes:
            raise InvalidInput(
                f"{path} is {size} bytes, over the {self.deps.settings.max_upload_bytes}-byte limit", field="input-file"
            )
        key = upload_key(principal, site_id, digest)
        with path.open("rb") as fh:
            self.deps.blobs.put_if_absent(key, fh, UPLOAD_CONTENT_TYPE, sha256=digest)
        return import_params(key, digest, size)

    @staticmethod
    def _same_or_conflict(existing: Operation, digest: str) -> Submitted:
        if existing.input_digest != digest:
            raise IdempotencyConflict(
                f"idempotency key already used by {existing.operation_id} with a different input "
                f"(digest {existing.input_digest[:12]}…, this input {digest[:12]}…)"
            )
        return Submitted(existing, created=False)


def _writer(d: SubmitDeps, op: Operation, owner: SiteOwner, label: str) -> Write:
    """The create a placement tries: the row and its places, the site's owner and dependency set checked."""
    labelled = replace(owner, label=label)
    return lambda slots, placement: d.operations.create(op, slots, labelled, placement)


def _parse_kind(kind: str) -> Kind:
    try:
        return Kind(kind)
    except ValueError:
        raise InvalidInput(f"unknown kind {kind!r}; kinds: {', '.join(k.value for k in Kind)}", field="kind") from None
