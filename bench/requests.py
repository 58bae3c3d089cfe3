"""AWS requests per operation, per kind, counted with botocore event hooks on every client the code uses, on the
happy path and with one retry; and the dollar cost per million operations from list prices.

Runs the real submit path and the real Lambda entrypoints (operations and publications) against an in-process moto
server, one operation at a time, and attributes each request to the producer (submit) or to the functions.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sitedispatch.dependencies import Dependencies
from sitedispatch.local.cloud import create_resources, in_process_cloud, local_environment

FIXTURE_WXR = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "wxr" / "fixture-1.2.xml"
PROVISION = {"title": "Requests", "admin_email": "requests@example.org"}

# List prices, us-east-1, as last read from the AWS pricing pages (Nov 2024; this machine has no internet, so they were
# not re-read on the run date). Units: dollars per request unless stated.
PRICES_READ_ON = "2024-11 (AWS pricing pages, us-east-1); not re-read offline on the run date"
PRICES: dict[str, float] = {
    "sqs_fifo_request": 0.50 / 1e6,
    "dynamodb_write_unit": 0.625 / 1e6,  # on-demand; a transactional write costs 2 units per item
    "dynamodb_read_unit": 0.125 / 1e6,  # strongly consistent read of up to 4 KB: 1 unit
    "s3_put": 0.005 / 1e3,
    "s3_get": 0.0004 / 1e3,
    "lambda_request": 0.20 / 1e6,
    "lambda_gb_second_arm": 0.0000133334,
    "eventbridge_event": 1.00 / 1e6,  # custom events put on a bus (per 64 KB chunk)
    "secrets_manager_call": 0.05 / 1e4,  # GetSecretValue (a webhook wake reads its endpoint's secret once)
}
# Temporal Cloud, for the same dispatch: its list price per million actions (Essentials, first tier, as last read:
# 2024-11, not re-read offline) and the fewest actions one dispatched operation costs there (start the workflow,
# schedule one activity; retries, signals, timers and heartbeats add more).
TEMPORAL_PER_MILLION_ACTIONS = 50.0
TEMPORAL_ACTIONS_PER_OPERATION = 2
WRITE_OPERATIONS = {"PutItem", "UpdateItem", "DeleteItem"}
READ_OPERATIONS = {"GetItem", "BatchGetItem", "Query", "Scan"}  # a batch: priced as one read here (its keys are 1-2)


class RequestCounter:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.transact_items = 0
        self.route_objects = 0  # PutObject of a publication's route objects (what a site publishes, not dispatch)
        self.paused = False  # the benchmark's own reads (is it done yet?) are not the operation's
        self.write_units: Counter[str] = Counter()  # by table role (operations, sites, ...): 2 per transaction item

    def __call__(self, params: Any, model: Any, **_: Any) -> None:
        """botocore's provide-client-params event: the operation model and its API parameters."""
        if self.paused:
            return
        self.counts[f"{model.service_model.service_name}:{model.name}"] += 1
        if model.name == "PutObject" and "/revisions/" in str((params or {}).get("Key", "")):
            self.route_objects += 1
        if model.name == "TransactWriteItems" and isinstance(params, dict):
            self.transact_items += len(params.get("TransactItems", []))
            for item in params.get("TransactItems", []):
                for action in item.values():
                    self.write_units[_table_role(str(action.get("TableName", "")))] += 2
        elif model.name == "BatchWriteItem" and isinstance(params, dict):
            for table, requests in params.get("RequestItems", {}).items():
                self.write_units[_table_role(str(table))] += len(requests)  # one per item written or deleted
        elif model.name in WRITE_OPERATIONS and isinstance(params, dict):
            self.write_units[_table_role(str(params.get("TableName", "")))] += 1

    def reset(self) -> dict[str, Any]:
        snapshot = {
            "requests": dict(sorted(self.counts.items())),
            "total": sum(self.counts.values()),
            "transact_items": self.transact_items,
            "route_objects": self.route_objects,
            "write_units_by_table": dict(sorted(self.write_units.items())),
        }
        self.counts.clear()
        self.write_units.clear()
        self.transact_items = 0
        self.route_objects = 0
        return snapshot


def _table_role(table_name: str) -> str:
    """A deployment's table name ends with its role (PREFIX-operations, PREFIX-sites, ...)."""
    return table_name.rsplit("-", 1)[-1]


