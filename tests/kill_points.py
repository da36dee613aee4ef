"""Where a kill test's script kills its own process (SIGKILL: nothing of it runs after,
as when the machine loses power): right after a call of the code under test. The
scripts run forked (`preloaded.run_script`) and import this module."""

from __future__ import annotations

import os
import signal
from typing import Any


def kill_after(owner: Any, name: str, *, passing: int = 0) -> None:
    """Replace `owner.name` with a call of it that then kills the process; its first
    `passing` calls go through as they are."""
    real = getattr(owner, name)
    calls = 0

    def killing(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        result = real(*args, **kwargs)
        if calls > passing:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    setattr(owner, name, killing)
