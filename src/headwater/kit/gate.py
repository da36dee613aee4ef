"""A gate for costly CPU work: a few threads of its own, a short queue, refusal beyond it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class GateFull(Exception):
    """The work waited its longest for a place and got none: refuse it (429)."""


class Gate:
    """At most `workers` calls run at once, on threads of the gate's own (never on the
    event loop, never taking the shared thread pool); up to `queue` more wait for a
    place, and the rest wait `wait` seconds before `GateFull`: a flood's refusals come
    slowly, so a client hammering one connection costs the event loop little.

    Few threads also bound memory: each argon2 check takes 19 MiB, which glibc keeps in
    the calling thread's arena; a flood on 40 pool threads kept 40 arenas' worth.
    """

    def __init__(self, *, workers: int, queue: int, wait: float, name: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._places = asyncio.Semaphore(workers + queue)
        self._wait = wait

    async def run(self, call: Callable[[], T]) -> T:
        try:
            await asyncio.wait_for(self._places.acquire(), timeout=self._wait)
        except TimeoutError:
            raise GateFull() from None
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, call)
        finally:
            self._places.release()

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
