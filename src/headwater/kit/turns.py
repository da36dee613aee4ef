"""Turns at SQLite's one write lock, fair across threads and processes.

SQLite lets one connection write at a time. A connection that finds the lock taken
sleeps and looks again (its busy handler, about every 0.1 s), so a writer that commits
and begins again at once, as a file's batches do, can take the lock back every time
before a waiting writer looks: the waiter then waits for the whole file.

Here every writer says it is waiting, from before its BEGIN IMMEDIATE until the BEGIN
returns, by holding a shared `flock` on a file beside the database (`waiting`). A writer
that commits often (`give_way`) first checks for waiters, an exclusive `flock` that
fails while any shared one is held, and lets them go first. The kernel drops a dead
process's locks, so a crash leaves nobody waiting for ever.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# How long `give_way` waits at most for the writers before it to get their turn.
GIVE_WAY_SECONDS = 1.0


class Turns:
    """Turns at one SQLite database's write lock (`path`: the lock file)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()  # each thread its own descriptor: flock is per file

    def _fd(self) -> int:
        fd: int | None = getattr(self._local, "fd", None)
        if fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            self._local.fd = fd
        return fd

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """The block waits for the write lock (a BEGIN IMMEDIATE): others see it."""
        fd = self._fd()
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def give_way(self, *, limit: float = GIVE_WAY_SECONDS) -> float:
        """Wait while other writers wait for the write lock (at most `limit` seconds);
        how long it waited. Call it holding no write lock."""
        fd = self._fd()
        began = time.monotonic()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() - began >= limit:
                    return time.monotonic() - began
                time.sleep(0.002)
                continue
            fcntl.flock(fd, fcntl.LOCK_UN)
            return time.monotonic() - began
