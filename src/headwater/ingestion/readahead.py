"""The record feed's read-ahead: when a page of the feed comes back full, the pages after
it are read at once, on threads of their own, while its reader receives and handles the
one before; the reader's next request takes its page ready (one process's, so a reader
on one keep-alive connection finds it). `DEPTH` pages are kept ahead of a reader's last
request: each page read ahead, once back full, starts the next, so the database reads
one page while the service sends another and the reader parses a third.

What makes this safe: a full page after a cursor never changes, but for a removal of
records (an erasure, retention), which moves the dataset's `subjects_version`, part of
the key: a page read ahead before it is never served after it. Positions are given
only to committed transactions and only after every lower one (`feed`), so the records
after a cursor that are already placed stay the same, in the same order. Nothing is read
ahead of a page that was not full (its reader is at the end), and a page read ahead that
came back short is not served (records may have committed since: a reader sees its own
writes at once). An entry is taken once, and lives at most `SECONDS`; at most `ENTRIES`
are kept, the oldest dropped first, so a reader that goes away costs `DEPTH` pages of
memory for a moment.
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
from dataclasses import dataclass

from headwater.ingestion import feed

ENTRIES = 16
SECONDS = 5.0
THREADS = 2
DEPTH = 2  # pages read ahead of a reader's last request

Key = tuple[uuid.UUID, int, feed.Cursor, int]  # dataset, its subjects_version, cursor, limit
Read = Callable[[feed.Cursor], feed.Changes]  # the page after a cursor, of the key's dataset


@dataclass(slots=True)
class _Entry:
    at: float
    reading: Future[feed.Changes]
    depth: int  # pages wanted read ahead from this one on, itself included
    chained: int = 0  # the depth the page after it was started with


class ReadAhead:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pages: OrderedDict[Key, _Entry] = OrderedDict()
        self._threads: ThreadPoolExecutor | None = None
        self._closed = False

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
        if entry is None or time.monotonic() - entry.at > SECONDS:
            return None
        return entry.reading

    def start(self, key: Key, read: Read, depth: int = DEPTH) -> None:
        """Read the page for `key` (`read` of its cursor) on a thread of this read-ahead,
        for a later `take`; and, once it is back full, the `depth - 1` pages after it."""
        with self._lock:
            if self._closed:
                return
            entry = self._pages.get(key)
            fresh = entry is None
            if entry is None:
                if self._threads is None:
                    self._threads = ThreadPoolExecutor(THREADS, thread_name_prefix="feed-ahead")
                entry = _Entry(time.monotonic(), self._threads.submit(read, key[2]), depth)
                self._pages[key] = entry
                while len(self._pages) > ENTRIES:
                    self._pages.popitem(last=False)
            else:
                entry.depth = max(entry.depth, depth)
        if fresh:
            entry.reading.add_done_callback(lambda _: self._chain(key, entry, read))
        elif entry.reading.done():
            self._chain(key, entry, read)

    def _chain(self, key: Key, entry: _Entry, read: Read) -> None:
        """Start the page after `entry`'s, once it is back full, if more are wanted."""
        reading = entry.reading
        if reading.cancelled() or reading.exception() is not None:
            return
        page = reading.result()
        with self._lock:
            if page.count != key[3] or entry.depth <= 1 or entry.chained >= entry.depth:
                return
            entry.chained = depth = entry.depth
        self.start((key[0], key[1], page.cursor, key[3]), read, depth - 1)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._pages.clear()
            threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown(wait=True, cancel_futures=True)
