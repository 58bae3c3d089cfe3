"""Typed domain errors. AWS error codes are mapped to these in `sitedispatch.aws`, never leaked upward."""

from __future__ import annotations

from typing import Any


class SiteDispatchError(Exception):
    """Base of every error the core raises on purpose."""

    code = "error"


class InvalidInput(SiteDispatchError):
    """Refused before anything is written; names the offending field."""

    code = "invalid_input"

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class NotFound(SiteDispatchError):
    code = "not_found"


class NotConfigured(SiteDispatchError):
    """There is no deployment to talk to: no stack named, no environment, no local runtime's env file."""

    code = "not_configured"


class Unreachable(SiteDispatchError):
    """The deployment the settings name does not answer (a local runtime that is not running, a network down)."""

    code = "unreachable"


class Conflict(SiteDispatchError):
    code = "conflict"


class Forbidden(Conflict):
    """The caller may not see or act on this (another principal's site); exit 4 like every refusal."""

    code = "forbidden"


class SiteTaken(Conflict):
    """A site id another principal holds: site ids are one namespace for the deployment, as domain names are."""

    code = "site_taken"


class IdempotencyConflict(Conflict):
    """Same idempotency key, different input."""

    code = "idempotency_conflict"


class AlreadyExists(Conflict):
    """A conditional create found the item (DynamoDB attribute_not_exists, S3 If-None-Match 412)."""

    code = "already_exists"


class LeaseHeld(Conflict):
    """Another operation holds the site's unexpired mutation lease."""

    code = "lease_held"

    def __init__(self, site_id: str, holder: str | None, expires_at: float) -> None:
        super().__init__(f"site {site_id} lease held by {holder} until {expires_at:.3f}")
        self.site_id = site_id
        self.holder = holder
        self.expires_at = expires_at


class StaleFence(Conflict):
    """A write carried a fencing token that is no longer the site's current one."""

    code = "stale_fence"


class AlreadyCommitted(Conflict):
    """The operation's commit record exists: the effect already happened."""

    code = "already_committed"


class NotRunnable(Conflict):
    """The operation is not in a state this step may move it from (terminal, cancelled, budget spent)."""

    code = "not_runnable"


class Backpressure(SiteDispatchError):
    """A flow-control limit was hit: nothing was accepted; retry after `retry_after_s`."""

    code = "backpressure"

    def __init__(
        self,
        message: str,
        *,
        limit: str,
        value: int,
        maximum: int,
        retry_after_s: float,
        estimated_delay_s: float | None,  # None: nothing to estimate by (a paused site's work waits for its resume)
    ) -> None:
        super().__init__(message)
        self.limit = limit
        self.value = value
        self.maximum = maximum
        self.retry_after_s = retry_after_s
        self.estimated_delay_s = estimated_delay_s


class LimitReached(SiteDispatchError):
    """A store refused an admission because a counter is at its maximum (mapped to Backpressure by the core)."""

    code = "limit_reached"

    def __init__(self, counter: str, value: int, maximum: int) -> None:
        super().__init__(f"{counter} at {value} of {maximum}")
        self.counter = counter
        self.value = value
        self.maximum = maximum  # in effect: an operator's quota on this counter, else the deployment's


class ShareMoved(SiteDispatchError):
    """A store refused a placement in a share because the shard's room or waiters changed since it was chosen (a
    release or another submit meanwhile), writing nothing: the core places the operation again."""

    code = "share_moved"

    def __init__(self, counter: str) -> None:
        super().__init__(f"share {counter} changed")
        self.counter = counter


class SiteRegistered(SiteDispatchError):
    """A first submit's transaction found the site registered already (by `sites register`, or a racing submit),
    writing nothing: the core checks that registration and claims the site without registering it."""

    code = "site_registered"


class UnclaimedSite(SiteDispatchError):
    """A store's submit transaction found no owner on the site's counter (a first submit, or a site registered
    before owners were kept there): the core checks the registration and submits again claiming it."""

    code = "unclaimed_site"


