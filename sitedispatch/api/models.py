"""What the API's routes take and give: pydantic request bodies (validated by Powertools, described in the OpenAPI
document) and the response shapes the core does not already define as dataclasses."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from sitedispatch.domain.dependencies import ALL_KINDS, DEPENDENCY_ID, MAX_DEPENDENCIES_PER_SITE, MAX_RATES
from sitedispatch.domain.events import EventType
from sitedispatch.domain.model import (
    DRIVERS,
    ENDPOINT_PATTERN,
    NOT_BLANK_PATTERN,
    PRINCIPAL_PATTERN,
    REFERENCE_DRIVER,
    SITE_ID_PATTERN,
    TENANT_PATTERN,
    WORDPRESS_DRIVER,
    Kind,
    Operation,
    Publication,
    Status,
)
from sitedispatch.domain.schemas import INTEGRAL, SCHEMAS
from sitedispatch.domain.settings import Settings
from sitedispatch.domain.webhooks import MAX_REDELIVERY
from sitedispatch.drivers.wordpress.credentials import CREDENTIAL_PATTERN
from sitedispatch.flow.estimates import DelayEstimate
from sitedispatch.operations.progress import Progress
from sitedispatch.webhooks.destination import URL_PATTERN

SITE_ID = SITE_ID_PATTERN.pattern
PRINCIPAL = PRINCIPAL_PATTERN.pattern
TENANT = TENANT_PATTERN.pattern
DIGEST = r"^[0-9a-f]{64}$"
ENDPOINT = ENDPOINT_PATTERN.pattern
NOT_BLANK = NOT_BLANK_PATTERN.pattern
DEPENDENCY = DEPENDENCY_ID.pattern
WEBHOOK_URL = URL_PATTERN.pattern
REASON_CHARS = 1000

# JSON's number grammar: a query parameter the document states as an integer or a number is that text and nothing
# around it (pydantic, as Python's int() and float(), would read "6\v" or " 6" as 6: a fuzzer's "6\x0b" was).
NUMBER_TEXT = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")


def _number_text(value: Any) -> Any:
    if isinstance(value, str) and not NUMBER_TEXT.fullmatch(value):
        raise ValueError(f"{value!r} is not a number")
    return value


# The last mark of a numeric query parameter, `Annotated[int, Query(ge=1), NUMBER]` (last, as INTEGRAL: the bounds
# still reach the document).
NUMBER = BeforeValidator(_number_text)
# The deployment's defaults, as the document states them (an operator who lowers a limit narrows what is accepted).
GLOBAL_MAXIMUM = Settings.model_fields["max_outstanding_global"].default
UPLOAD_MAXIMUM = Settings.model_fields["max_upload_bytes"].default


class Body(BaseModel):
    # A misspelt field is an error, not silently ignored; and a value is of the type the document states (strict:
    # `"max_outstanding": true` is refused, where pydantic's default would have read it as 1).
    model_config = ConfigDict(extra="forbid", strict=True)


def _params_of_each_kind(schema: dict[str, Any]) -> None:
    """The document states each kind's `params` (the core validates them with these same models, item by item in
    a batch): one branch per kind, its params required when its model has required fields."""
    branches = []
    for kind, model in SCHEMAS.items():
        params = model.model_json_schema()
        branch: dict[str, Any] = {"properties": {"kind": {"const": kind.value}, "params": params}}
        if params.get("required"):
            branch["required"] = ["params"]
        branches.append(branch)
    schema["oneOf"] = branches


class SubmitRequest(Body):
    """Kind, site id, tenant and params are checked by the core, which names the field it refuses (one set of rules
    for every way in, and a batch answers a bad item alone); the document states the same rules."""

    model_config = ConfigDict(json_schema_extra=_params_of_each_kind)

    kind: str = Field(max_length=40, json_schema_extra={"enum": [k.value for k in Kind]})
    site_id: str = Field(max_length=63, description="a site id", json_schema_extra={"pattern": SITE_ID})
    params: dict[str, Any] = Field(default_factory=dict, description="the kind's input")
    tenant: str | None = Field(
        default=None,
        max_length=128,
        json_schema_extra={"pattern": TENANT},
        description="the fairness key: a customer you act for; limits, running caps, queue shares, quotas and "
        "estimates apply per (you, tenant). Default: you",
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


def _one_driver(schema: dict[str, Any]) -> None:
    """A reference site has no endpoint or credential; a WordPress site (the default driver) needs both."""
    schema["oneOf"] = [
        {
            "properties": {
                "driver": {"const": REFERENCE_DRIVER},
                "url": {"type": "null"},
                "credential": {"type": "null"},
            },
            "required": ["driver"],
        },
        {
            "properties": {
                "driver": {"const": WORDPRESS_DRIVER},
                "url": {"type": "string", "pattern": ENDPOINT},
                "credential": {"type": "string", "pattern": CREDENTIAL_PATTERN.pattern},
            },
            "required": ["url", "credential"],
        },
    ]


class RegisterSiteRequest(Body):
    """Checked by the core (which names the field it refuses); the document states the same rules."""

    model_config = ConfigDict(json_schema_extra=_one_driver)

    site_id: str = Field(max_length=63, description="a site id", json_schema_extra={"pattern": SITE_ID})
    driver: str = Field(default=WORDPRESS_DRIVER, json_schema_extra={"enum": list(DRIVERS)})
    url: str | None = Field(default=None, max_length=2048, description="a WordPress site's home URL")
    credential: str | None = Field(
        default=None,
        max_length=2048,
        description="file:///path.json or a Secrets Manager secret holding the application password; only this "
        "reference is stored",
    )
    dependencies: DependencyIds = Field(default_factory=list)


class ReasonRequest(Body):
    reason: str = Field(default="", max_length=REASON_CHARS)


class RequiredReasonRequest(Body):
    reason: str = Field(min_length=1, max_length=REASON_CHARS, pattern=NOT_BLANK, description="for the audit trail")


DependencyIds = Annotated[
    list[Annotated[str, Field(pattern=DEPENDENCY)]],
    Field(
        max_length=MAX_DEPENDENCIES_PER_SITE,
        description="what the site shares with other sites (TYPE:NAME, e.g. db:cluster-7); a repeated id counts once",
    ),
]


class SiteDependenciesRequest(Body):
    dependencies: DependencyIds
    reason: str = Field(min_length=1, max_length=REASON_CHARS, pattern=NOT_BLANK, description="for the audit trail")


class RateRequest(Body):
    kind: str = Field(
        default="all",
        description="the kind it limits, or all kinds",
        json_schema_extra={"enum": [ALL_KINDS, *(k.value for k in Kind)]},
    )
    limit: Annotated[int, Field(ge=1, le=GLOBAL_MAXIMUM), INTEGRAL] = Field(description="starts per period")
    period_s: Annotated[float, Field(gt=0, le=7 * 86_400), NUMBER] = Field(description="the period, in seconds")
    burst: Annotated[int, Field(ge=1, le=GLOBAL_MAXIMUM), INTEGRAL] = Field(
        default=1, description="starts allowed at once ahead of the pace"
    )


class DependencyRequest(Body):
    """Replaces what was set: an absent cap is no cap, no rates is no rate."""

    max_running: Annotated[int, Field(ge=1, le=GLOBAL_MAXIMUM), INTEGRAL] | None = Field(
        default=None, description="attempts running at once on it, across every principal and lane"
    )
    rates: list[RateRequest] = Field(default_factory=list, max_length=MAX_RATES, description="one per kind at most")
    reason: str = Field(min_length=1, max_length=REASON_CHARS, pattern=NOT_BLANK, description="for the audit trail")


class ReplayRequest(ReasonRequest):
    input: dict[str, Any] | None = Field(
        default=None,
        description="a corrected input: the operation's kind's params (for an import: an upload's)",
        json_schema_extra={"anyOf": [*(model.model_json_schema() for model in SCHEMAS.values()), {"type": "null"}]},
    )


def _a_selection(schema: dict[str, Any]) -> None:
    """At least one selector (they combine: an operation is selected when it matches every one given); a
    replacement input names its operation."""
    schema["anyOf"] = [
        {"required": ["operation_id"], "properties": {"operation_id": {"type": "string"}}},
        {"required": ["site_id"], "properties": {"site_id": {"type": "string"}}},
        {"required": ["error_code"], "properties": {"error_code": {"type": "string"}}},
        {"required": ["all"], "properties": {"all": {"const": True}}},
    ]
    named = {"required": ["operation_id"], "properties": {"operation_id": {"type": "string"}}}
    schema["dependentSchemas"] = {"input": {"anyOf": [named, {"properties": {"input": {"type": "null"}}}]}}


class RedriveRequest(ReplayRequest):
    model_config = ConfigDict(json_schema_extra=_a_selection)

    operation_id: str | None = Field(default=None, min_length=1, max_length=100)
    site_id: str | None = Field(default=None, pattern=SITE_ID)
    error_code: str | None = Field(default=None, min_length=1, max_length=100)
    all: bool = Field(default=False, description="every dead operation (without another selector)")
    dry_run: bool = False


def _a_limit(schema: dict[str, Any]) -> None:
    schema["anyOf"] = [
        {"required": [name], "properties": {name: {"type": "integer"}}} for name in ("max_outstanding", "max_running")
    ] + [{"required": ["rates"], "properties": {"rates": {"type": "array"}}}]


class QuotaRequest(Body):
    model_config = ConfigDict(json_schema_extra=_a_limit)

    principal: str = Field(pattern=PRINCIPAL)
    tenant: str | None = Field(default=None, pattern=TENANT, description="one of its tenants' limits instead")
    max_outstanding: Annotated[int, Field(ge=1, le=GLOBAL_MAXIMUM), INTEGRAL] | None = None
    max_running: Annotated[int, Field(ge=1, le=GLOBAL_MAXIMUM), INTEGRAL] | None = None
    rates: list[RateRequest] | None = Field(
        default=None,
        max_length=MAX_RATES,
        description="starts per period of the key (a principal's: all its tenants' together), one per kind at most; "
        "absent: as they are, []: none",
    )
    reason: str = Field(min_length=1, max_length=REASON_CHARS, pattern=NOT_BLANK, description="for the audit trail")


class UploadRequest(Body):
    site_id: str = Field(pattern=SITE_ID)
    sha256: str = Field(pattern=DIGEST, description="hex SHA-256 of the file: S3 refuses any other body")
    bytes: Annotated[
        int, Field(ge=1, le=UPLOAD_MAXIMUM, description="the file's size (at most this deployment's limit)"), INTEGRAL
    ]


class ReconcileRequest(Body):
    schedule: Literal["reconcile", "wp-events", "queue-repair"] = "reconcile"


@dataclass(frozen=True)
class OperationDetail(Operation):
    """An operation, and for one still waiting its estimated delay and what decided it; for a long one not yet
    ended, its progress from the last checkpoint (steps, items, bytes of its file, the measured rate and the ETA);
    for one that committed a change to publish, that publication as it is now (its chunks, its steps retried and the
    last reason)."""

    estimated_delay_s: float | None = None
    estimate: DelayEstimate | None = None
    waiting_because: str | None = None  # its site paused ("paused: REASON", no estimate), or a dependency holds it
    progress: Progress | None = None
    publication: Publication | None = None

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
        415: "the body is declared (Content-Type) as something other than application/json",
        422: "a field is invalid (named in `field`)",
        429: "a limit is full: nothing was written; retry after Retry-After",
    }
    errors = {
        status: {"description": text, "content": {"application/json": {"model": ErrorBody}}}
        for status, text in described.items()
    }
    return {200: {"description": "OK"}, **errors}  # no content given: the route's return model describes it


class DependencyFailure(BaseModel):
    model_config = ConfigDict(extra="forbid")

    site_id: str
    operation_id: str
    code: str
    at: float


class EventBody(BaseModel):
    """One event as every consumer receives it (events.schema.json): the common fields, then its type's own. Ids
    and outcomes only: never an input, content, a credential, or an error's message."""

    model_config = ConfigDict(extra="forbid", title="Event")

    id: str = Field(description="stable: every delivery of the event carries it; deduplicate by it")
    type: EventType
    schema_version: Literal[1]
    time: float = Field(description="when the transition happened (epoch seconds)")
    principal: str
    tenant: str | None = None
    site_id: str | None = Field(description="the site it is about (null: webhook.disabled)")
    seq: int | None = Field(default=None, description="its place in the principal's feed (feed entries only)")
    # operation.*
    operation_id: str | None = None
    kind: Kind | None = None
    status: Status | None = None
    epoch: int | None = Field(default=None, description="the operation's attempt epoch (a replay starts a new one)")
    attempt: int | None = None
    accepted_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    error_class: str | None = None
    error_code: str | None = None
    revision_id: str | None = None
    version: int | None = Field(default=None, description="operation.succeeded: the site's head version it made")
    evidence_key: str | None = None
    superseded_by: str | None = None
    # publication.live
    publication_seq: int | None = None
    receipt_key: str | None = None
    # site.paused / site.resumed
    by: str | None = Field(
        default=None, description="the principal itself, `operator`, `sitedispatch`, or (a dependency) `breaker`"
    )
    reason: str | None = Field(default=None, description="site.paused: why; webhook.disabled: gone or failing")
    # webhook.disabled
    endpoint_id: str | None = None
    # dependency.paused / dependency.resumed
    dependency_id: str | None = None
    evidence: list[DependencyFailure] | None = Field(
        default=None, description="dependency.paused by its breaker: the failures of the principal's own sites"
    )


