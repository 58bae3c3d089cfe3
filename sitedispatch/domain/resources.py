"""Resource definitions shared by the CDK stack and the local runtime: queues, functions, schedules, the bucket.

Tables are defined by their pynamodb models (`sitedispatch.aws.tables`). Each resource names the Settings field that
carries its URL or name into a function's environment, so no environment variable name is typed twice.
"""

from __future__ import annotations

from dataclasses import dataclass

ENV_PREFIX = "SITEDISPATCH_"  # every setting's environment variable starts with it
API_URL_VARIABLE = f"{ENV_PREFIX}API_URL"  # where a client finds the API (not a function setting: clients only)
DEFAULT_FUNCTION_TIMEOUT_S = 30  # the local runtime's function timeout (its queues' visibility is 6x this)
# CDK context of the template the local cloud deploys (local/template.py): every function's timeout capped at this
# (and so each queue's visibility), so that a killed worker's message comes back in a test's time; and the asset
# left unbundled (the local runtime runs the checkout's code). Nothing else of the template differs.
FUNCTION_TIMEOUT_CONTEXT = "sitedispatch:functionTimeoutS"
LOCAL_CODE_CONTEXT = "sitedispatch:localCode"
# API function environments of the local API: requests served at once (a long poll holds one). Lambda scales a
# function to the requests at once; ten serve a producer's burst of ten without queueing one behind another.
LOCAL_API_ENVIRONMENTS = 10

# The queues' redrive policy is a backstop only: the worker dead-letters by itself after the attempt budget.
# Deferrals (paused site, held lease) also raise SQS's receive count, so the backstop sits far above the budget.
REDRIVE_BACKSTOP_RECEIVES = 100
VISIBILITY_PER_TIMEOUT = 6  # AWS's guidance for SQS event sources: visibility >= 6 x function timeout
RETENTION_S = 14 * 24 * 3600
SECRET_NAME_PREFIX = "sitedispatch/"  # site credentials in Secrets Manager: the operations workers read only these
LAMBDA_MAX_TIMEOUT_S = 900
OPERATIONS_WORK, PUBLICATION_WORK, EVENT_WORK, WEBHOOK_WORK = "operations", "publications", "events", "webhooks"
# Webhook endpoints' signing secrets: apart from the site credentials (SECRET_NAME_PREFIX), so neither reader can
# read the other's
WEBHOOK_SECRET_PREFIX = "sitedispatch-webhooks/"
EVENT_BUS_LOGICAL_ID, EVENT_BUS_FIELD = "EventBus", "event_bus"


@dataclass(frozen=True)
class QueueSpec:
    role: str
    logical_id: str
    url_field: str  # Settings field holding the queue URL
    dlq_logical_id: str
    dlq_url_field: str
    function: str  # FunctionSpec.role consuming it
    carries: str = OPERATIONS_WORK  # what its messages name: operations (QueueMessage) or publications

    def local_name(self, prefix: str) -> str:
        return f"{prefix}-{self.role}.fifo"

    def local_dlq_name(self, prefix: str) -> str:
        return f"{prefix}-{self.role}-dlq.fifo"


@dataclass(frozen=True)
class FunctionSpec:
    role: str
    logical_id: str
    handler: str  # "module.function"
    timeout_s: int
    memory_mb: int
    batch_size: int  # event source mapping batch size (0: not queue-driven)

    def capped(self, timeout_s: int | None) -> int:
        """The timeout a deployment gives the function: its own, or at most `timeout_s` (FUNCTION_TIMEOUT_CONTEXT)."""
        return min(self.timeout_s, timeout_s) if timeout_s else self.timeout_s

    def lambda_environment(self, region: str) -> dict[str, str]:
        """The variables Lambda itself sets in each of the function's execution environments (the ones this code
        reads: a function's module starts its init phase when it finds LAMBDA_FUNCTION_NAME_ENV)."""
        return {
            LAMBDA_FUNCTION_NAME_ENV: self.logical_id,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(self.memory_mb),
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_REGION": region,
        }


# Set by Lambda in every execution environment (and by the local runtime's), never by a test or a tool that imports a
# function's module.
LAMBDA_FUNCTION_NAME_ENV = "AWS_LAMBDA_FUNCTION_NAME"


@dataclass(frozen=True)
class ScheduleSpec:
    name: str
    rate_s: int
    function: str


