"""`local cloud --strict`: moto made to behave as AWS does where moto is kinder and the difference can be emulated,
seeded and replayable (docs/aws-semantics.md names each row it covers).

Transaction conflicts. DynamoDB cancels a `TransactWriteItems` with `TransactionConflict` when another transaction
is in progress on one of its items, and refuses a single write (`PutItem`, `UpdateItem`, `DeleteItem`) on an item a
transaction is in progress on with `TransactionConflictException`
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-conflict-handling).
The local cloud serializes every DynamoDB call (cloud.patch_moto_dynamodb_isolation), so in plain moto that path never
runs. Here a transaction is in progress for a seeded `hold_s` / 2 to `hold_s` from the moment its request arrives
(DynamoDB's two-phase protocol takes milliseconds, the emulator's microseconds): a request arriving meanwhile that
names one of its items fails as it would on AWS. Then the emulator applies it in its turn, serialized with every
other call; that wait is not counted as in progress, since AWS has no such queue (counted, a transaction's items
stayed busy for as long as the machine was slow, and conflicts grew with its load, not with the requests).

Index reads that lag writes. A global secondary index is updated asynchronously: a query of one may not show a write
that just succeeded, or may still show an item as it was (https://docs.aws.amazon.com/amazondynamodb/latest/
developerguide/GSI.html#GSI.Writes, "eventually consistent"). Here every write keeps, for `INDEX_LAG_MAX_S`, the item
as it was before it; a query of a global index reads the table as it was a seeded 0 to `INDEX_LAG_MAX_S` ago.

Conditional writes of one S3 key at once. S3 answers `409 ConditionalRequestConflict` to a conditional PUT
(`If-None-Match` / `If-Match`) of a key while another conditional write of it is in progress, and advises a retry
(https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html); moto never does. Here a
conditional PUT is in progress for a seeded `hold_s` / 2 to `hold_s` before moto applies it, and a conditional PUT
of the same key arriving meanwhile gets the 409.

Duplicate deliveries. SQS (FIFO too) delivers at least once: a consumer can receive a message again after it was
processed (a lost delete, an expired visibility), and Lambda's event source mapping processes each event at least
once (https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventsourcemapping.html). A strict local cloud's
event source mapping (local/esm.py) leaves `DUPLICATE_RATE` of the records it completed undeleted and visible again
at once, seeded per environment, so every handler meets its own work a second time.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

STRICT_SEED_ENV = "SITEDISPATCH_LOCAL_STRICT_SEED"  # set by a strict local cloud for the processes it serves
STRICT_DELETE_LOST = "strict: delete lost, the record comes again"  # the line an event source mapping logs
STRICT_COUNTS_EVERY_S = 0.5  # how often a strict local cloud writes what it did (strict_counts_path)
DUPLICATE_RATE = 0.05  # of completed records an event source mapping "loses the delete" of: the record comes again
INDEX_LAG_MAX_S = 0.5  # how far behind the table a global index read may be (seeded per read)
DEFAULT_HOLD_S = 0.02  # the widest extra time a transaction stays in progress (seeded, from half of it)
GATE_LIMIT_S = 30.0  # the longest a test's gate holds anything in progress
ItemId = tuple[str, str]  # (table, the key as canonical JSON)


@dataclass
class Strictness:
    enabled: bool = False
    hold_s: float = DEFAULT_HOLD_S
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    lock: threading.Lock = field(default_factory=threading.Lock)
    in_progress: set[ItemId] = field(default_factory=set)
    conflicts: dict[str, int] = field(default_factory=lambda: {"transactions": 0, "writes": 0, "s3": 0})
    keys_in_progress: set[tuple[str, str]] = field(default_factory=set)  # (bucket, key) of conditional PUTs
    inside: threading.local = field(default_factory=threading.local)
    index_lag_max_s: float = INDEX_LAG_MAX_S
    # table name -> item key -> [(when written, the item as it was before: None if absent)], the last lag's writes
    history: dict[str, dict[Any, list[tuple[float, Any]]]] = field(default_factory=dict)
    lagged_reads: int = 0
    gate: threading.Event | None = None  # while set by `held_open`, the first thing in progress stays so until set
    gated: bool = False  # the gate holds one thing: it is taken

    @contextmanager
    def held_open(self) -> Iterator[threading.Event]:
        """For tests: the first transaction or conditional PUT that starts meanwhile stays in progress until the
        event is set (or the block ends), whatever the machine's load; what starts after it has the seeded hold."""
        self.gate, self.gated = threading.Event(), False
        try:
            yield self.gate
        finally:
            self.gate.set()
            self.gate = None

    def hold(self) -> None:
        """Called outside the lock by what is in progress."""
        with self.lock:
            gate = self.gate if not self.gated else None
            self.gated = self.gated or gate is not None
            seconds = self.hold_s * (0.5 + 0.5 * self.rng.random())
        if gate is not None:
            gate.wait(GATE_LIMIT_S)
            return
        time.sleep(seconds)

    def enable(self, seed: int, hold_s: float = DEFAULT_HOLD_S, index_lag_max_s: float = INDEX_LAG_MAX_S) -> None:
        self.enabled, self.hold_s, self.rng = True, hold_s, random.Random(seed)
        self.index_lag_max_s = index_lag_max_s
        self.history.clear()  # each enabling counts and remembers from nothing (tests enable it one after another)
        self.conflicts = {name: 0 for name in self.conflicts}
        self.lagged_reads = 0

    def disable(self) -> None:
        self.enabled = False

    def counts(self) -> dict[str, int]:
        return {
            "transaction_conflicts": self.conflicts["transactions"],
            "write_conflicts": self.conflicts["writes"],
            "s3_conditional_conflicts": self.conflicts["s3"],
            "lagged_index_reads": self.lagged_reads,
        }


