"""A small thread-safe LRU map, for values whose key already says when they go stale."""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from concurrent.futures import Future
from typing import Generic, TypeVar

V = TypeVar("V")


class LRU(Generic[V]):
    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()
        self._computing: dict[Hashable, Future[V]] = {}
        # `get_or_compute_async`'s, on the event loop that uses this map
        self._computing_async: dict[Hashable, asyncio.Future[V]] = {}

    def get(self, key: Hashable) -> V | None:
        """The cached value, or None (nothing is computed)."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        return None

    def get_or_compute(self, key: Hashable, compute: Callable[[], V]) -> V:
        """The cached value, else `compute()`'s, kept (values are never None).

        One computation a key at a time (single flight): threads that want a key being
        computed wait for that result, or its exception, instead of each computing it.
        A cold exact count over millions of rows is asked for by every request at once.
        """
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            pending = self._computing.get(key)
            if pending is None:
                pending = self._computing[key] = Future()
                mine = True
            else:
                mine = False
        if not mine:
            return pending.result()
        try:
            value = compute()
        except BaseException as exc:
            with self._lock:
                del self._computing[key]
            pending.set_exception(exc)
            raise
        with self._lock:
            del self._computing[key]
            self._keep(key, value)
        pending.set_result(value)
        return value

    async def get_or_compute_async(self, key: Hashable, compute: Callable[[], Awaitable[V]]) -> V:
        """`get_or_compute` for one event loop's tasks: those that want a key being
        computed await that computation (none blocks the loop); if the task computing
        it is cancelled, the next of them computes it."""
        while True:
            found = self.get(key)
            if found is not None:
                return found
            pending = self._computing_async.get(key)
            if pending is None:
                break
            try:
                return await asyncio.shield(pending)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not pending.cancelled() or (task is not None and task.cancelling()):
                    raise  # this task was cancelled, not the computation
        pending = self._computing_async[key] = asyncio.get_running_loop().create_future()
        try:
            value = await compute()
        except asyncio.CancelledError:
            del self._computing_async[key]
            pending.cancel()
            raise
        except BaseException as exc:
            del self._computing_async[key]
            pending.set_exception(exc)
            pending.exception()  # marked retrieved: no warning when nobody waited
            raise
        del self._computing_async[key]
        with self._lock:
            self._keep(key, value)
        pending.set_result(value)
        return value

    def _keep(self, key: Hashable, value: V) -> None:
        """Under the lock."""
        self._items[key] = value
        if len(self._items) > self.maxsize:
            self._items.popitem(last=False)
