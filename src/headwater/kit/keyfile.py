"""A key kept in a file, made by the first process that needs it. It is written whole
under another name, then linked into place: processes starting together all read the
one key that won, and none reads a file half written."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable
from pathlib import Path


def load_or_make(path: Path, make: Callable[[], bytes]) -> bytes:
    """The file's bytes; if there is no file, `make()`'s, written there first (mode 0600,
    readable by the service's user only)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(make())
                out.flush()
                os.fsync(out.fileno())
            with contextlib.suppress(FileExistsError):  # another process's key won
                os.link(draft, path)
        finally:
            draft.unlink()
    return path.read_bytes()
