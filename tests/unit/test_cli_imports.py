"""What an operator command loads before its work: its start is most of its time
(`bench/cli_startup.py`), so modules only the servers or a terminal use stay out of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# never imported by a command that opens the database and prints JSON elsewhere than on a
# terminal: the servers' logging, and rich (which colours a terminal's output)
NOT_AT_START = ("structlog", "rich")


def test_a_command_that_opens_the_database_imports_neither_logging_nor_rich(
    tmp_path: Path,
) -> None:
    """`companies create` on a database already migrated (migrating imports every model,
    and with them the servers' modules), its output piped: it creates the company and
    prints it as JSON (indented by two, as rich writes it on a terminal), and never
    imports structlog (40 ms of a command's start) or rich (18 ms)."""
    probe = (
        "import sys\n"
        "from headwater.cli import app\n"
        "try:\n"
        "    app(args=['companies', 'create', 'Piped'], standalone_mode=False)\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print('LOADED ' + ','.join(m for m in {NOT_AT_START!r} if m in sys.modules))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}
    env["HEADWATER_DATA_DIR"] = str(tmp_path)
    migrate = [sys.executable, "-m", "headwater.cli", "db", "upgrade"]
    subprocess.run(migrate, capture_output=True, check=True, env=env)
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env
    )
    printed, loaded = done.stdout.rsplit("LOADED ", 1)
    company = json.loads(printed)
    assert company["name"] == "Piped"
    assert printed == json.dumps(company, indent=2, ensure_ascii=False) + "\n"
    assert loaded.strip() == ""