STRICT = Strictness()


def _item_id(table: Any, table_name: str, key: dict[str, Any]) -> ItemId:
    key_only = {table.hash_key_attr: key[table.hash_key_attr]}
    if table.range_key_attr is not None:
        key_only[table.range_key_attr] = key[table.range_key_attr]
    return table_name, json.dumps(key_only, sort_keys=True)


def _entry_id(backend: Any, entry: dict[str, Any]) -> ItemId | None:
    (op_type, op), *_ = entry.items()
    table = backend.tables.get(op.get("TableName"))
    if table is None:
        return None  # moto's own validation answers for it
    source = op["Item"] if op_type == "Put" else op.get("Key") or {}
    try:
        return _item_id(table, op["TableName"], source)
    except KeyError:
        return None


def _conflict(code: str, message: str) -> Exception:
    from moto.dynamodb.exceptions import DynamodbException

    return DynamodbException(f"com.amazonaws.dynamodb.v20120810#{code}", message)


def patch_moto_transaction_conflicts() -> None:
    """Installed outermost (after the isolation lock): a request is "arrived" before it waits for that lock."""
    from moto.dynamodb.exceptions import TransactionCanceledException
    from moto.dynamodb.models import DynamoDBBackend

    if getattr(DynamoDBBackend, "sitedispatch_conflicts", False):
        return
    DynamoDBBackend.sitedispatch_conflicts = True  # type: ignore[attr-defined]
    original = DynamoDBBackend.transact_write_items

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        if not STRICT.enabled:
            return original(self, transact_items)
        ids = [_entry_id(self, entry) for entry in transact_items]
        with STRICT.lock:
            busy = [i is not None and i in STRICT.in_progress for i in ids]
            if any(busy):
                STRICT.conflicts["transactions"] += 1
                raise TransactionCanceledException(
                    [
                        ("TransactionConflict", "Transaction is ongoing for the item", None)
                        if b
                        else (None, None, None)
                        for b in busy
                    ]
                )
            mine = {i for i in ids if i is not None}
            STRICT.in_progress |= mine
        try:
            STRICT.hold()
        finally:
            with STRICT.lock:
                STRICT.in_progress -= mine
        STRICT.inside.active = True
        try:
            return original(self, transact_items)  # in its turn, serialized with every other DynamoDB call
        finally:
            STRICT.inside.active = False

    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]

    for name, key_param in (("put_item", "item_attrs"), ("update_item", "key"), ("delete_item", "key")):
        single = getattr(DynamoDBBackend, name)

        def checked(self: Any, *args: Any, _single: Any = single, _param: str = key_param, **kwargs: Any) -> Any:
            # a transaction's own rollback (cloud.patch_moto_transaction_snapshot) writes its items back: not a conflict
            if STRICT.enabled and not getattr(STRICT.inside, "active", False):
                table_name = args[0] if args else kwargs["table_name"]
                source = args[1] if len(args) > 1 else kwargs.get(_param)
                table = self.tables.get(table_name)
                if table is not None and source:
                    item = _item_id(table, table_name, source)
                    with STRICT.lock:
                        if item in STRICT.in_progress:
                            STRICT.conflicts["writes"] += 1
                            raise _conflict("TransactionConflictException", "Transaction is ongoing for the item")
            return _single(self, *args, **kwargs)

        setattr(DynamoDBBackend, name, checked)


