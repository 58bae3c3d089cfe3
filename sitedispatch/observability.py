"""One Logger, Metrics and Tracer for the whole service (Powertools). Building them has no AWS side effect."""

from __future__ import annotations

from enum import StrEnum

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit

SERVICE = "sitedispatch"
NAMESPACE = "SiteDispatch"
# What every deployed function's environment says to Powertools (the stack sets it; the cold-start bench copies it).
POWERTOOLS_ENVIRONMENT = {
    "POWERTOOLS_SERVICE_NAME": SERVICE,
    "POWERTOOLS_METRICS_NAMESPACE": NAMESPACE,
    "POWERTOOLS_LOG_LEVEL": "INFO",
}

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
# Patched: what the functions call out through. botocore (every AWS request) and httplib (urllib3 to WordPress sites
# goes through http.client); patching everything X-Ray knows imports requests, sqlite3 and more on every cold start
# for calls this code never makes.
TRACED_MODULES = ("botocore", "httplib")
tracer = Tracer(service=SERVICE, patch_modules=TRACED_MODULES)


class Metric(StrEnum):
    """Every metric the service emits, by the name CloudWatch shows (the dashboard and alarms name these)."""

    AttemptContinued = "AttemptContinued"
    AttemptStarted = "AttemptStarted"
    AuthorizationRefused = "AuthorizationRefused"
    Backpressured = "Backpressured"
    DuplicateAcknowledged = "DuplicateAcknowledged"
    DuplicateCommitAvoided = "DuplicateCommitAvoided"
    LeaseLost = "LeaseLost"
    MalformedMessage = "MalformedMessage"
    OperationAccepted = "OperationAccepted"
    OperationCancelled = "OperationCancelled"
    OperationContinued = "OperationContinued"
    OperationDead = "OperationDead"
    OperationDeferred = "OperationDeferred"
    OperationDuration = "OperationDuration"
    OperationReleased = "OperationReleased"
    OperationRetried = "OperationRetried"
    OperationSucceeded = "OperationSucceeded"
    OperationSuperseded = "OperationSuperseded"
    OperationWaiting = "OperationWaiting"
    OperationsRedriven = "OperationsRedriven"
    PrincipalRunningCapDeferred = "PrincipalRunningCapDeferred"
    PublicationChunkContinued = "PublicationChunkContinued"
    PublicationFinishRecovered = "PublicationFinishRecovered"
    PublicationLatency = "PublicationLatency"
    PublicationPlanned = "PublicationPlanned"
    PublicationPromoted = "PublicationPromoted"
    PublicationStepRetried = "PublicationStepRetried"
    PublicationSuperseded = "PublicationSuperseded"
    PublicationUnknown = "PublicationUnknown"
    QueueDelay = "QueueDelay"
    ReconcileStepFailed = "ReconcileStepFailed"
    RetryBudgetExhausted = "RetryBudgetExhausted"
    RoutesRendered = "RoutesRendered"
    SiteAutoPaused = "SiteAutoPaused"


def count(name: str, value: float = 1) -> None:
    """`name`: a Metric, or a name of a family built per lane or per repair (the reconciler's)."""
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


def seconds(name: str, value: float) -> None:
    metrics.add_metric(name=name, unit=MetricUnit.Seconds, value=value)


class _CurrentStderr:
    """Whatever sys.stderr is at write time (test runners and shells swap it)."""

    def write(self, text: str) -> int:
        import sys

        return sys.stderr.write(text)

    def flush(self) -> None:
        import sys

        sys.stderr.flush()


def to_stderr(level: str = "WARNING") -> None:
    """For command-line use: keep stdout for the command's own output (tables, --json documents)."""
    import logging

    handler = logger.registered_handler
    if isinstance(handler, logging.StreamHandler):
        handler.setStream(_CurrentStderr())
    logger.setLevel(level)


def bind(**keys: object) -> None:
    """Append keys (site_id, operation_id, attempt) to every following log record of this invocation."""
    logger.append_keys(**keys)
