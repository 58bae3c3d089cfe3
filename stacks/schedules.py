"""ReconcilerSchedules: EventBridge Scheduler invokes the reconciler with {"schedule": NAME} at each rate (DESIGN.md
"Schedules"); failed deliveries are retried and then kept in a dead-letter queue, never dropped."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from sitedispatch.domain.resources import SCHEDULES

RETRY_ATTEMPTS = 2
MAX_EVENT_AGE = Duration.minutes(5)  # a sweep older than one period is replaced by the next one anyway


class ReconcilerSchedules(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, functions: dict[str, lambda_.IFunction]) -> None:
        super().__init__(scope, construct_id)
        self.dead_letter_queue = sqs.Queue(
            self,
            "ScheduleDeadLetterQueue",
            enforce_ssl=True,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            retention_period=Duration.days(14),
        )
        self.schedules: dict[str, scheduler.Schedule] = {}
        for name, spec in SCHEDULES.items():
            self.schedules[name] = scheduler.Schedule(
                self,
                "".join(part.capitalize() for part in name.split("-")),
                description=f"sitedispatch reconciler: {name}",
                schedule=scheduler.ScheduleExpression.rate(Duration.seconds(spec.rate_s)),
                target=targets.LambdaInvoke(
                    functions[spec.function],
                    input=scheduler.ScheduleTargetInput.from_object({"schedule": name}),
                    retry_attempts=RETRY_ATTEMPTS,
                    max_event_age=MAX_EVENT_AGE,
                    dead_letter_queue=self.dead_letter_queue,
                ),
            )
