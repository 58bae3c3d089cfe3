"""moto as the local cloud runs it: where it differs from AWS in ways the guarantees depend on (transaction
isolation, S3 checksums), made to behave as AWS; where it spends its time on work no answer needs, made cheaper.
Every patch keeps moto's answers; tests/integration/test_local_cloud.py holds them to it."""

from __future__ import annotations

import json
import threading
import time
from functools import lru_cache
from typing import Any

from sitedispatch.local.strict import (
    patch_moto_conditional_puts,
    patch_moto_lagging_indexes,
    patch_moto_transaction_conflicts,
)
from sitedispatch.local.updates import patch_moto_json_errors, patch_moto_update_validation


def patch_moto_long_poll() -> None:
    """moto's long poll spins at 100% CPU while visible messages exist whose FIFO groups are all in flight
    (its wait returns at once whenever the queue is non-empty). Sleep briefly in that case instead."""
    from moto.sqs.models import Queue

    def wait_for_messages(self: Any, timeout: int) -> None:
        with self._messages_lock:
            had_messages = self._messages_lock.wait_for(lambda: self.messages, timeout=timeout)
        if had_messages:
            time.sleep(0.02)

    Queue.wait_for_messages = wait_for_messages  # type: ignore[method-assign]


def patch_moto_message_clock() -> None:
    """moto asks each message of a queue whether it is visible and not delayed (through datetime arithmetic) three
    times for every message it accepts (the queue's attributes, counts included, are built to read one flag), so a
    send costs time in proportion to the queue's depth. Read the clock as moto's `unix_time_millis` does, directly."""
    from moto.sqs.models import Message

    Message.visible = property(lambda self: time.time() * 1000 > self.visible_at)  # type: ignore[method-assign,assignment]
    Message.delayed = property(lambda self: time.time() * 1000 < self.delayed_until)  # type: ignore[method-assign,assignment]


