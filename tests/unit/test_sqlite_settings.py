"""The embedded database's connections: the settings each one gets (`headwater.db`)."""

from __future__ import annotations

from pathlib import Path

from headwater.config import Settings
from headwater.db import Database


def test_each_sqlite_connection_writes_ahead_and_checkpoints_every_10000_pages(
    tmp_path: Path,
) -> None:
    database = Database(Settings(data_dir=tmp_path))
    try:
        with database.engine.connect() as connection:
            found = {
                name: connection.exec_driver_sql(f"PRAGMA {name}").scalar()
                for name in (
                    "journal_mode",
                    "synchronous",
                    "foreign_keys",
                    "busy_timeout",
                    "wal_autocheckpoint",
                    "journal_size_limit",
                )
            }
    finally:
        database.dispose()
    assert found == {
        "journal_mode": "wal",
        "synchronous": 1,  # NORMAL: the log is synced at each checkpoint, not each commit
        "foreign_keys": 1,
        "busy_timeout": 5000,
        # a random-key index (subjects, dedupe keys) dirties a page a record: checkpointing
        # at SQLite's default 1,000 pages rewrote them after nearly every commit
        "wal_autocheckpoint": 10_000,
        "journal_size_limit": 64 * 1024 * 1024,
    }
