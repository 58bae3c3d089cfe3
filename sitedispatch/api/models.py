"""What the API's routes take and give: pydantic request bodies (validated by Powertools, described in the OpenAPI
document) and the response shapes the core does not already define as dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sitedispatch.domain.model import PRINCIPAL_PATTERN, SITE_ID_PATTERN, TENANT_PATTERN, Kind, Operation
from sitedispatch.flow.estimates import DelayEstimate
from sitedispatch.operations.progress import Progress

SITE_ID = SITE_ID_PATTERN.pattern
PRINCIPAL = PRINCIPAL_PATTERN.pattern
TENANT = TENANT_PATTERN.pattern
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
    tenant: str | None = Field(
        default=None,
        max_length=128,
        description=f"the fairness key: a customer you act for ({TENANT}); limits, running caps, queue shares, "
        "quotas and estimates apply per (you, tenant). Default: you",
    )


@dataclass(frozen=True)
class SubmittedOperation:
    operation_id: str
    site_id: str
    kind: Kind
    status: str
    created: bool  # False: the idempotency key named an existing operation with the same input
    input_digest: str


class BatchItemRequest(SubmitRequest):
    idempotency_key: str = Field(
        min_length=1, max_length=256, description="this item's key: a batch sent again names the same operations"
    )


class BatchRequest(Body):
    """Up to 500 submits in one request, answered item by item."""

    items: list[BatchItemRequest] = Field(min_length=1, max_length=500)


@dataclass(frozen=True)
class BatchItemAnswer:
    """One item's answer: `status` is what a single submit would have answered (202 new, 200 the same one again,
    or its error status with `error` the one error body)."""

    index: int
    status: int
    operation: SubmittedOperation | None = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True)
class BatchAnswer:
    accepted: int  # new operations
    existing: int  # the same operation again
    refused: int
    items: list[BatchItemAnswer]


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
    tenant: str | None = Field(default=None, pattern=TENANT, description="one of its tenants' limits instead")
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
class OperationDetail(Operation):
    """An operation, and for one still waiting its estimated delay and what decided it; for a long one not yet
    ended, its progress from the last checkpoint (steps, items, bytes of its file, the measured rate and the ETA)."""

    estimated_delay_s: float | None = None
    estimate: DelayEstimate | None = None
    waiting_because: str | None = None  # "paused: REASON" when its site is paused (no estimate then)
    progress: Progress | None = None

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


class ErrorBody(BaseModel):
    """Every error of every route: `error` is a stable code, `message` one line for a person; a refused field is
    named in `field`; a 429 carries the limit and when to retry (also as the Retry-After header)."""

    error: str
    message: str
    field: str | None = None
    limit: str | None = None
    value: int | None = None
    maximum: int | None = None
    retry_after_s: float | None = None
    estimated_delay_s: float | None = None


def error_responses() -> dict[int, Any]:
    """The error statuses every route may answer, each with the one error body (for the OpenAPI document)."""
    described = {
        400: "the body is not JSON",
        403: "an operators' route, or an unsigned request",
        404: "missing, or another tenant's",
        409: "an idempotency or state conflict",
        413: "the body is over the limit",
        422: "a field is invalid (named in `field`)",
        429: "a limit is full: nothing was written; retry after Retry-After",
    }
    errors = {
        status: {"description": text, "content": {"application/json": {"model": ErrorBody}}}
        for status, text in described.items()
    }
    return {200: {"description": "OK"}, **errors}  # no content given: the route's return model describes it
