"""Debian's Chromium, as the browser tests drive it through Playwright: installed by
scripts/test (`playwright install` cannot download browsers here)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def launch(playwright: Any) -> Any:
    """A headless Chromium of Playwright's `playwright` (sync API)."""
    assert shutil.which(CHROMIUM) or Path(CHROMIUM).exists(), (
        "Chromium is missing: scripts/test installs it (apt-get install -y chromium)"
    )
    return playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