def patch_moto_fifo_flag() -> None:
    """moto reads a FIFO queue's ContentBasedDeduplication through `Queue.attributes`, which also counts the
    queue's messages three ways (each message asked for the clock): three times for every message sent, so a send
    costs time in proportion to the queue's depth (a 1,000-item batch's second half paid for the first). While a
    send checks and adds a message, `attributes` answers that flag alone; everywhere else, all of them as before."""
    from moto.sqs.models import Queue, SQSBackend

    full: Any = Queue.__dict__["attributes"]  # the property itself
    if getattr(full.fget, "flag_only", False):
        return
    sending = threading.local()

    def attributes(self: Any) -> dict[str, Any]:
        if getattr(sending, "depth", 0):  # as `attributes` writes it (its booleans as "true" / "false")
            return {"ContentBasedDeduplication": str(self.content_based_deduplication).lower()}
        return full.fget(self)

    def flag_only(method: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            sending.depth = getattr(sending, "depth", 0) + 1
            try:
                return method(*args, **kwargs)
            finally:
                sending.depth -= 1

        return wrapped

    attributes.flag_only = True  # type: ignore[attr-defined]
    Queue.attributes = property(attributes)  # type: ignore[assignment,method-assign]
    Queue.add_message = flag_only(Queue.add_message)  # type: ignore[method-assign]
    SQSBackend._validate_message = flag_only(SQSBackend._validate_message)  # type: ignore[method-assign]


def patch_moto_module_scan() -> None:
    """moto's server lists its package directory (one listdir and ~150 isdir calls) on every request to resolve the
    backend, a large part of its CPU under load. The list never changes while it runs: compute it once."""
    from moto import backends

    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules


DYNAMODB_OPERATIONS = (
    "get_item",
    "put_item",
    "update_item",
    "delete_item",
    "query",
    "scan",
    "transact_write_items",
    "transact_get_items",
    "batch_get_item",
    "batch_write_item",
)


def patch_moto_dynamodb_isolation() -> None:
    """moto applies TransactWriteItems item by item and, when one fails, restores a deep copy of every table the
    transaction touched: a write that another request made meanwhile is lost, and readers can see half a
    transaction (operation rows lost, counters off under a flood of concurrent submits). DynamoDB isolates
    transactions (serializable with other writes); moto's DynamoDB calls are serialized here to match."""
    from moto.dynamodb.models import DynamoDBBackend

    lock = threading.RLock()
    for name in DYNAMODB_OPERATIONS:
        original = getattr(DynamoDBBackend, name)

        def serialized(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            with lock:
                return _original(self, *args, **kwargs)

        setattr(DynamoDBBackend, name, serialized)


def _item_key(table: Any, op_type: str, op: dict[str, Any]) -> dict[str, Any]:
    """The key of the item a transaction entry writes (a Put names it inside its item)."""
    if op_type != "Put":
        return dict(op.get("Key") or {})
    key = {table.hash_key_attr: op["Item"][table.hash_key_attr]}
    if table.range_key_attr is not None:
        key[table.range_key_attr] = op["Item"][table.range_key_attr]
    return key


def _items_before(
    backend: Any, transact_items: list[dict[str, Any]], copy: Any
) -> dict[tuple[str, str], tuple[dict[str, Any], Any]]:
    """(table, key) -> (key, a copy of the item as it is now, or None) for every item the transaction names."""
    touched: dict[tuple[str, str], tuple[dict[str, Any], Any]] = {}
    for entry in transact_items:
        for op_type, op in entry.items():
            table = backend.tables.get(op.get("TableName"))
            if table is None:
                continue
            key = _item_key(table, op_type, op)
            try:
                before = backend.get_item(op["TableName"], key)
            except Exception:  # an invalid key: moto's own validation reports it in the transaction itself
                continue
            touched.setdefault(
                (op["TableName"], json.dumps(key, sort_keys=True)), (key, copy(before) if before is not None else None)
            )
    return touched


def patch_moto_transaction_snapshot() -> None:
    """moto backs up a TransactWriteItems by deep-copying every table it touches, once per item: its cost grows with
    the tables, and ten starts at once (a transaction each) queue behind each other's copies. Every DynamoDB call is
    serialized (above), so the backup only has to hold the items the transaction names: those are copied before it
    and put back if it is cancelled."""
    from moto.dynamodb import models as dynamodb_models
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table

    original = DynamoDBBackend.transact_write_items
    if getattr(original, "snapshots_items", False):
        return
    real_copy = dynamodb_models.copy

    class TablesNotCopied:
        """`copy` as moto's transaction sees it: tables are not copied (the items are, by the wrapper)."""

        @staticmethod
        def deepcopy(value: Any, memo: Any = None) -> Any:
            return value if isinstance(value, Table) else real_copy.deepcopy(value, memo)

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        touched = _items_before(self, transact_items, real_copy.deepcopy)
        dynamodb_models.copy = TablesNotCopied  # type: ignore[assignment]
        try:
            return original(self, transact_items)
        except Exception:
            for (table_name, _), (key, before) in touched.items():  # put every named item back as it was
                if before is None:
                    self.delete_item(table_name, key)
                else:
                    self.put_item(table_name, before.to_json()["Attributes"])
            raise
        finally:
            dynamodb_models.copy = real_copy

    transact_write_items.snapshots_items = True  # type: ignore[attr-defined]
    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]


def patch_moto_checksum() -> None:
    """moto stores the x-amz-checksum-sha256 a PUT declares without checking it against the body ("TODO: AWS
    computes the provided value and verifies it's the same"); S3 answers 400 BadDigest. Uploads rely on S3's check
    (an import's digest is what HeadObject reports), so the local cloud makes it."""
    import base64
    import hashlib

    from moto.s3.exceptions import S3ClientError
    from moto.s3.responses import S3Response

    original = S3Response._get_checksum

    def checked(self: Any, response_headers: dict[str, Any]) -> tuple[str, str | None]:
        algorithm, value = original(self, response_headers)
        if algorithm.upper() == "SHA256" and value and self.headers.get("x-amz-checksum-sha256"):
            actual = base64.b64encode(hashlib.sha256(self.body or b"").digest()).decode()
            if actual != value:
                raise S3ClientError("BadDigest", "The SHA256 you specified did not match the calculated checksum.")
        return algorithm, value

    S3Response._get_checksum = checked  # type: ignore[method-assign]


PARSED_CONDITIONS = 4096  # condition expressions (with their names and values) kept parsed


def patch_moto_condition_cache() -> None:
    """moto parses every condition and update expression anew, each time it is used (a third of its time in a
    submit's transaction): an expression with the same names and values parses to the same tree, which evaluating
    an item never changes, so the parse is kept. The same answers, faster; a parse that fails is not kept."""
    import json
    from collections import OrderedDict

    from moto.dynamodb.comparisons import ConditionExpressionParser

    original = ConditionExpressionParser.parse
    if getattr(original, "cached", False):
        return
    parsed: OrderedDict[str, tuple[Any, list[str], list[str]]] = OrderedDict()
    lock = threading.Lock()

    def parse(self: Any) -> Any:
        key = json.dumps(
            [self.condition_expression, self.expression_attribute_names, self.expression_attribute_values],
            sort_keys=True,
        )
        with lock:
            found = parsed.get(key)
            if found is not None:
                parsed.move_to_end(key)
        if found is None:
            tree = original(self)
            found = (tree, list(self.expr_attr_names_found), list(self.expr_attr_values_found))
            with lock:
                parsed[key] = found
                if len(parsed) > PARSED_CONDITIONS:
                    parsed.popitem(last=False)
        tree, self.expr_attr_names_found, self.expr_attr_values_found = found[0], list(found[1]), list(found[2])
        return tree

    parse.cached = True  # type: ignore[attr-defined]
    ConditionExpressionParser.parse = parse  # type: ignore[method-assign]

    # An update expression's tree is only read (moto's validators work on a deep copy of it): kept by its text.
    from moto.dynamodb.parsing import expressions

    parser: Any = expressions.UpdateExpressionParser  # type: ignore[attr-defined]
    made = lru_cache(maxsize=PARSED_CONDITIONS)(parser.make)
    parser.make = made


def quiet_moto() -> None:
    """Make moto behave like AWS where our guarantees depend on it (transaction isolation, S3 checksums), remove
    its hot spots (a busy long poll, a directory scan per request, a table copy and a condition parse per
    transaction, every queue attribute built per FIFO send, an update's checks; local/updates.py), and silence
    werkzeug's per-request log lines."""
    import logging

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    patch_moto_long_poll()
    patch_moto_module_scan()
    patch_moto_message_clock()
    patch_moto_fifo_flag()
    patch_moto_transaction_snapshot()
    patch_moto_condition_cache()
    patch_moto_update_validation()
    patch_moto_json_errors()
    patch_moto_lagging_indexes()  # inert unless `--strict`; inside the isolation lock (installed before it)
    patch_moto_dynamodb_isolation()
    patch_moto_checksum()
    patch_moto_conditional_puts()  # inert unless `--strict`
    patch_moto_transaction_conflicts()  # inert unless `--strict` (local/strict.py)
    patch_moto_cloudformation()


FIFO_SUFFIX = ".fifo"
QUEUE_NAME_MAX = 80


def patch_moto_cloudformation() -> None:
    """Where moto's CloudFormation differs from CloudFormation for the stack's types (docs/aws-semantics.md):
    - a FIFO queue without a QueueName gets a generated name ending in `.fifo` (moto generates one without and
      then refuses it: "Queue name must end in .fifo");
    - a table's TimeToLiveSpecification is applied (moto creates the table and ignores it);
    - `Ref` of an event bus is its name (moto answers the bus object, which breaks every value built from it).
    And one for speed: a JSON template is read as JSON (moto reads every template with PyYAML first, JSON being
    YAML: 0.3 s of the stack's 0.4 s of each deploy)."""
    from moto.cloudformation.models import Stack
    from moto.dynamodb.models import dynamodb_backends
    from moto.dynamodb.models.table import Table
    from moto.events.models import EventBus
    from moto.sqs.models import Queue

    queue_create: Any = Queue.create_from_cloudformation_json.__func__  # type: ignore[attr-defined]
    if getattr(queue_create, "patched", False):
        return

    def create_queue(cls: Any, resource_name: str, cloudformation_json: Any, *args: Any, **kwargs: Any) -> Any:
        properties = cloudformation_json.get("Properties", {})
        fifo = str(properties.get("FifoQueue", "")).lower() == "true"
        if fifo and "QueueName" not in properties and not resource_name.endswith(FIFO_SUFFIX):
            resource_name = resource_name[: QUEUE_NAME_MAX - len(FIFO_SUFFIX)] + FIFO_SUFFIX
        return queue_create(cls, resource_name, cloudformation_json, *args, **kwargs)

    create_queue.patched = True  # type: ignore[attr-defined]
    EventBus.physical_resource_id = property(lambda self: self.name)  # type: ignore[attr-defined]
    Queue.create_from_cloudformation_json = classmethod(create_queue)  # type: ignore[method-assign,assignment]

    table_create: Any = Table.create_from_cloudformation_json.__func__  # type: ignore[attr-defined]

    def create_table(
        cls: Any, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
    ) -> Any:
        table = table_create(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs)
        ttl = cloudformation_json.get("Properties", {}).get("TimeToLiveSpecification")
        if ttl:
            dynamodb_backends[account_id][region_name].update_time_to_live(table.name, ttl)
        return table

    Table.create_from_cloudformation_json = classmethod(create_table)  # type: ignore[method-assign,assignment]

    parse_yaml = Stack.parse_template

    def parse_template(template: str) -> dict[str, Any]:
        try:
            parsed = json.loads(template)
        except ValueError:
            return parse_yaml(template)
        return parsed if isinstance(parsed, dict) else parse_yaml(template)

    Stack.parse_template = staticmethod(parse_template)  # type: ignore[method-assign]
