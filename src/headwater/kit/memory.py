"""Process memory: large blocks go back to the system when freed."""

from __future__ import annotations

import ctypes
import ctypes.util

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
# Above every block a request makes (bodies are at most 5 MiB by default), below argon2's
# 19 MiB: requests keep reusing heap memory, a secret check's block goes straight back.
LARGE = 16 * 1024 * 1024


def return_large_blocks() -> bool:
    """Make glibc serve blocks of 16 MiB and more with mmap, always, so that freeing one
    gives it back to the system at once. By default the threshold rises to the size of
    the largest block freed: after one argon2 check (19 MiB) every later one was carved
    from a thread's arena and kept there, and a token flood left each process hundreds
    of MiB larger. False where the C library is not glibc (nothing changes)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        return bool(libc.mallopt(M_MMAP_THRESHOLD, LARGE))
    except (OSError, AttributeError):
        return False
