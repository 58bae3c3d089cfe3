"""DispatchMonitoring: one dashboard with the failure signals, and alarms on them (to an SNS topic from context).

Queues: oldest message age, depth, in flight and DLQ depth. Functions: errors, throttles, duration p50/p99 and
concurrency. The service's own Powertools metrics (namespace SiteDispatch, dimension service): succeeded, retried,
dead, superseded, backpressured, deferred, queue delay p50/p99. Alarms: oldest age per queue, any DLQ message,
each function's error rate, and a reconciler step that failed.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from sitedispatch.observability import NAMESPACE, SERVICE, Metric

PERIOD = Duration.minutes(1)
OLDEST_AGE_ALARM_S = 900  # a message waiting 15 minutes means a lane is stuck or far behind
ERROR_RATE_ALARM = 0.05
SERVICE_COUNTS = (
    Metric.OperationSucceeded,
    Metric.OperationRetried,
    Metric.OperationDead,
    Metric.OperationSuperseded,
    Metric.Backpressured,
    Metric.OperationDeferred,
    Metric.PrincipalRunningCapDeferred,
    Metric.LeaseLost,
)


def service_metric(name: Metric, statistic: str = "Sum") -> cw.Metric:
    return cw.Metric(
        namespace=NAMESPACE, metric_name=name, dimensions_map={"service": SERVICE}, statistic=statistic, period=PERIOD
    )


class DispatchMonitoring(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        queues: dict[str, sqs.Queue],
        dead_letter_queues: dict[str, sqs.Queue],
        functions: dict[str, lambda_.Function],
    ) -> None:
        super().__init__(scope, construct_id)
        topic_arn = self.node.try_get_context("alarmTopicArn")
        self.topic = sns.Topic.from_topic_arn(self, "AlarmTopic", topic_arn) if topic_arn else None
        self.alarms: list[cw.Alarm] = []
        self.dashboard = cw.Dashboard(self, "Dashboard", default_interval=Duration.hours(3))

        for lane, queue in queues.items():
            self._alarm(
                f"{lane}OldestAge",
                queue.metric_approximate_age_of_oldest_message(period=PERIOD),
                OLDEST_AGE_ALARM_S,
                f"the {lane} queue's oldest message has waited over {OLDEST_AGE_ALARM_S // 60} minutes",
            )
        for lane, dlq in dead_letter_queues.items():
            self._alarm(
                f"{lane}DeadLetters",
                dlq.metric_approximate_number_of_messages_visible(period=PERIOD),
                0,
                f"dead letters in the {lane} DLQ: see `sitedispatch dlq list`",
                evaluation_periods=1,
            )
        for role, function in functions.items():
            rate = cw.MathExpression(
                expression="IF(invocations > 0, errors / invocations, 0)",
                period=PERIOD,
                using_metrics={
                    "errors": function.metric_errors(period=PERIOD),
                    "invocations": function.metric_invocations(period=PERIOD),
                },
                label=f"{role} error rate",
            )
            self._alarm(
                f"{role}ErrorRate",
                rate,
                ERROR_RATE_ALARM,
                f"over {ERROR_RATE_ALARM:.0%} of {role} invocations failed",
                evaluation_periods=5,
            )

        # A reconcile step that raised: the sweep's other repairs ran, this one did not (its log line says why).
        self._alarm(
            "reconcileStepFailed",
            service_metric(Metric.ReconcileStepFailed),
            0,
            "a reconciler step failed (the others ran): see the reconciler's log for 'reconcile step failed'",
            evaluation_periods=2,
        )
        self.dashboard.add_widgets(
            cw.GraphWidget(
                title="oldest message age (s)",
                width=12,
                left=[
                    q.metric_approximate_age_of_oldest_message(period=PERIOD, label=lane) for lane, q in queues.items()
                ],
            ),
            cw.GraphWidget(
                title="depth and in flight",
                width=12,
                left=[
                    metric
                    for lane, q in queues.items()
                    for metric in (
                        q.metric_approximate_number_of_messages_visible(period=PERIOD, label=f"{lane} visible"),
                        q.metric_approximate_number_of_messages_not_visible(period=PERIOD, label=f"{lane} in flight"),
                    )
                ],
            ),
        )
        self.dashboard.add_widgets(
            cw.GraphWidget(
                title="dead-letter queue depth",
                width=12,
                left=[
                    q.metric_approximate_number_of_messages_visible(period=PERIOD, label=lane)
                    for lane, q in dead_letter_queues.items()
                ],
            ),
            cw.GraphWidget(
                title="function errors and throttles",
                width=12,
                left=[
                    metric
                    for role, f in functions.items()
                    for metric in (
                        f.metric_errors(period=PERIOD, label=f"{role} errors"),
                        f.metric_throttles(period=PERIOD, label=f"{role} throttles"),
                    )
                ],
            ),
        )
        self.dashboard.add_widgets(
            cw.GraphWidget(
                title="function duration p50 / p99 (ms)",
                width=12,
                left=[
                    metric
                    for role, f in functions.items()
                    for statistic in ("p50", "p99")
                    for metric in [f.metric_duration(period=PERIOD, statistic=statistic, label=f"{role} {statistic}")]
                ],
            ),
            cw.GraphWidget(
                title="concurrent executions",
                width=12,
                left=[
                    f.metric("ConcurrentExecutions", period=PERIOD, statistic="Maximum", label=role)
                    for role, f in functions.items()
                ],
            ),
        )
        self.dashboard.add_widgets(
            cw.GraphWidget(title="operations", width=12, left=[service_metric(name) for name in SERVICE_COUNTS]),
            cw.GraphWidget(
                title="queue delay p50 / p99 (s)",
                width=12,
                left=[service_metric(Metric.QueueDelay, "p50"), service_metric(Metric.QueueDelay, "p99")],
            ),
        )
        self.dashboard.add_widgets(cw.AlarmStatusWidget(title="alarms", width=24, alarms=self.alarms))

    def _alarm(
        self, name: str, metric: cw.IMetric, threshold: float, description: str, *, evaluation_periods: int = 3
    ) -> None:
        alarm = cw.Alarm(
            self,
            f"{name[0].upper()}{name[1:]}Alarm",
            metric=metric,
            threshold=threshold,
            evaluation_periods=evaluation_periods,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            alarm_description=description,
        )
        if self.topic is not None:
            alarm.add_alarm_action(actions.SnsAction(self.topic))
            alarm.add_ok_action(actions.SnsAction(self.topic))
        self.alarms.append(alarm)
