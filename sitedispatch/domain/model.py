"""Domain types: operations, sites, leases, commits and queue messages."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from sitedispatch.domain.errors import InvalidInput

SITE_ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{2,62}$")
# A local name (`--as tenant-a`) or, on AWS, an IAM identity's ARN (`arn:aws:sts::123456789012:assumed-role/Role`).
PRINCIPAL_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@:/+=,-]{0,255}$")


# Patterns are stated in the OpenAPI document (ECMA regular expressions) and checked here (Python's): they are
# written so both read them alike (no `\s`, which the two define differently; `fullmatch`, since Python's `$`
# also matches before a final newline). Blank is what Python's str.isspace or JavaScript's \s calls whitespace.
NOT_BLANK_PATTERN = re.compile(r"[^\t-\r \x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]")


def check_principal(principal: str, field: str = "principal") -> None:
    if not PRINCIPAL_PATTERN.fullmatch(principal):
        raise InvalidInput(f"principal {principal!r} must match {PRINCIPAL_PATTERN.pattern}", field=field)


# A customer of a principal, as its control plane names it (a fairness key: limits and shares apply per tenant).
TENANT_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@:/+=,-]{0,127}$")


def check_tenant(tenant: str, field: str = "tenant") -> None:
    if not TENANT_PATTERN.fullmatch(tenant):
        raise InvalidInput(f"tenant {tenant!r} must match {TENANT_PATTERN.pattern}", field=field)


def stable_identity(arn: str) -> str:
    """The principal an STS caller ARN stands for. An assumed role's ARN ends with its session name, which changes
    with every session (each Lambda container, each `aws sso login`): the principal is the role, so that its
    operations, sites and quota stay its own across sessions."""
    prefix, sep, rest = arn.partition(":assumed-role/")
    if not sep:
        return arn
    role = rest.split("/", 1)[0]
    return f"{prefix}:assumed-role/{role}"


class Kind(StrEnum):
    PROVISION = "provision"
    IMPORT = "import"
    PUBLISH = "publish"
    WP_CRON = "wp_cron"
    RECOVER = "recover"


class Status(StrEnum):
    ACCEPTED = "accepted"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"
    DEAD = "dead"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


# Tuples, in the lifecycle's order: whatever walks them (the reconciler reads each status in turn) walks them in the
# same order in every process (a frozenset of str enums is iterated in the order of the process's hash seed).
TERMINAL = (Status.SUCCEEDED, Status.CANCELLED, Status.SUPERSEDED, Status.DEAD)
RUNNABLE = (Status.ACCEPTED, Status.QUEUED, Status.RUNNING)


INTERACTIVE = "operations"  # a lane is named as its queue in sitedispatch.domain.resources.QUEUES
BULK = "bulk"
BULK_KINDS = frozenset({Kind.IMPORT})  # long-running: their own lane (queue and function)
SUPERSEDABLE_KINDS = frozenset({Kind.PUBLISH, Kind.WP_CRON})  # a newer queued one does all an older one would


def lane_for(kind: Kind) -> str:
    """Which operations queue a kind's messages travel on."""
    return BULK if kind in BULK_KINDS else INTERACTIVE


def operation_id_for(principal: str, site_id: str, kind: str, idempotency_key: str) -> str:
    """Deterministic operation id: the same (principal, site, kind, key) always names the same operation."""
    material = "\x1f".join((principal, site_id, kind, idempotency_key)).encode()
    return "op_" + hashlib.sha256(material).hexdigest()[:32]


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class ErrorInfo:
    """Why an attempt failed."""

    error_class: str
    code: str
    message: str
    retryable: bool


def error_class(error: ErrorInfo | None, evidence: dict[str, Any] | None) -> str | None:
    """What a dead operation is grouped and redriven by: its evidence's error code, else its error's."""
    return (evidence or {}).get("error_code") or (error.code if error else None)