FUNCTIONS: dict[str, FunctionSpec] = {
    "operations": FunctionSpec(
        "operations",
        "OperationsWorker",
        "sitedispatch.functions.operations_worker.handler",
        timeout_s=120,
        memory_mb=1024,
        batch_size=1,
    ),
    "publications": FunctionSpec(
        "publications",
        "PublicationWorker",
        "sitedispatch.functions.publication_worker.handler",
        timeout_s=120,
        memory_mb=1024,
        batch_size=1,
    ),
    # The bulk lane's consumer: the same code as the operations worker, given Lambda's longest timeout and a whole
    # vCPU (1,769 MB), because an import is the one operation that grows with its input (bench/import.py measures
    # how far one invocation goes). Its queue's visibility is 6 x 900 s; the lease, not the visibility,
    # decides when a stalled import is taken over (heartbeats every 100 items).
    "bulk": FunctionSpec(
        "bulk",
        "BulkOperationsWorker",
        "sitedispatch.functions.operations_worker.handler",
        timeout_s=LAMBDA_MAX_TIMEOUT_S,
        memory_mb=1769,
        batch_size=1,
    ),
    "reconciler": FunctionSpec(
        "reconciler",
        "Reconciler",
        "sitedispatch.functions.reconciler.handler",
        timeout_s=60,
        memory_mb=512,
        batch_size=0,
    ),
    # Events: each batch gives its events their places in their principals' feeds and puts them on the bus.
    "events": FunctionSpec(
        "events",
        "EventsWorker",
        "sitedispatch.functions.events_worker.handler",
        timeout_s=30,
        memory_mb=512,
        batch_size=10,
    ),
    # Webhooks: one wake of one endpoint at a time (its message group); an attempt takes at most 15 s, a wake starts
    # none after 60 s (webhooks/deliverer.py WAKE_BUDGET_S).
    "webhooks": FunctionSpec(
        "webhooks",
        "WebhooksWorker",
        "sitedispatch.functions.webhooks_worker.handler",
        timeout_s=120,
        memory_mb=512,
        batch_size=1,
    ),
    # The HTTP API's one function. 29 s: the longest integration timeout of an HTTP API (a long poll waits 20 s).
    "api": FunctionSpec("api", "Api", "sitedispatch.functions.api.handler", timeout_s=29, memory_mb=1024, batch_size=0),
}

QUEUES: dict[str, QueueSpec] = {
    "operations": QueueSpec(
        "operations",
        "OperationsQueue",
        "operations_queue_url",
        "OperationsDeadLetterQueue",
        "operations_dlq_url",
        function="operations",
    ),
    # Bulk work (imports) has its own lane and its own function, so a tenant's thousand imports never stand between
    # anyone's provision and a free worker (each lane's event source mapping has its own maximum concurrency), and
    # an import may run as long as Lambda allows without lengthening the interactive lane's timeout.
    "bulk": QueueSpec(
        "bulk",
        "BulkOperationsQueue",
        "bulk_queue_url",
        "BulkOperationsDeadLetterQueue",
        "bulk_dlq_url",
        function="bulk",
    ),
    "publications": QueueSpec(
        "publications",
        "PublicationsQueue",
        "publications_queue_url",
        "PublicationsDeadLetterQueue",
        "publications_dlq_url",
        function="publications",
        carries=PUBLICATION_WORK,
    ),
    # One message per event, grouped by principal: a principal's events take their feed places one batch at a time.
    "events": QueueSpec(
        "events",
        "EventsQueue",
        "events_queue_url",
        "EventsDeadLetterQueue",
        "events_dlq_url",
        function="events",
        carries=EVENT_WORK,
    ),
    # One message per wake of a webhook endpoint, grouped by endpoint: its deliveries go one at a time, in order. A
    # failed attempt holds its message invisible until the next attempt is due (up to 12 h, SQS's longest), which
    # holds the endpoint's later wakes behind it.
    "webhooks": QueueSpec(
        "webhooks",
        "WebhooksQueue",
        "webhooks_queue_url",
        "WebhooksDeadLetterQueue",
        "webhooks_dlq_url",
        function="webhooks",
        carries=WEBHOOK_WORK,
    ),
}


def operation_lanes() -> list[str]:
    """The queues that carry operations (interactive and bulk), in definition order."""
    return [role for role, spec in QUEUES.items() if spec.carries == OPERATIONS_WORK]


def operation_workers() -> list[str]:
    """The functions that consume operation lanes (each runs the operations worker's code)."""
    return sorted({QUEUES[lane].function for lane in operation_lanes()})


SCHEDULES: dict[str, ScheduleSpec] = {
    "reconcile": ScheduleSpec("reconcile", 60, "reconciler"),
    "wp-events": ScheduleSpec("wp-events", 60, "reconciler"),
    "queue-repair": ScheduleSpec("queue-repair", 300, "reconciler"),
}

BUCKET_LOGICAL_ID = "DispatchBucket"
BUCKET_FIELD = "bucket"
TABLE_FIELDS = {
    "operations": "operations_table",
    "sites": "sites_table",
    "commits": "commits_table",
    "publications": "publications_table",
    "counters": "counters_table",
    "audit": "audit_table",
    "events": "events_table",
    "feed": "feed_table",
    "webhooks": "webhooks_table",
    "deliveries": "deliveries_table",
}


def visibility_timeout_s(function_timeout_s: int) -> int:
    return VISIBILITY_PER_TIMEOUT * function_timeout_s