def cost_per_million(
    requests: dict[str, int], transact_items: int, invocations: int, lambda_seconds: float, memory_gb: float = 1.0
) -> float:
    dollars = 0.0
    for name, n in requests.items():
        service, operation = name.split(":", 1)
        if service == "sqs":
            dollars += n * PRICES["sqs_fifo_request"]
        elif service == "dynamodb" and operation in WRITE_OPERATIONS:
            dollars += n * PRICES["dynamodb_write_unit"]
        elif service == "dynamodb" and operation in READ_OPERATIONS:
            dollars += n * PRICES["dynamodb_read_unit"]
        elif service == "s3" and operation == "PutObject":
            dollars += n * PRICES["s3_put"]
        elif service == "s3":
            dollars += n * PRICES["s3_get"]
        elif service == "events":
            dollars += n * PRICES["eventbridge_event"]  # a PutEvents here carries its events one to a few
        elif service == "secretsmanager":
            dollars += n * PRICES["secrets_manager_call"]
    dollars += transact_items * 2 * PRICES["dynamodb_write_unit"]
    dollars += invocations * PRICES["lambda_request"] + lambda_seconds * memory_gb * PRICES["lambda_gb_second_arm"]
    return round(dollars * 1e6, 2)


def _pump(deps: Dependencies, counter: RequestCounter, done: Any) -> tuple[int, float]:
    """Deliver queued messages through the real entrypoints until `done()`; (invocations, seconds inside them).
    A retry's message is invisible for its backoff: idle polls wait for it (and are counted, as Lambda's are)."""
    import sitedispatch.functions.events_worker as events
    import sitedispatch.functions.operations_worker as operations
    import sitedispatch.functions.publication_worker as publications
    import sitedispatch.functions.webhooks_worker as webhooks
    from sitedispatch.aws.sqs import queue_arn_from_url
    from sitedispatch.local.esm import LambdaContext, settle, sqs_event

    s = deps.settings
    poller = deps.session.client("sqs")  # Lambda's poller, not hooked: its requests are counted below, by hand
    lanes = [  # (queue, handler, batch size as the event source mappings have it)
        (s.operations_queue_url, operations.handler, 1),
        (s.bulk_queue_url, operations.handler, 1),
        (s.publications_queue_url, publications.handler, 1),
        (s.events_queue_url, events.handler, 10),
        (s.webhooks_queue_url, webhooks.handler, 1),
    ]
    invocations, inside = 0, 0.0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        idle = True
        for url, handler, batch in lanes:
            messages = poller.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=batch,
                WaitTimeSeconds=0,
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
            if not messages:
                continue  # idle polls are the event source mapping's, billed per queue, not per operation
            counter.counts["sqs:ReceiveMessage"] += 1
            idle = False
            started = time.perf_counter()
            response = handler(
                sqs_event(messages, queue_arn_from_url(url, s.region), s.region),
                LambdaContext("Bench", 60, 1024, s.region, time.time()),
            )
            inside += time.perf_counter() - started
            invocations += 1
            if settle(poller, url, messages, response):
                counter.counts["sqs:DeleteMessageBatch"] += 1
        if idle:
            if done():
                return invocations, inside
            time.sleep(0.2)
    raise TimeoutError("queues still busy")


def _finished(deps: Dependencies, counter: RequestCounter, operation_id: str, site: str) -> Any:
    from sitedispatch.domain.model import PublicationStatus

    def check() -> bool:
        counter.paused = True
        try:
            op = deps.operations.get(operation_id)
            open_publications = [
                p
                for p in deps.publications.list(site, limit=5)
                if p.status in {PublicationStatus.PENDING, PublicationStatus.PLANNED}
            ]
        finally:
            counter.paused = False
        return op is not None and op.status.terminal and not open_publications

    return check