@dataclass(frozen=True)
class Operation:
    operation_id: str
    site_id: str
    principal: str
    kind: Kind
    status: Status
    input_key: str
    input_digest: str
    idempotency_key: str
    created_at: float
    updated_at: float
    attempt: int = 0
    attempt_budget: int = 5
    epoch: int = 0
    fence: int | None = None
    queued_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    not_before: float | None = None
    error: ErrorInfo | None = None
    result: dict[str, Any] = field(default_factory=dict)
    cancel_requested: str | None = None  # the reason, once `ops cancel` asked a running operation to stop
    superseded_by: str | None = None
    running_slot: str | None = None  # the running counter (a shard) this attempt holds a place of
    evidence: dict[str, Any] | None = None  # when dead: the compact evidence (the full document is in S3)
    inline_input: str | None = None  # a small input kept in the row (its canonical JSON); larger ones: input_key
    # Accepted but not yet sent: its fairness key already has its share of the lane's queue. The share it waits for
    # (queued#LANE#PRINCIPAL#TENANT) and the shard counting its wait; it is sent, oldest first, as earlier work of
    # that key finishes, taking a place of the shard that freed.
    waiting_for: str | None = None
    waiting_at: str | None = None
    # A long import's last completed step (where the file's reading resumes, what it has done), written under the
    # attempt's fence: the next step, or the next attempt after a crash, continues from it.
    checkpoint: dict[str, Any] | None = None
    # Its invocation ran out of time between two steps and recorded `checkpoint` with this flag: the next delivery
    # continues the same attempt (the lease's fence + 1, no attempt spent). A crash sets no flag, so it still costs one.
    continuing: bool = False
    # The fairness key: a customer of the principal (a control plane submits for many); "" is the principal itself.
    tenant: str = ""
    # What it holds from acceptance until it ends: the admission counters' shards (global, principal, tenant, site)
    # and the place of its key's share of the lane's queue (None while it waits for one).
    holds: tuple[str, ...] = ()
    share: str | None = None
    # What an attempt holds of its site's dependencies while it runs (their capped running shards), released with
    # its running slot; and the rate places it reserved ahead of its start (bucket -> when it may start).
    dependency_slots: tuple[str, ...] = ()
    rate_reserved: dict[str, float] = field(default_factory=dict)

    @property
    def tenant_key(self) -> str:
        """The tenant limits and shares apply to: the one given at submit, else the principal."""
        return self.tenant or self.principal

    @property
    def continues(self) -> bool:
        """Its next delivery continues the running attempt rather than starting one."""
        return self.continuing and self.status == Status.RUNNING and self.fence is not None

    @property
    def error_code(self) -> str | None:
        """Its error class: a dead operation's evidence's, else its last attempt's error code."""
        return error_class(self.error, self.evidence)

    @property
    def dedup_id(self) -> str:
        """SQS deduplication id: a redrive or replay (new epoch) is a new delivery, a resend is not."""
        return f"{self.operation_id}-e{self.epoch}"

    def attempt_started(
        self, fence: int, now: float, running_slot: str | None, dependency_slots: tuple[str, ...] | None = None
    ) -> Operation:
        """This row as starting an attempt under `fence` leaves it (what the stores' conditional write sets): the
        answer a store gives without reading the row back."""
        return replace(
            self,
            status=Status.RUNNING,
            attempt=self.attempt + 1,
            fence=fence,
            started_at=now,
            updated_at=now,
            not_before=None,
            running_slot=running_slot,
            dependency_slots=self.dependency_slots if dependency_slots is None else dependency_slots,
            rate_reserved={},
            continuing=False,
        )

    def continued(self, fence: int, now: float) -> Operation:
        """This row as a continuation under `fence` leaves it: the same attempt, its clock and slot unchanged."""
        return replace(self, fence=fence, updated_at=now, continuing=False)