class LabelMoved(SiteDispatchError):
    """A submit transaction found the site's counter naming another dependency set than the submitter believed
    (its sites' dependencies changed, or the submitter had not seen the site yet), writing nothing: the core
    submits again with `label`, the one the counter names."""

    code = "label_moved"

    def __init__(self, site_id: str, label: str) -> None:
        super().__init__(f"site {site_id}'s work waits by dependency set {label!r}")
        self.site_id = site_id
        self.label = label


class OperationFailure(SiteDispatchError):
    """Raised by handlers. Subclasses decide between retry and dead."""

    code = "operation_failure"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        if code:
            self.code = code


class PermanentError(OperationFailure):
    """Invalid data, a business rule, revoked access: dead at once, no retries."""

    code = "permanent"


class TransientError(OperationFailure):
    """A dependency hiccup: retried with backoff while attempts remain."""

    code = "transient"


class NotJson(InvalidInput):
    """A request body that is not a JSON document (not UTF-8 text, or not JSON): HTTP 400."""

    code = "not_json"


class NotJsonMediaType(InvalidInput):
    """A request body declared (Content-Type) as something other than JSON: HTTP 415."""

    code = "unsupported_media_type"


class TooLarge(InvalidInput):
    """A request body over the limit of its route (HTTP 413)."""

    code = "too_large"


def error_document(exc: SiteDispatchError) -> dict[str, Any]:
    """The one error body: every API route answers it, the CLI prints it with --json, the client rebuilds the
    exception from it."""
    doc: dict[str, Any] = {"error": exc.code, "message": str(exc)}
    if isinstance(exc, InvalidInput) and exc.field:
        doc["field"] = exc.field
    if isinstance(exc, Backpressure):
        doc.update(
            limit=exc.limit,
            value=exc.value,
            maximum=exc.maximum,
            retry_after_s=exc.retry_after_s,
            estimated_delay_s=exc.estimated_delay_s,
        )
    return doc


def _codes(cls: type[SiteDispatchError]) -> dict[str, type[SiteDispatchError]]:
    found = {cls.code: cls}
    for sub in cls.__subclasses__():
        found.update(_codes(sub))
    return found


def error_from_document(doc: dict[str, Any], status: int) -> SiteDispatchError:
    """The exception an error body stands for (what `error_document` wrote, or the nearest by HTTP status)."""
    code = str(doc.get("error", ""))
    message = str(doc.get("message") or doc.get("error") or f"HTTP {status}")
    if status == 429 or code == Backpressure.code:
        return Backpressure(
            message,
            limit=str(doc.get("limit", "?")),
            value=int(doc.get("value", 0)),
            maximum=int(doc.get("maximum", 0)),
            retry_after_s=float(doc.get("retry_after_s", 1.0)),
            estimated_delay_s=None if doc.get("estimated_delay_s") is None else float(doc["estimated_delay_s"]),
        )
    cls = _codes(SiteDispatchError).get(code) or STATUS_ERRORS.get(status, SiteDispatchError)
    if issubclass(cls, InvalidInput):
        return cls(message, field=doc.get("field"))
    if cls in (LeaseHeld, Backpressure, LimitReached):
        cls = Conflict
    error = cls(message)
    if cls is SiteDispatchError or cls is OperationFailure:
        error.code = code or "error"
    return error


# Each error's HTTP status, most specific first: the API answers with it, a client maps a status back with it.
HTTP_STATUS: tuple[tuple[type[SiteDispatchError], int], ...] = (
    (TooLarge, 413),
    (NotJson, 400),
    (NotJsonMediaType, 415),
    (InvalidInput, 422),
    (NotFound, 404),
    (Forbidden, 403),
    (Conflict, 409),
    (Backpressure, 429),
    (Unreachable, 503),
    (TransientError, 503),  # nothing was done, retry (a transaction that kept meeting others, say)
)


def http_status(exc: SiteDispatchError) -> int:
    return next((status for cls, status in HTTP_STATUS if isinstance(exc, cls)), 500)


# What a status stands for when the body names no code of ours (API Gateway's own refusals, a proxy in between).
STATUS_ERRORS: dict[int, type[SiteDispatchError]] = {
    **{status: cls for cls, status in reversed(HTTP_STATUS)},
    400: NotJson,
    502: Unreachable,
    504: Unreachable,
}
