"""Process memory: large blocks go back to the system when freed, and the cyclic
garbage collector runs where it pays."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from collections.abc import Iterator
from contextlib import contextmanager

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters
M_MMAP_THRESHOLD = -3
# Above every block a request makes (bodies are at most 5 MiB by default), below argon2's
# 19 MiB: requests keep reusing heap memory, a secret check's block goes straight back.
LARGE = 16 * 1024 * 1024
# Free memory a heap keeps at its top before giving it back: glibc's own rule once it has
# raised the mmap threshold (twice the threshold). Fixing the threshold turns that rule
# off and leaves 128 KiB, and then every request's large buffers (a 500 KB batch is
# copied several times) were given back when freed and faulted in again on the next:
# 40% more time for the same parsing and writing (docs/benchmarks/history/2026-11.md, issue 24).
KEEP = 2 * LARGE


def return_large_blocks() -> bool:
    """Make glibc serve blocks of 16 MiB and more with mmap, always, so that freeing one
    gives it back to the system at once. By default the threshold rises to the size of
    the largest block freed: after one argon2 check (19 MiB) every later one was carved
    from a thread's arena and kept there, and a token flood left each process hundreds
    of MiB larger. Up to KEEP bytes freed at the top of a heap are kept for the next
    request. False where the C library is not glibc (nothing changes)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        return bool(libc.mallopt(M_MMAP_THRESHOLD, LARGE) and libc.mallopt(M_TRIM_THRESHOLD, KEEP))
    except (OSError, AttributeError):
        return False


# Young collections every this many new containers (Python's default is 700).
YOUNG_COLLECTION = 20_000


@contextmanager
def collecting_less() -> Iterator[None]:
    """For a process that has started (the API's and the worker's): what exists now
    is frozen out of every later collection, and young collections run every
    `YOUNG_COLLECTION` new containers instead of every 700; as it was, after.

    Everything loaded at start (modules, models, routes, compiled statements: some
    150,000 objects) lives as long as the process; frozen, the collector no longer
    walks it (a full collection took 65 ms, a pause of every request in flight). A
    500-record push, or a 5,000-row piece of a file, makes thousands of dicts and lists
    that reference counting frees: at 700 each was walked by several young collections
    while alive, and the records on their way to the database were moved up and walked
    again by the older generations' collections (a tenth of the API's CPU in a profile
    of batch pushes; 18% of the file worker's time). Cycles are still collected, less
    often. Unfrozen after, so that what was frozen may be collected again (the tests
    start many apps in one process).

    Inside another (an app started while another runs, as tests do) it changes nothing:
    the enclosing one holds the settings, and its full collection at start walked a test
    process's millions of objects again each time (a sixth of the suite's CPU). So does a
    freeze someone else made (`gc.get_freeze_count`), asked only when no enclosing one
    runs: it counts the frozen objects one by one (50 ms among a test process's millions,
    each time an app of the tests started).
    """
    global _running
    outermost = not _running and not gc.get_freeze_count()
    if outermost:
        default = gc.get_threshold()
        gc.collect()
        gc.freeze()
        gc.set_threshold(YOUNG_COLLECTION, *default[1:])
    _running += 1
    try:
        yield
    finally:
        _running -= 1
        if outermost:
            gc.unfreeze()
            gc.set_threshold(*default)


# how many `collecting_less` run now in this process (apps started in one another)
_running = 0
