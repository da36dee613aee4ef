"""kit.cache.LRU: single flight (issue 24), eviction."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from headwater.kit.cache import LRU


def test_threads_wanting_a_key_being_computed_wait_for_that_one_computation() -> None:
    cache: LRU[int] = LRU(maxsize=8)
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def slow() -> int:
        calls.append(1)
        started.set()
        assert release.wait(10)
        return 42

    with ThreadPoolExecutor(8) as pool:
        first = pool.submit(cache.get_or_compute, "k", slow)
        assert started.wait(10)
        others = [pool.submit(cache.get_or_compute, "k", slow) for _ in range(7)]
        release.set()
        assert [f.result(10) for f in [first, *others]] == [42] * 8
    assert len(calls) == 1
    assert cache.get_or_compute("k", lambda: 0) == 42  # kept


def test_a_failed_computation_fails_its_waiters_and_is_not_kept() -> None:
    cache: LRU[int] = LRU(maxsize=8)
    started, release = threading.Event(), threading.Event()

    def failing() -> int:
        started.set()
        assert release.wait(10)
        raise RuntimeError("database gone")

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(cache.get_or_compute, "k", failing)
        assert started.wait(10)
        waiter = pool.submit(cache.get_or_compute, "k", lambda: 7)
        release.set()
        for future in (first, waiter):
            with pytest.raises(RuntimeError, match="database gone"):
                future.result(10)
    assert cache.get_or_compute("k", lambda: 7) == 7  # the next call computes again


def test_the_least_recently_used_key_goes_first() -> None:
    cache: LRU[int] = LRU(maxsize=2)
    cache.get_or_compute("a", lambda: 1)
    cache.get_or_compute("b", lambda: 2)
    assert cache.get("a") == 1  # a is now the most recent
    cache.get_or_compute("c", lambda: 3)
    assert cache.get("b") is None and cache.get("a") == 1 and cache.get("c") == 3


def test_tasks_wanting_a_key_being_computed_await_that_one_computation() -> None:
    cache: LRU[int] = LRU(maxsize=8)
    calls: list[int] = []

    async def slow() -> int:
        calls.append(1)
        await asyncio.sleep(0.05)
        return 42

    async def main() -> list[int]:
        return await asyncio.gather(*(cache.get_or_compute_async("k", slow) for _ in range(8)))

    assert asyncio.run(main()) == [42] * 8
    assert len(calls) == 1


def test_when_the_computing_task_is_cancelled_a_waiting_one_computes() -> None:
    cache: LRU[int] = LRU(maxsize=8)
    started = []

    async def slow() -> int:
        started.append(1)
        await asyncio.sleep(0.05 if len(started) > 1 else 10)
        return len(started)

    async def main() -> int:
        first = asyncio.create_task(cache.get_or_compute_async("k", slow))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(cache.get_or_compute_async("k", slow))
        await asyncio.sleep(0.01)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        return await second

    assert asyncio.run(main()) == 2  # the second task computed it after the first's cancel
