"""Thread pools for independent I/O (route puts, post bodies, batch markers), and the one switch that runs their
tasks one at a time, in order: the deterministic simulation (`sim/`) drives the whole core in one thread, where a
second thread would be an interleaving its seed does not choose."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

_serial = False


class SerialExecutor(Executor):
    """Runs each task when it is submitted, in the caller's thread. An exception goes into its future as a pool's
    would; a BaseException (the simulation's crash of a worker) is not the task's failure and goes on up."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:
            future.set_exception(exc)
        return future


def pool(workers: int, name: str = "") -> Executor:
    """A pool of `workers` threads, or the serial executor once `run_serially` was called."""
    if _serial:
        return SerialExecutor()
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)


@contextmanager
def serially() -> Iterator[None]:
    """Inside it, every pool made runs its tasks in the caller's thread, one at a time."""
    global _serial
    before, _serial = _serial, True
    try:
        yield
    finally:
        _serial = before
