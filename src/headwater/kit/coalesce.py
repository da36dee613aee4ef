"""Jobs by key, off the caller's thread: one run of a key at a time, and every ask that
comes while a run goes on shared by one run after it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass


@dataclass(slots=True)
class _Key:
    running: Future[object]
    following: Future[object] | None = None
    following_job: Callable[[], object] | None = None


class Coalescer:
    """`ask(key, job, timeout)` runs `job` on a thread of this coalescer and waits for it.

    A run of a key answers only the asks made before it started: an ask made while the
    key runs waits for the next run, which starts when that one ends and serves every ask
    made meanwhile. So a job that reads the state it acts on (the rows committed and not
    yet numbered) sees everything committed before its ask, and a hundred asks of one
    key at once cost two runs, not a hundred. Every ask of a key must ask for the same
    work: the next run is the job of the first ask that waits for it."""

    def __init__(self, name: str, *, threads: int = 2) -> None:
        self._name = name
        self._size = threads
        self._lock = threading.Lock()
        self._keys: dict[Hashable, _Key] = {}
        self._threads: ThreadPoolExecutor | None = None
        self._closed = False

    def ask(self, key: Hashable, job: Callable[[], object], *, timeout: float) -> bool:
        """Whether a run of `job` for `key` that started after this ask ended within
        `timeout` seconds; its exception, if it raised one, is raised here."""
        with self._lock:
            state = self._keys.get(key)
            if state is None:
                done: Future[object] = Future()
                self._keys[key] = _Key(done)
                self._start(key, job, done)
            elif state.following is None:
                done = state.following = Future()
                state.following_job = job
            else:
                done = state.following
        try:
            done.result(timeout)
        except FutureTimeout:
            return False
        return True

    def _start(self, key: Hashable, job: Callable[[], object], done: Future[object]) -> None:
        # called with the lock held
        if self._closed:
            del self._keys[key]
            done.set_exception(RuntimeError(f"{self._name} is closed"))
            return
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self._size, thread_name_prefix=self._name)
        self._threads.submit(self._run, key, job, done)

    def _run(self, key: Hashable, job: Callable[[], object], done: Future[object]) -> None:
        try:
            done.set_result(job())
        except BaseException as exc:  # handed to every ask that waits for this run
            done.set_exception(exc)
        with self._lock:
            state = self._keys[key]
            if state.following is None or state.following_job is None:
                del self._keys[key]
                return
            following, job = state.following, state.following_job
            self._keys[key] = _Key(following)
            self._start(key, job, following)

    def close(self) -> None:
        """Wait for the runs going on; an ask after this fails."""
        with self._lock:
            self._closed = True
            threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown(wait=True)