def measure() -> dict[str, Any]:
    from sitedispatch.functions.runtime import dependencies

    with in_process_cloud() as endpoint:
        settings = create_resources(endpoint, prefix="req", function_timeout_s=60)
        os.environ.update(local_environment(settings, endpoint))
        dependencies.cache_clear()
        import sitedispatch.functions.events_worker as events
        import sitedispatch.functions.operations_worker as operations
        import sitedispatch.functions.publication_worker as publications
        import sitedispatch.functions.webhooks_worker as webhooks

        operations.worker.cache_clear()
        publications.worker.cache_clear()
        events.worker.cache_clear()
        webhooks.deliverer.cache_clear()
        producer = Dependencies(settings).warm()
        functions_deps = dependencies().warm()
        counter = RequestCounter()
        for client in (
            producer.sqs,
            producer.s3,
            producer.models.Operation._get_connection().connection.client,
            functions_deps.sqs,
            functions_deps.s3,
            functions_deps.models.Operation._get_connection().connection.client,
            functions_deps.event_bus.client,  # type: ignore[attr-defined]
            functions_deps.webhook_secrets.client,  # type: ignore[attr-defined]
        ):
            client.meta.events.register("provide-client-params.*.*", counter)
        submitter = producer.submitter()
        results: dict[str, Any] = {}

        def one(kind: str, site: str, params: dict[str, Any], key: str) -> None:
            counter.reset()
            op = submitter.submit(
                kind=kind, site_id=site, principal="bench", params=params, idempotency_key=key
            ).operation
            submitted = counter.reset()
            finished = _finished(producer, counter, op.operation_id, site)
            invocations, seconds = _pump(producer, counter, finished)
            worked = counter.reset()
            total = Counter(submitted["requests"]) + Counter(worked["requests"])
            items = submitted["transact_items"] + worked["transact_items"]
            routes = worked["route_objects"]
            results[key] = {
                "kind": kind,
                "submit": submitted,
                "functions": worked,
                "invocations": invocations,
                "total_requests": sum(total.values()),
                "route_objects": routes,
                "overhead_requests": sum(total.values()) - routes,
                "write_units_by_table": dict(
                    Counter(submitted["write_units_by_table"]) + Counter(worked["write_units_by_table"])
                ),
                "temporal_cloud_per_million_usd": TEMPORAL_ACTIONS_PER_OPERATION * TEMPORAL_PER_MILLION_ACTIONS,
                "request_cost_per_million_usd": cost_per_million(dict(total), items, 0, 0.0),
                "lambda_cost_per_million_usd": cost_per_million({}, 0, invocations, seconds),
                "lambda_seconds_on_emulator": round(seconds, 3),
            }

        one("provision", "req-site", PROVISION, "provision")
        one("import", "req-site", submitter.stage_upload("req-site", FIXTURE_WXR, "bench"), "import")
        one("publish", "req-site", {}, "publish")
        # the same publish on the site naming one dependency with a cap and a rate (docs/flow-control.md)
        from sitedispatch.domain.dependencies import Rate
        from sitedispatch.flow.counters import dependency_label

        def name_dependencies(*ids: str) -> None:  # as `sites dependencies` does, seen by a warm submitter
            producer.sites.set_dependencies("req-site", ids)
            assert producer.operations.relabel_site("req-site", dependency_label(ids))
            submitter.deps.labels.learn("req-site", dependency_label(ids))

        name_dependencies("db:req")
        producer.dependency_store.put_settings("db:req", 4, (Rate(20, 60.0, 5),), "bench", "bench", time.time())
        one("publish", "req-site", {}, "publish_on_a_dependency")
        name_dependencies()
        one("wp_cron", "req-site", {}, "wp_cron")
        head = producer.sites.get("req-site")
        assert head is not None and head.head_revision
        one("recover", "req-site", {"revision_id": head.head_revision}, "recover")
        # one retry: the commit transaction is refused once (a throttle); the retry's delivery commits
        refuse = {"left": 1}

        def throttle_once(params: Any, model: Any, **_: Any) -> None:
            commits_table = settings.commits_table
            is_commit = any(
                item.get("Put", {}).get("TableName") == commits_table
                for item in (params or {}).get("TransactItems", [])
            )
            if is_commit and refuse["left"]:
                refuse["left"] -= 1
                from botocore.exceptions import ClientError

                raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "bench"}}, model.name)

        functions_deps.models.Operation._get_connection().connection.client.meta.events.register(
            "provide-client-params.dynamodb.TransactWriteItems", throttle_once
        )
        one("provision", "req-retry", PROVISION, "provision_with_one_retry")
        # told by a webhook: the principal's endpoint wants operation.succeeded (a receiver on 127.0.0.1)
        from sitedispatch.domain.events import EventType
        from sitedispatch.local.receiver import WebhookReceiver
        from sitedispatch.operator.access import Caller

        receiver = WebhookReceiver()
        with receiver.serving() as url:
            counter.paused = True
            producer.endpoints().register(Caller("bench", False), url, [EventType.OPERATION_SUCCEEDED])
            counter.paused = False
            one("provision", "req-hooked", PROVISION, "provision_told_by_a_webhook")
            assert len(receiver.accepted()) == 1, "the webhook was not delivered"
    return results


def by_api(row: dict[str, Any]) -> str:
    total = Counter(row["submit"]["requests"]) + Counter(row["functions"]["requests"])
    return ", ".join(f"{name.split(':', 1)[1]} {n}" for name, n in sorted(total.items(), key=lambda kv: -kv[1]))


def main() -> dict[str, Any]:
    results = measure()
    print(
        f"{'kind':>26} | submit | functions | total | route objects | overhead | requests $/M | Lambda $/M | "
        f"Temporal Cloud $/M (>= {TEMPORAL_ACTIONS_PER_OPERATION} actions)",
        flush=True,
    )
    for key, row in results.items():
        print(
            f"{key:>26} | {row['submit']['total']:>6} | {row['functions']['total']:>9} | {row['total_requests']:>5} | "
            f"{row['route_objects']:>13} | {row['overhead_requests']:>8} | {row['request_cost_per_million_usd']:>12} | "
            f"{row['lambda_cost_per_million_usd']:>10} | {row['temporal_cloud_per_million_usd']:>6}",
            flush=True,
        )
    for key, row in results.items():
        print(f"{key:>26}: {by_api(row)}", flush=True)
    return {"prices": {"read_on": PRICES_READ_ON, **PRICES}, "per_operation": results}


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
