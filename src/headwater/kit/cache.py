"""A small thread-safe LRU map, for values whose key already says when they go stale."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class LRU(Generic[V]):
    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        """The cached value, or None (nothing is computed)."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        return None

    def get_or_compute(self, key: Hashable, compute: Callable[[], V]) -> V:
        """The cached value, else `compute()`'s, kept (values are never None)."""
        found = self.get(key)
        if found is not None:
            return found
        value = compute()  # outside the lock: two threads may compute the same value once each
        with self._lock:
            self._items[key] = value
            if len(self._items) > self.maxsize:
                self._items.popitem(last=False)
        return value
