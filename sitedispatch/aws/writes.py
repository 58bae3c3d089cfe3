"""Conditional writes, in one place: a single conditional write whose failed condition becomes a domain answer, and
named transactions whose failed items are reported by name, not by position.

DynamoDB reports a cancelled transaction's reasons one per item, in the order the items were sent. pynamodb's own
TransactWrite sends them grouped by kind (checks, deletes, puts, updates), whatever order the calls were made in, so
decoding by position would depend on that grouping; NamedTransaction sends its items in the order they were added and
keeps each one's name beside it, so a reordering cannot turn one failed condition into another domain error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from pynamodb.connection import Connection
from pynamodb.connection.base import BOTOCORE_EXCEPTIONS
from pynamodb.constants import (
    BATCH_GET_ITEM,
    REQUEST_ITEMS,
    TRANSACT_CONDITION_CHECK,
    TRANSACT_DELETE,
    TRANSACT_ITEMS,
    TRANSACT_PUT,
    TRANSACT_UPDATE,
    TRANSACT_WRITE_ITEMS,
)
from pynamodb.exceptions import DeleteError, DoesNotExist, PutError, TransactWriteError, UpdateError
from pynamodb.models import Model

from sitedispatch.aws.conflicts import Conflicted, retried_on_conflict

CONDITION_FAILED = "ConditionalCheckFailedException"
CANCELLED_BY_CONDITION = "ConditionalCheckFailed"
TRANSACTION_CONFLICT = "TransactionConflict"  # a cancellation only by these is sent again (aws/conflicts.py)
WRITE_CONFLICT = "TransactionConflictException"  # a single write refused by a transaction in progress: likewise
MAX_KEY_BYTES = 1024  # DynamoDB's limit for a sort key (2048 for a partition key); ours are far shorter
M = TypeVar("M", bound=Model)


def single_write(write: Callable[[], object]) -> None:
    """Run one single write (PutItem, UpdateItem, DeleteItem). DynamoDB refuses one on an item a transaction is in
    progress on (TransactionConflictException: nothing written), and botocore does not retry it: it is sent again
    after a short backoff (aws/conflicts.py). A minute bucket's ADD, for one, can meet the commit transaction that
    tallies the same bucket (on AWS, and on the strict local cloud)."""

    def attempt() -> None:
        try:
            write()
        except (PutError, UpdateError, DeleteError) as exc:
            if exc.cause_response_code == WRITE_CONFLICT:
                raise Conflicted(exc) from exc
            raise

    retried_on_conflict(attempt, "a write", "transaction_conflict")


def conditionally(write: Callable[[], object]) -> bool:
    """Run one conditional write: True if it was applied, False if its condition failed. Any other failure raises."""
    try:
        single_write(write)
    except (PutError, UpdateError, DeleteError) as exc:
        if exc.cause_response_code == CONDITION_FAILED:
            return False
        raise
    return True


def get_item(model: type[M], hash_key: str, range_key: Any = None) -> M | None:
    """The item (a strongly consistent read), or None when there is none, including when the key could not name one
    (DynamoDB refuses an empty or oversized key value with a ValidationException: for a reader that only means "no
    such item")."""
    if not _names_an_item(hash_key):
        return None
    try:
        return model.get(hash_key, range_key, consistent_read=True)
    except DoesNotExist:
        return None


def _names_an_item(hash_key: str) -> bool:
    """DynamoDB refuses an empty or oversized key value (ValidationException): such a key names no item."""
    return bool(hash_key) and len(hash_key.encode("utf-8", "surrogatepass")) <= MAX_KEY_BYTES


def _key(model: Any, values: tuple[Any, ...]) -> dict[str, Any]:
    """An item's key in DynamoDB's JSON: a string hash key, and a range key (of its attribute's type) when given."""
    key = {model._hash_key_attribute().attr_name: {"S": values[0]}}
    if len(values) > 1:
        sort = model._range_key_attribute()
        key[sort.attr_name] = {sort.attr_type: str(values[1])}
    return key


def _identity(table: str, item: dict[str, Any], names: list[str]) -> tuple[str, ...]:
    return (table, *(str(next(iter(item[name].values()))) for name in names))


def _batch_get(connection: Connection, request: dict[str, Any]) -> dict[tuple[str, ...], dict[str, Any]]:
    """Every item asked for, by (table, key values in key-name order); UnprocessedKeys asked again."""
    names = {table: sorted(entry["Keys"][0]) for table, entry in request.items()}
    found: dict[tuple[str, ...], dict[str, Any]] = {}
    for _ in range(8):  # DynamoDB returns UnprocessedKeys under load
        response = connection.dispatch(BATCH_GET_ITEM, {REQUEST_ITEMS: request})
        for table, rows in response.get("Responses", {}).items():
            found.update({_identity(table, raw, names[table]): raw for raw in rows})
        request = response.get("UnprocessedKeys") or {}
        if not request:
            return found
    raise RuntimeError("BatchGetItem left keys unprocessed after 8 rounds")


def get_items(*wanted: tuple[Any, ...]) -> list[Model | None]:
    """Items of several tables in one BatchGetItem, strongly consistent: what a worker reads before it acts, in one
    round trip instead of one per table. Each wanted item is (model, hash key) or (model, hash key, range key).
    None for an item that does not exist, or whose key could not name one."""
    valid = [w for w in wanted if _names_an_item(w[1])]
    if not valid:
        return [None] * len(wanted)
    request: dict[str, Any] = {}
    for model, *values in valid:
        entry = request.setdefault(model.Meta.table_name, {"Keys": [], "ConsistentRead": True})
        entry["Keys"].append(_key(model, tuple(values)))
    found = _batch_get(valid[0][0]._get_connection().connection, request)
    results: list[Model | None] = []
    for model, *values in wanted:
        key = _key(model, tuple(values))
        raw = found.get(_identity(model.Meta.table_name, key, sorted(key))) if _names_an_item(values[0]) else None
        results.append(model.from_raw_data(raw) if raw is not None else None)
    return results


BATCH_GET_KEYS = 100  # BatchGetItem's most keys per request


def read_all(model: type[M], keys: Sequence[str]) -> list[M]:
    """The items of `model` with these hash keys (those that exist), read consistently in as few BatchGetItems as
    allowed: what a keys-only index found, read from the table itself."""
    found: list[M] = []
    for start in range(0, len(keys), BATCH_GET_KEYS):
        batch = get_items(*((model, key) for key in keys[start : start + BATCH_GET_KEYS]))
        found.extend(item for item in batch if isinstance(item, model))
    return found


def under_limit(counter: Any, default: int) -> Any:
    """The counter is below its maximum: the one kept on the item (an operator's quota) or, without one, `default`
    (the deployment's). Read in the same conditional write, so a quota costs no read on the hot paths."""

    # A counter not yet written holds 0: below any maximum but 0 (a shard's part of a small limit may be 0).
    unwritten_default = counter.value.does_not_exist() if default > 0 else None
    by_default = counter.value < default if unwritten_default is None else unwritten_default | (counter.value < default)
    by_own = (counter.value.does_not_exist() & (counter.maximum > 0)) | (counter.value < counter.maximum)
    return (counter.maximum.does_not_exist() & by_default) | (counter.maximum.exists() & by_own)


class TransactionFailed(Exception):
    """A transaction DynamoDB cancelled because conditions failed: `failed` names the items whose condition did."""

    def __init__(self, failed: frozenset[str], cause: TransactWriteError) -> None:
        super().__init__(f"transaction cancelled: condition failed on {', '.join(sorted(failed))}")
        self.failed = failed
        self.cause = cause

    def mapped(self, errors: Sequence[tuple[str, Callable[[], Exception]]]) -> Exception:
        """The domain error of the first name in `errors` whose condition failed; this exception itself when none
        of them did (a condition the caller did not expect to fail: never silently another domain error)."""
        for name, error in errors:
            if name in self.failed:
                return error()
        return self


class NamedTransaction:
    """One TransactWriteItems, its items sent in the order they were added, each with a name for its failure.

    Used as a context manager: the items are sent on a clean exit. A cancellation with at least one failed condition
    raises TransactionFailed. A cancellation only by `TransactionConflict` (another transaction or write was in
    progress on one of its items: two submits of one principal at once meet on its counters) wrote nothing, and is
    sent again after a short jittered backoff, as AWS advises (aws/conflicts.py; past its patience a TransientError,
    code `transaction_conflict`: the API answers 503, a worker retries); anything else (throttling) raises
    pynamodb's TransactWriteError unchanged, so the caller's retry policy sees it as it is. Retries are bounded by
    time, not by a count: many writers at once on one item (a principal's submits at once, on AWS and on the strict
    local cloud) take their turns within the patience.
    """

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._items: list[tuple[str, dict[str, Any]]] = []
        self._after: list[Callable[[], None]] = []

    def __enter__(self) -> NamedTransaction:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc is None:
            self.commit()

    def save(self, name: str, model: Model, condition: Any = None) -> None:
        self._add(name, TRANSACT_PUT, model.get_save_kwargs_from_instance(condition=condition))

    def update(self, name: str, model: Model, actions: list[Any], condition: Any = None) -> None:
        self._add(name, TRANSACT_UPDATE, model.get_update_kwargs_from_instance(actions=actions, condition=condition))

    def delete(self, name: str, model: Model, condition: Any = None) -> None:
        self._add(name, TRANSACT_DELETE, model.get_delete_kwargs_from_instance(condition=condition))

    def check(self, name: str, model_cls: Any, hash_key: str, condition: Any) -> None:
        """A condition on an item the transaction does not write."""
        self._add(
            name, TRANSACT_CONDITION_CHECK, model_cls.get_operation_kwargs_from_class(hash_key, condition=condition)
        )

    def decrement(self, counter_model: Any, counters: Iterable[str], now: float) -> None:
        """Release one of each counter (an admission counter or a running slot), each its own named item."""
        for counter in counters:
            self.update(
                f"counter:{counter}",
                counter_model(counter),
                [counter_model.value.add(-1), counter_model.changed_at.set(now)],
            )

    def after_commit(self, action: Callable[[], None]) -> None:
        """Run `action` once the transaction has committed (not if it was cancelled)."""
        self._after.append(action)

    def _add(self, name: str, kind: str, kwargs: dict[str, Any]) -> None:
        if any(existing == name for existing, _ in self._items):
            raise ValueError(f"two items named {name!r} in one transaction")
        self._items.append((name, {kind: kwargs}))

    def commit(self) -> None:
        if self._items:
            retried_on_conflict(self._send, "a transaction", "transaction_conflict")
        for action in self._after:
            action()

    def _send(self) -> None:
        try:
            self._connection.dispatch(TRANSACT_WRITE_ITEMS, {TRANSACT_ITEMS: [item for _, item in self._items]})
        except BOTOCORE_EXCEPTIONS as cause:  # wrapped as pynamodb's own TransactWrite wraps it
            exc = TransactWriteError("Failed to write transaction items", cause)
            reasons = [reason.code if reason is not None else None for reason in exc.cancellation_reasons]
            failed = frozenset(
                name for (name, _), code in zip(self._items, reasons, strict=False) if code == CANCELLED_BY_CONDITION
            )
            if failed:
                raise TransactionFailed(failed, exc) from cause
            if TRANSACTION_CONFLICT in reasons and set(reasons) <= {TRANSACTION_CONFLICT, None, "None"}:
                raise Conflicted(cause) from cause
            raise exc from cause


def transaction(model: type[Model]) -> NamedTransaction:
    """A transaction on the connection of `model`'s table (one client serves every table)."""
    return NamedTransaction(model._get_connection().connection)