class EventPage(BaseModel):
    events: list[EventBody]
    after: int = Field(description="the cursor: pass it as `after` to continue (it passes places a filter skipped)")


EVENT_TYPES: list[Any] = [t.value for t in EventType]


class WebhookRequest(Body):
    url: str = Field(
        max_length=2048,
        description="where each event is POSTed: https and a public host (a deployed stack refuses http and "
        "hosts that resolve to loopback, private, link-local or metadata addresses; the local runtime allows "
        "loopback over http)",
        json_schema_extra={"pattern": WEBHOOK_URL},
    )
    types: list[str] = Field(
        default_factory=list,
        max_length=len(EVENT_TYPES),
        description="only these event types (none: every type)",
        json_schema_extra={"items": {"type": "string", "enum": EVENT_TYPES}},
    )
    tenant: str | None = Field(default=None, pattern=TENANT, description="only this tenant's events")
    description: str = Field(default="", max_length=200)


class RedeliverRequest(Body):
    from_seq: Annotated[int, Field(ge=1, description="the first feed place to send again"), INTEGRAL]
    count: Annotated[int, Field(ge=1, le=MAX_REDELIVERY, description="how many places, from from_seq on"), INTEGRAL] = 1


class WebhookBody(BaseModel):
    """An endpoint: where it is, what it wants, how far it is in its principal's feed, and how it fares."""

    endpoint_id: str
    url: str
    types: list[EventType] = Field(description="empty: every type")
    tenant: str | None
    description: str
    created_at: float
    enabled: bool
    disabled: Literal["gone", "failing"] | None = Field(description="why it stopped receiving: a 410, or failing")
    disabled_at: float | None
    cursor: int = Field(description="the last feed place it is done with")
    failures: int = Field(description="failed attempts of the event it is on")
    next_attempt_at: float | None
    redelivering: list[int] | None = Field(description="[from, to]: the places being sent again")

    @classmethod
    def of(cls, endpoint: Any) -> WebhookBody:
        return cls(
            endpoint_id=endpoint.endpoint_id,
            url=endpoint.url,
            types=list(endpoint.types),
            tenant=endpoint.tenant,
            description=endpoint.description,
            created_at=endpoint.created_at,
            enabled=endpoint.enabled,
            disabled=endpoint.disabled.value if endpoint.disabled else None,
            disabled_at=endpoint.disabled_at,
            cursor=endpoint.cursor,
            failures=endpoint.failures,
            next_attempt_at=endpoint.next_attempt_at,
            redelivering=list(endpoint.replay) if endpoint.replay else None,
        )


class WebhookCreated(BaseModel):
    endpoint: WebhookBody
    secret: str = Field(description="the signing secret (Standard Webhooks' whsec_ form): shown this once")


class WebhookList(BaseModel):
    endpoints: list[WebhookBody]


class SecretRotated(BaseModel):
    secret: str = Field(description="the new signing secret: shown this once")
    previous_valid_until: float = Field(description="until then each delivery also carries the old one's signature")


class AttemptBody(BaseModel):
    at: float
    status: int | None = Field(description="the receiver's status; null: no answer (see error)")
    duration_s: float
    error: str | None
    response: str = Field(description="the start of the receiver's answer")
    redelivery: bool


class DeliveryBody(BaseModel):
    seq: int
    event_id: str
    type: EventType
    delivered: bool
    attempts: list[AttemptBody]


class DeliveryPage(BaseModel):
    deliveries: list[DeliveryBody]
    before: int | None = Field(description="pass it as `before` for older deliveries (null: none)")
