"""The record feed's read-ahead: when a page of the feed comes back full, the page after
it is read at once, on a thread of its own, while its reader receives and handles the
one before; the reader's next request takes it ready (one process's, so a reader on one
keep-alive connection finds it).

What makes this safe: a full page after a cursor never changes, but for a removal of
records (an erasure, retention), which moves the dataset's `subjects_version`, part of
the key: a page read ahead before it is never served after it. Positions are given
only to committed transactions and only after every lower one (`feed`), so the records
after a cursor that are already placed stay the same, in the same order. A page that
was not full (its reader is at the end) is never read ahead, and a page read ahead that
came back short is not served (records may have committed since: a reader sees its own
writes at once). An entry is taken once, and lives at most `SECONDS`; at most `ENTRIES`
are kept, the oldest dropped first, so a reader that goes away costs one page of memory
for a moment.
The caller's right to read the dataset is checked on every request before a page is
taken, so a page read ahead reaches only a caller who may read it.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from headwater.ingestion import feed

ENTRIES = 16
SECONDS = 5.0
THREADS = 2

Key = tuple[uuid.UUID, int, feed.Cursor, int]  # dataset, its subjects_version, cursor, limit


class ReadAhead:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pages: OrderedDict[Key, tuple[float, Future[feed.Changes]]] = OrderedDict()
        self._threads: ThreadPoolExecutor | None = None

    def take(self, key: Key) -> feed.Changes | None:
        """The full page read ahead for `key`, waiting for it if it is being read; None
        when there is none, or it came back short, or its read failed: the caller reads
        it itself."""
        reading = self._pop(key)
        if reading is None:
            return None
        try:
            page = reading.result()
        except Exception:  # read again by the caller, which reports it
            return None
        return page if page.count == key[3] else None

    async def take_async(self, key: Key) -> feed.Changes | None:
        """`take`, waiting on the event loop rather than on a thread."""
        reading = self._pop(key)
        if reading is None:
            return None
        try:
            page = await asyncio.wrap_future(reading)
        except Exception:  # read again by the caller, which reports it
            return None
        return page if page.count == key[3] else None

    def _pop(self, key: Key) -> Future[feed.Changes] | None:
        with self._lock:
            entry = self._pages.pop(key, None)
        if entry is None or time.monotonic() - entry[0] > SECONDS:
            return None
        return entry[1]

    def start(self, key: Key, read: Callable[[], feed.Changes]) -> None:
        """Read the page for `key` on a thread of this read-ahead, for a later `take`."""
        with self._lock:
            if key in self._pages:
                return
            if self._threads is None:
                self._threads = ThreadPoolExecutor(THREADS, thread_name_prefix="feed-ahead")
            self._pages[key] = (time.monotonic(), self._threads.submit(read))
            while len(self._pages) > ENTRIES:
                self._pages.popitem(last=False)

    def close(self) -> None:
        with self._lock:
            self._pages.clear()
            threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown(wait=True, cancel_futures=True)
