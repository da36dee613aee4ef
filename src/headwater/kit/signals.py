"""Wake coroutines waiting on a key, from any thread of the process."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Hashable


class Signals:
    """`wait(key, timeout)` sleeps until `notify(key)` or the timeout; `notify` may be
    called from any thread (a push commits on a worker thread or on the event loop).
    A notification reaches the waiters present at that moment; there is no memory of
    it, so a waiter checks its condition before it waits and again after."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[Hashable, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}

    async def wait(self, key: Hashable, timeout: float) -> bool:
        """True when notified, False at the timeout."""
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._waiters.setdefault(key, set()).add(waiter)
        try:
            await asyncio.wait_for(waiter[1].wait(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._waiters[key]

    def notify(self, key: Hashable) -> None:
        with self._lock:
            waiters = list(self._waiters.get(key, ()))
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:  # called from a thread
            running = None
        for loop, event in waiters:
            if loop.is_closed():
                continue
            if running is loop:
                event.set()
            else:
                loop.call_soon_threadsafe(event.set)

    def notify_all(self) -> None:
        """Wake every waiter, whatever its key."""
        with self._lock:
            keys = list(self._waiters)
        for key in keys:
            self.notify(key)

    def waiting(self) -> int:
        """How many coroutines wait, all keys together."""
        with self._lock:
            return sum(len(waiters) for waiters in self._waiters.values())