def strict_counts_path(env_file: Any) -> Any:
    """Where a strict local cloud writes its counts: beside its environment file."""
    return env_file.with_name("strict-counts.json")


def duplicate_chooser(index: int) -> random.Random | None:
    """An environment's seeded choice of lost deletes, or None outside a strict local cloud."""
    import os

    seed = os.environ.get(STRICT_SEED_ENV)
    return None if seed is None else random.Random(f"{seed}:{index}")


def _key_of(table: Any, attrs: dict[str, Any]) -> tuple[Any, Any]:
    from moto.dynamodb.models.dynamo_type import DynamoType

    hash_value = DynamoType(attrs[table.hash_key_attr])
    return hash_value, DynamoType(attrs[table.range_key_attr]) if table.range_key_attr else None


def _current(table: Any, key: tuple[Any, Any]) -> Any:
    """A copy of the item as it is now (None: absent), before a write changes it (moto updates items in place)."""
    import copy

    return copy.deepcopy(table.get_item(*key)) if key[1] is not None or not table.has_range_key else None


def _record(table_name: str, key: tuple[Any, Any], now: float, before: Any) -> None:
    """Called with every DynamoDB call serialized; forgets what no read can lag back to any more."""
    writes = STRICT.history.setdefault(table_name, {})
    horizon = now - STRICT.index_lag_max_s
    for stale in [k for k, entries in writes.items() if entries[-1][0] < horizon]:
        del writes[stale]
    writes.setdefault(key, []).append((now, before))


def _as_of(table: Any, table_name: str, when: float) -> Any:
    """`table.items` as they were at `when`: each item written since, as it was before its first such write."""
    view = dict(table.items)
    copied: set[Any] = set()
    for (hash_value, range_value), entries in STRICT.history.get(table_name, {}).items():
        later = [before for at, before in entries if at > when]
        if not later:
            continue
        before = later[0]
        if range_value is None:
            if before is None:
                view.pop(hash_value, None)
            else:
                view[hash_value] = before
            continue
        if hash_value not in copied:
            view[hash_value] = dict(view.get(hash_value, {}))
            copied.add(hash_value)
        if before is None:
            view[hash_value].pop(range_value, None)
        else:
            view[hash_value][range_value] = before
    return view


def _remembering(original: Any, key_param: str) -> Any:
    def write(self: Any, *args: Any, **kwargs: Any) -> Any:
        if STRICT.enabled and not getattr(STRICT.inside, "active", False):
            table_name = args[0] if args else kwargs["table_name"]
            attrs = args[1] if len(args) > 1 else kwargs.get(key_param)
            table = self.tables.get(table_name)
            if table is not None and attrs:
                try:
                    key = _key_of(table, attrs)
                except KeyError:
                    key = None  # an invalid key: moto's own validation answers for it
                if key is not None:
                    _record(table_name, key, time.time(), _current(table, key))
        return original(self, *args, **kwargs)

    return write


