"""What the API's routes take and give: pydantic request bodies (validated by Powertools, described in the OpenAPI
document) and the response shapes the core does not already define as dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sitedispatch.domain.model import PRINCIPAL_PATTERN, SITE_ID_PATTERN, Kind, Operation
from sitedispatch.operations.estimates import DelayEstimate

SITE_ID = SITE_ID_PATTERN.pattern
PRINCIPAL = PRINCIPAL_PATTERN.pattern
DIGEST = r"^[0-9a-f]{64}$"
REASON_CHARS = 1000


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is an error, not silently ignored


class SubmitRequest(Body):
    """The core validates kind, site id and params, and names the field it refuses (one set of rules for every
    way in)."""

    kind: str = Field(max_length=40, description=" | ".join(k.value for k in Kind))
    site_id: str = Field(max_length=63, description=f"a site id: {SITE_ID}")
    params: dict[str, Any] = Field(default_factory=dict, description="the kind's input (see the kinds' schemas)")


class RegisterSiteRequest(Body):
    site_id: str = Field(max_length=63, description=f"a site id: {SITE_ID}")
    driver: str = Field(default="wordpress", description="reference | wordpress")
    url: str | None = Field(default=None, max_length=2048, description="a WordPress site's home URL")
    credential: str | None = Field(
        default=None,
        max_length=2048,
        description="file:///path.json or a Secrets Manager secret holding the application password; only this "
        "reference is stored",
    )


class ReasonRequest(Body):
    reason: str = Field(default="", max_length=REASON_CHARS)


class ReplayRequest(ReasonRequest):
    input: dict[str, Any] | None = Field(default=None, description="a corrected input (for an import: an upload's)")


class RedriveRequest(ReplayRequest):
    operation_id: str | None = None
    site_id: str | None = Field(default=None, pattern=SITE_ID)
    error_code: str | None = Field(default=None, max_length=100)
    all: bool = False
    dry_run: bool = False


class QuotaRequest(Body):
    principal: str = Field(pattern=PRINCIPAL)
    max_outstanding: int | None = None
    max_running: int | None = None
    reason: str = Field(default="", max_length=REASON_CHARS)


class UploadRequest(Body):
    site_id: str = Field(pattern=SITE_ID)
    sha256: str = Field(pattern=DIGEST, description="hex SHA-256 of the file: S3 refuses any other body")
    bytes: int = Field(ge=1, description="the file's size")


class ReconcileRequest(Body):
    schedule: str = Field(default="reconcile", description="reconcile | wp-events | queue-repair")


@dataclass(frozen=True)
class SubmittedOperation:
    operation_id: str
    site_id: str
    kind: Kind
    status: str
    created: bool  # False: the idempotency key named an existing operation with the same input
    input_digest: str


@dataclass(frozen=True)
class OperationDetail(Operation):
    """An operation, and for one still waiting its estimated delay and what decided it."""

    estimated_delay_s: float | None = None
    estimate: DelayEstimate | None = None
    waiting_because: str | None = None  # "paused: REASON" when its site is paused (no estimate then)

    @classmethod
    def of(cls, op: Operation, **extra: Any) -> OperationDetail:
        return cls(**{f.name: getattr(op, f.name) for f in fields(Operation)}, **extra)


@dataclass(frozen=True)
class DeadLetterView:
    operation_id: str
    site_id: str
    kind: Kind
    principal: str
    epoch: int
    attempt: int
    attempt_budget: int
    dead_at: float | None
    evidence: dict[str, Any] | None


@dataclass(frozen=True)
class ErrorBody:
    """Every error of every route: `error` is a stable code, `message` one line for a person."""

    error: str
    message: str
    field: str | None = None
    limit: str | None = None
    value: int | None = None
    maximum: int | None = None
    retry_after_s: float | None = None
    estimated_delay_s: float | None = None