@dataclass(frozen=True)
class AuditEntry:
    """One operator or producer action on accepted work: who, what, on what, why, when, and how it ended."""

    at: float
    actor: str  # the caller identity (STS ARN on AWS, the --as name locally)
    action: str  # cancel, pause, resume, redrive, replay, quota
    target: str  # an operation id or a site id
    outcome: str  # ok | refused | denied
    reason: str | None = None
    site_id: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Quota:
    """An operator's override of the limits of one principal, or of one tenant it names (`tenant`); a field left
    None keeps the deployment's setting."""

    principal: str
    max_outstanding: int | None = None  # instead of MAX_OUTSTANDING_PER_PRINCIPAL (per tenant: _PER_TENANT)
    max_running: int | None = None  # instead of MAX_RUNNING_PER_PRINCIPAL (in each lane)
    updated_by: str = ""
    updated_at: float = 0.0
    reason: str | None = None
    tenant: str | None = None


@dataclass(frozen=True)
class Lease:
    """A held mutation lease: the fencing token `fence` is what every fenced write is checked against."""

    site_id: str
    owner: str
    fence: int
    expires_at: float


REFERENCE_DRIVER = "reference"
WORDPRESS_DRIVER = "wordpress"
DRIVERS = (REFERENCE_DRIVER, WORDPRESS_DRIVER)
# A remote site's home URL as a connection stores it: http(s), a host, an optional port and path; no query, no fragment.
ENDPOINT_PATTERN = re.compile(r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[!\"$->@-~]*)?$")


@dataclass(frozen=True)
class SiteConnection:
    """How a site's content is reached: its driver and, for a remote site, where and with which credential."""

    driver: str = REFERENCE_DRIVER
    endpoint: str | None = None  # a WordPress site's home URL
    credential_ref: str | None = None  # file:///path or a Secrets Manager secret (ARN or name): never the secret

    def describe(self) -> str:
        return self.driver + (f" at {self.endpoint}" if self.endpoint else "")


@dataclass(frozen=True)
class Site:
    site_id: str
    principal: str
    created_at: float
    head_version: int = 0
    head_revision: str | None = None
    fence: int = 0
    lease_owner: str | None = None
    lease_expires_at: float | None = None
    paused: bool = False
    pause_reason: str | None = None
    paused_by: str | None = None  # who paused it last (an identity, or the automatic pause's name), and when
    paused_at: float | None = None
    consecutive_failures: int = 0
    avg_operation_s: float | None = None
    live_seq: int = 0
    live_revision: str | None = None
    live_at: float | None = None
    next_due_at: float | None = None  # when the head revision next has a WordPress event or future post due
    connection: SiteConnection = SiteConnection()
    dependencies: tuple[str, ...] = ()  # what it shares with other sites (domain/dependencies.py), in its owner's order

    @property
    def driver(self) -> str:
        return self.connection.driver

    def lease_free_for(self, operation_id: str, now: float) -> bool:
        return (
            self.lease_owner is None
            or self.lease_owner == operation_id
            or (self.lease_expires_at is not None and self.lease_expires_at <= now)
        )


@dataclass(frozen=True)
class HeldDelivery:
    """A delivery a paused site's worker left invisible for the pause's deferral, kept so that a resume makes it
    visible at once: its operation, its lane, and the receipt of that receive (SQS's receipt handle)."""

    operation_id: str
    lane: str
    receipt: str


@dataclass(frozen=True)
class Commit:
    """One canonical mutation of a site, identified by the operation that made it."""

    operation_id: str
    site_id: str
    kind: Kind
    version: int
    revision_id: str
    parent_revision: str | None
    fence: int
    committed_at: float
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class QueueMessage:
    """The whole body of an operations message: it only identifies durable state. The principal and lane let the
    worker read the principal's share of the lane in the same request as the operation (a message sent before they
    were carried has them empty)."""

    operation_id: str
    site_id: str
    principal: str = ""
    lane: str = ""
    tenant: str = ""  # when not the principal
    deps: str = ""  # the dependency set whose share of the key it is in (flow/counters.py `dependency_label`)

    @classmethod
    def of(cls, op: Operation, deps: str = "") -> QueueMessage:
        tenant = "" if op.tenant_key == op.principal else op.tenant_key
        return cls(op.operation_id, op.site_id, op.principal, lane_for(op.kind), tenant, deps)

    @property
    def tenant_key(self) -> str:
        return self.tenant or self.principal

    def to_body(self) -> str:
        import json

        body = {"operation_id": self.operation_id, "site_id": self.site_id}
        if self.principal and self.lane:
            body |= {"principal": self.principal, "lane": self.lane}
        if self.tenant:
            body["tenant"] = self.tenant
        if self.deps:
            body["deps"] = self.deps
        return json.dumps(body, separators=(",", ":"))


class PublicationStatus(StrEnum):
    PENDING = "pending"  # written with the commit (the outbox); plan not yet made
    PLANNED = "planned"  # chunks known and sent
    PUBLISHED = "published"  # receipt written and promoted
    SUPERSEDED = "superseded"  # a newer sequence was live first: never promoted


@dataclass(frozen=True)
class Publication:
    """One publication of a revision under a sequence number (the head version of the commit that asked for it)."""

    site_id: str
    seq: int
    revision_id: str
    operation_id: str
    status: PublicationStatus
    created_at: float
    total_chunks: int | None = None
    done_chunks: frozenset[int] = frozenset()
    finished_at: float | None = None
    # Deliveries of its steps that came again because an earlier one did not finish (an error, a timeout, a stop),
    # and the last known reason (its step first: "chunk 7: ...").
    retried_steps: int = 0
    last_failure: str | None = None


PLAN = -1  # the chunk number of a publication's planning step
MAX_FAILURE_CHARS = 500  # of a publication's last failure, as recorded


@dataclass(frozen=True)
class PublicationMessage:
    """A publications-queue message: identifies a publication and one step of it (plan, or a chunk). A chunk that
    did not fit in one delivery's slice of time is continued by a message naming the parts already stored: `parts`
    are where each ended (ascending), and the next delivery starts at the last."""

    site_id: str
    revision_id: str
    seq: int
    chunk: int = PLAN
    parts: tuple[int, ...] = ()

    def to_body(self) -> str:
        import json

        body: dict[str, object] = {
            "site_id": self.site_id,
            "revision_id": self.revision_id,
            "seq": self.seq,
            "chunk": "plan" if self.chunk == PLAN else self.chunk,
        }
        if self.parts:
            body["parts"] = list(self.parts)
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def from_body(cls, body: str) -> PublicationMessage:
        import json

        data = json.loads(body)
        chunk = data["chunk"]
        parts = tuple(int(end) for end in data.get("parts", ()))
        if any(a >= b for a, b in zip((0, *parts), parts, strict=False)) or (parts and chunk == "plan"):
            raise ValueError("a continuation's parts end in ascending order, after 0, of a chunk")
        return cls(
            str(data["site_id"]),
            str(data["revision_id"]),
            int(data["seq"]),
            PLAN if chunk == "plan" else int(chunk),
            parts,
        )

    @property
    def resume_at(self) -> int:
        """The first route of its chunk this delivery renders."""
        return self.parts[-1] if self.parts else 0

    @property
    def step(self) -> str:
        return "plan" if self.chunk == PLAN else str(self.chunk)

    @property
    def group_id(self) -> str:
        """Chunks are immutable and idempotent: they need no per-site order, so each is its own group (the
        conditional promotion restores per-site order). 32 hex digits keep the id under SQS's 128 characters."""
        return f"{self.site_id}:{self.revision_id[:32]}:{self.step}"

    @property
    def dedup_id(self) -> str:
        continued = f"-r{self.resume_at}" if self.parts else ""
        return f"{self.site_id}-{self.seq}-{self.step}{continued}"
