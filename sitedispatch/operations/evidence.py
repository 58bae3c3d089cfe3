"""Evidence: the durable record of why an operation went dead, and the exact command that recovers it.

The worker writes the full document to S3 (`evidence/{site}/{operation}/e{epoch}-a{attempt}.json`, If-None-Match)
before the dead transition, and the transition stores a compact copy on the operation row, so `dlq list` filters
without reading S3 and `dlq show` has everything. The DLQ message carries the evidence key.
"""

from __future__ import annotations

import hashlib
import json
import traceback
from dataclasses import asdict, dataclass, fields
from typing import Any

from sitedispatch.domain.model import ErrorInfo, Kind, Operation

# Codes that mean "this input can never work": the recovery is a redrive with a corrected input.
INPUT_ERROR_CODES = frozenset({"wxr_malformed", "wxr_unsafe", "digest_mismatch", "invalid_input", "unknown_revision"})
# Codes that mean "the site is not ready for this": provision it, then redrive.
NOT_READY_CODES = frozenset({"not_provisioned"})
ROW_MESSAGE_CHARS = 1000  # the row keeps the start of the message; the S3 document keeps all of it
TRACEBACK_FRAMES = 20


def evidence_key(op: Operation) -> str:
    return f"evidence/{op.site_id}/{op.operation_id}/e{op.epoch}-a{op.attempt}.json"


def recovery_for(op: Operation, error: ErrorInfo) -> tuple[str, str]:
    """(command, what it does) for the operation's principal or an operator reading the evidence: it runs as copied
    once its capitalized placeholders are filled in, under whoever runs it (on AWS your credentials; locally
    `default`, or add --as)."""
    redrive = f"sitedispatch dlq redrive --operation {op.operation_id}"
    if error.code in INPUT_ERROR_CODES:
        what = "the WXR file" if op.kind == Kind.IMPORT else "the JSON input"
        return (
            f"{redrive} --input-file FIXED_INPUT",
            f"the input is invalid ({error.code}): fix {what}, then redrive with it (same operation, new epoch)",
        )
    if error.code in NOT_READY_CODES:
        provision = f"sitedispatch submit provision --site {op.site_id} --param title=TITLE --param admin_email=EMAIL"
        return (
            f"{provision} && {redrive}",
            "the site is not provisioned: provision it (its title and admin email in place of TITLE and EMAIL), "
            "then redrive",
        )
    if error.code == "already_provisioned":
        return ("none", "the site is already provisioned: nothing to recover")
    return (redrive, "retry in a new attempt epoch once the cause (see error) is fixed or has passed")


@dataclass(frozen=True)
class Evidence:
    operation_id: str
    site_id: str
    kind: str
    principal: str
    epoch: int
    attempt: int
    attempt_budget: int
    fence: int | None
    input_key: str
    input_digest: str
    revision: str | None  # the site's head revision when the operation failed (what a redrive starts from)
    error_class: str
    error_code: str
    error_message: str
    retryable: bool
    traceback_digest: str | None
    traceback: list[str]
    created_at: float
    started_at: float | None
    dead_at: float
    request_id: str
    lane: str
    recovery_command: str
    recovery: str
    key: str
    checkpoint: dict[str, Any] | None = None  # a long import's last completed step: where a redrive continues

    def document(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True, indent=1).encode()

    def row(self) -> dict[str, Any]:
        """The compact copy kept on the operation row (everything but the traceback, message shortened)."""
        data = asdict(self)
        data.pop("traceback")
        data["error_message"] = self.error_message[:ROW_MESSAGE_CHARS]
        return data


# What an evidence document holds, each a field of Evidence (the chaos campaign and the tests check documents by it).
EVIDENCE_FIELDS = frozenset(f.name for f in fields(Evidence))


def build_evidence(
    op: Operation,
    error: ErrorInfo,
    *,
    fence: int | None,
    revision: str | None,
    now: float,
    request_id: str,
    lane: str,
    exc: BaseException | None = None,
) -> Evidence:
    frames = traceback.format_exception(exc)[-TRACEBACK_FRAMES:] if exc is not None else []
    # The digest ignores line numbers' surroundings: the same failure at the same place gives the same digest.
    where = (
        [f"{f.filename.rsplit('/', 1)[-1]}:{f.name}" for f in traceback.extract_tb(exc.__traceback__)]
        if exc is not None and exc.__traceback__ is not None
        else []
    )
    digest = (
        hashlib.sha256(f"{type(exc).__name__}|{'|'.join(where)}".encode()).hexdigest()[:16] if exc is not None else None
    )
    command, recovery = recovery_for(op, error)
    return Evidence(
        operation_id=op.operation_id,
        site_id=op.site_id,
        kind=op.kind.value,
        principal=op.principal,
        epoch=op.epoch,
        attempt=op.attempt,
        attempt_budget=op.attempt_budget,
        fence=fence,
        input_key=op.input_key,
        input_digest=op.input_digest,
        revision=revision,
        error_class=error.error_class,
        error_code=error.code,
        error_message=error.message,
        retryable=error.retryable,
        traceback_digest=digest,
        traceback=[line.rstrip() for line in frames],
        created_at=op.created_at,
        started_at=op.started_at,
        dead_at=now,
        request_id=request_id,
        lane=lane,
        recovery_command=command,
        recovery=recovery,
        key=evidence_key(op),
        checkpoint=op.checkpoint,
    )
