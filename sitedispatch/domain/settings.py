"""Runtime settings: one frozen object built from environment variables once.

The environment variable of each field is `SITEDISPATCH_<FIELD>`; `env_name()` is the single place that spelling lives,
so the CDK stack and the local runtime derive their environments from this model instead of retyping names.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sitedispatch.domain.resources import ENV_PREFIX

__all__ = ["ENV_PREFIX", "Settings"]


class Settings(BaseModel):
    """What every function and the CLI need to find resources and apply policy. A field not passed is read from its
    environment variable; the values are validated (and converted from text) by pydantic."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    region: str = Field(default="us-east-1", description="AWS region of every resource")
    operations_queue_url: str
    operations_dlq_url: str
    bulk_queue_url: str
    bulk_dlq_url: str
    publications_queue_url: str
    publications_dlq_url: str
    events_queue_url: str
    events_dlq_url: str
    webhooks_queue_url: str
    webhooks_dlq_url: str
    operations_table: str
    sites_table: str
    commits_table: str
    publications_table: str
    counters_table: str
    audit_table: str
    events_table: str
    feed_table: str
    webhooks_table: str
    deliveries_table: str
    bucket: str
    event_bus: str = Field(description="the EventBridge bus every event is put on")
    webhooks_allow_loopback: bool = Field(
        default=False,
        description="let webhooks go to loopback addresses over plain http (the local runtime; never a deployment)",
    )
    webhook_retry_scale: float = Field(
        default=1.0, gt=0, le=1, description="shrinks the webhook retry schedule and window (tests: 24 h in seconds)"
    )

    attempt_budget: int = Field(default=5, ge=1, le=100)
    lease_seconds: float = Field(default=60.0, gt=0, description="mutation lease duration; heartbeats extend it")
    backoff_base_s: float = Field(default=2.0, gt=0)
    backoff_cap_s: float = Field(default=900.0, gt=0)
    defer_max_s: float = Field(
        default=30.0, gt=0, description="longest deferral while another operation holds the lease"
    )
    max_input_bytes: int = Field(default=256 * 1024, gt=0)
    max_outstanding_global: int = Field(default=10_000, ge=1, description="accepted, not yet terminal, in all")
    max_outstanding_per_principal: int = Field(
        default=2_000, ge=1, description="accepted, not yet terminal, per caller"
    )
    max_outstanding_per_tenant: int = Field(
        default=2_000, ge=1, description="accepted, not yet terminal, per tenant a caller names (its fairness key)"
    )
    max_running_per_principal: int = Field(
        default=10,
        ge=1,
        description="attempts one fairness key (a principal, or a tenant it names) runs at once "
        "in each lane (interactive, bulk); set below the lane's concurrency",
    )
    max_queued_per_site: int = Field(default=50, ge=1, description="keeps one site's FIFO group short")
    expected_concurrency: int = Field(
        default=10,
        ge=1,
        description="operations running at once (the event source mapping's maximum concurrency), for delay estimates",
    )
    default_operation_s: float = Field(default=30.0, gt=0, description="operation time assumed before one is measured")
    pause_deferral_s: float = Field(
        default=300.0, gt=0, description="how long a paused site's message waits before it is looked at again"
    )
    retry_budget_ratio: float = Field(default=0.1, gt=0, le=1, description="retries allowed per recent execution")
    retry_budget_min_retries: int = Field(default=10, ge=1, description="retries before the budget applies at all")
    retry_budget_defer_s: float = Field(default=60.0, gt=0, description="delay of a retry while the budget is spent")
    auto_pause_failures: int = Field(default=5, ge=1, description="consecutive failed attempts that pause a site")
    dependency_failures_to_open: int = Field(
        default=5,
        ge=1,
        description="failures of the destination in one window, from 2 sites or more, that open a dependency",
    )
    dependency_window_s: float = Field(default=60.0, gt=0, description="the breaker's window for counting failures")
    dependency_cooldown_s: float = Field(default=30.0, gt=0, description="an open breaker's wait before its probe")
    dependency_cooldown_max_s: float = Field(
        default=600.0, gt=0, description="the longest cooldown (each failed probe doubles it)"
    )
    dependency_probe_timeout_s: float = Field(default=120.0, gt=0, description="a probe quiet this long is replaced")
    max_upload_bytes: int = Field(default=2 * 1024**3, gt=0, description="largest file `submit import` stages")
    publication_chunk_routes: int = Field(default=25, ge=1, le=1000, description="routes per publication chunk")
    publication_slice_s: float = Field(
        default=10.0,
        gt=0,
        description="longest one delivery renders a publication chunk before it stores its part and hands the rest on",
    )
    import_step_items: int = Field(
        default=10_000, ge=1, description="items an import step merges before it records a checkpoint"
    )
    import_step_s: float = Field(
        default=60.0, gt=0, description="longest an import step runs before it records a checkpoint"
    )
    operators: str = Field(
        default="operator",
        description="comma-separated caller identities (locally the --as "
        "name; on AWS IAM ARNs, * as a wildcard) that act on every site",
    )
    readers: str = Field(
        default="",
        description="comma-separated caller identities (as operators) that read what operators read and may do "
        "nothing: every request but a read is refused (403) and audited",
    )
    reference_latency_s: float = Field(
        default=0.0,
        ge=0,
        description="simulated service latency of the reference runtime's provisioning (a real WordPress install "
        "takes seconds); 0 in production code paths, set by demos and parallelism tests",
    )

    def __init__(self, **values: Any) -> None:
        # Reading the environment is eight lines, not a dependency: pydantic-settings would add to every cold start
        # the imports of its CLI, dotenv and cloud secret sources for this loop.
        fields = type(self).model_fields
        found = {name: os.environ[self.env_name(name)] for name in fields if self.env_name(name) in os.environ}
        super().__init__(**{**found, **values})

    @classmethod
    def env_name(cls, field: str) -> str:
        """The environment variable that carries `field`."""
        if field not in cls.model_fields:
            raise KeyError(field)
        return f"{ENV_PREFIX}{field.upper()}"

    def to_environment(self) -> dict[str, str]:
        """This object as the environment variables that rebuild it."""
        return {self.env_name(name): str(value) for name, value in self.model_dump().items()}
