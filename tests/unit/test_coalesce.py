"""The numbering's coalescer: one run of a key at a time, and asks made during a run
served by one run after it, which starts after them."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from headwater.kit.coalesce import Coalescer


def test_asks_during_a_run_share_the_one_after_it() -> None:
    coalescer = Coalescer("test")
    started, release = threading.Event(), threading.Event()
    runs: list[int] = []

    def job() -> None:
        runs.append(len(runs))
        started.set()
        release.wait(10)

    try:
        with ThreadPoolExecutor(21) as pool:
            first = pool.submit(coalescer.ask, "k", job, timeout=10)
            assert started.wait(10)
            later = [pool.submit(coalescer.ask, "k", job, timeout=10) for _ in range(20)]
            release.set()
            assert first.result() and all(f.result() for f in later)
        assert runs == [0, 1]  # the run going on, and one after it for all twenty
    finally:
        coalescer.close()


def test_an_ask_waits_for_a_run_that_starts_after_it() -> None:
    """The job reads a value set before the ask; a run already going when it was set
    would not have seen it, so the ask must wait for the next one."""
    coalescer = Coalescer("test")
    seen: list[int] = []
    value = [0]
    started, release = threading.Event(), threading.Event()

    def job() -> None:
        seen.append(value[0])
        started.set()
        release.wait(10)

    try:
        with ThreadPoolExecutor(2) as pool:
            pool.submit(coalescer.ask, "k", job, timeout=10)
            assert started.wait(10)
            value[0] = 1  # "committed" while the first run goes on
            mine = pool.submit(coalescer.ask, "k", job, timeout=10)
            release.set()
            assert mine.result()
        assert seen == [0, 1]
    finally:
        coalescer.close()


def test_keys_run_apart_and_errors_reach_their_asks() -> None:
    coalescer = Coalescer("test")

    def fails() -> None:
        raise ValueError("numbering failed")

    try:
        with pytest.raises(ValueError, match="numbering failed"):
            coalescer.ask("a", fails, timeout=10)
        assert coalescer.ask("b", lambda: None, timeout=10)
        assert coalescer.ask("a", lambda: None, timeout=10)  # the key is free again
    finally:
        coalescer.close()


def test_an_ask_that_times_out_says_so() -> None:
    coalescer = Coalescer("test")
    release = threading.Event()
    try:
        assert coalescer.ask("k", lambda: release.wait(10), timeout=0.01) is False
    finally:
        release.set()
        coalescer.close()
    with pytest.raises(RuntimeError, match="closed"):
        coalescer.ask("k", lambda: None, timeout=1)
