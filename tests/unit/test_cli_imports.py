"""What an operator command loads before its work: its start is most of its time
(`bench/cli_startup.py`), so modules only the servers use stay out of it."""

from __future__ import annotations

import subprocess
import sys

# imported by the servers (logging), never by a command that opens the database
SERVER_ONLY = ("structlog",)


def test_a_command_that_opens_the_database_imports_no_server_only_module() -> None:
    """`companies create` imports the identity service, the database and the migrations'
    check; none of them brings structlog (40 ms of a command's start)."""
    probe = (
        "import sys, headwater.cli, headwater.db, headwater.identity.service, "
        "headwater.migrations; "
        f"print(','.join(m for m in {SERVER_ONLY!r} if m in sys.modules))"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert found == ""