def _named_items(backend: Any, transact_items: list[dict[str, Any]]) -> list[tuple[str, Any, tuple[Any, Any]]]:
    """(table name, table, key) of every item a transaction writes."""
    named = []
    for entry in transact_items:
        (op_type, op), *_ = entry.items()
        table = backend.tables.get(op.get("TableName"))
        if table is None or op_type == "ConditionCheck":
            continue
        try:
            named.append((op["TableName"], table, _key_of(table, op["Item"] if op_type == "Put" else op["Key"])))
        except KeyError:
            continue
    return named


def _remembering_transactions(original: Any) -> Any:
    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        if not STRICT.enabled:
            return original(self, transact_items)
        now = time.time()
        pending = {(name, key): _current(table, key) for name, table, key in _named_items(self, transact_items)}
        STRICT.inside.active = True  # its own writes (and a cancelled one's rollback) are not remembered one by one
        try:
            result = original(self, transact_items)
        finally:
            STRICT.inside.active = False
        for (table_name, key), before in pending.items():  # applied: remember what it replaced
            _record(table_name, key, now, before)
        return result

    return transact_write_items


def _lagged(original: Any) -> Any:
    def read(self: Any, table_name: str, *args: Any, **kwargs: Any) -> Any:
        index_name = kwargs.get("index_name")
        table = self.tables.get(table_name)
        if not (STRICT.enabled and index_name and table is not None):
            return original(self, table_name, *args, **kwargs)
        if not any(index.name == index_name for index in table.global_indexes or []):
            return original(self, table_name, *args, **kwargs)
        when = time.time() - STRICT.rng.uniform(0, STRICT.index_lag_max_s)
        current = table.items
        table.items = _as_of(table, table_name, when)
        STRICT.lagged_reads += 1
        try:
            return original(self, table_name, *args, **kwargs)
        finally:
            table.items = current

    return read


def patch_moto_lagging_indexes() -> None:
    """Installed before the isolation lock (so inside it: the table's items are swapped only while it is held)."""
    from moto.dynamodb.models import DynamoDBBackend

    if getattr(DynamoDBBackend, "sitedispatch_lagging", False):
        return
    DynamoDBBackend.sitedispatch_lagging = True  # type: ignore[attr-defined]
    for name, key_param in (("put_item", "item_attrs"), ("update_item", "key"), ("delete_item", "key")):
        setattr(DynamoDBBackend, name, _remembering(getattr(DynamoDBBackend, name), key_param))
    DynamoDBBackend.transact_write_items = _remembering_transactions(  # type: ignore[method-assign]
        DynamoDBBackend.transact_write_items
    )
    DynamoDBBackend.query = _lagged(DynamoDBBackend.query)  # type: ignore[method-assign]
    DynamoDBBackend.scan = _lagged(DynamoDBBackend.scan)  # type: ignore[method-assign]


S3_CONFLICT_BODY = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>ConditionalRequestConflict</Code><Message>A conflicting '
    "conditional operation is currently in progress against this resource. Please try again.</Message></Error>"
)


def patch_moto_conditional_puts() -> None:
    """Inert unless strict: a conditional PUT is in progress while held, and one of the same key meanwhile gets 409."""
    from moto.s3.responses import S3Response

    if getattr(S3Response, "sitedispatch_conditional", False):
        return
    S3Response.sitedispatch_conditional = True  # type: ignore[attr-defined]
    original = S3Response.put_object

    def put_object(self: Any) -> Any:
        if not (STRICT.enabled and (self.headers.get("If-None-Match") or self.headers.get("If-Match"))):
            return original(self)
        key = (self.bucket_name, self.parse_key_name())
        with STRICT.lock:
            if key in STRICT.keys_in_progress:
                STRICT.conflicts["s3"] += 1
                return 409, {"Content-Type": "application/xml"}, S3_CONFLICT_BODY
            STRICT.keys_in_progress.add(key)
        try:
            STRICT.hold()
            return original(self)
        finally:
            with STRICT.lock:
                STRICT.keys_in_progress.discard(key)

    S3Response.put_object = put_object  # type: ignore[method-assign]
