"""Alembic migrations, shipped inside the package so `headwater db upgrade` works anywhere."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy import text
from sqlalchemy.exc import OperationalError, ProgrammingError

from headwater.config import Settings

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy import Engine

HERE = Path(__file__).parent
# The newest revision: commands that only need the database current compare it with the
# database's own and import Alembic only when they differ (tests check it is the head).
HEAD = "0027"
T = TypeVar("T")
log = logging.getLogger("headwater.migrations")


def alembic_config(settings: Settings) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(HERE))
    config.set_main_option("sqlalchemy.url", settings.sqlalchemy_url.replace("%", "%%"))
    config.set_main_option("file_template", "%%(year)d-%%(month).2d-%%(day).2d_%%(slug)s")
    config.attributes["settings"] = settings
    return config


def upgrade(settings: Settings, revision: str = "head") -> None:
    """Bring the database to `revision` (creating the SQLite directory first)."""
    from alembic import command

    if settings.database_url is None:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    wait_while_locked(
        lambda: command.upgrade(alembic_config(settings), revision),
        seconds=settings.shutdown_timeout_seconds + 30,
    )


def bring_current(settings: Settings, engine: Engine) -> None:
    """`upgrade(settings)` unless the database is at `HEAD` already: one query when it
    is, where Alembic's own no-op upgrade (its environment, the models, every revision's
    script) cost each start of a process some 100 ms of CPU."""
    if not is_current(engine):
        upgrade(settings)


def is_current(engine: Engine) -> bool:
    """Whether the database is at `HEAD` already (one query, no Alembic)."""
    try:
        with engine.connect() as connection:
            found = connection.execute(text("SELECT version_num FROM alembic_version")).all()
    except (OperationalError, ProgrammingError):  # no such table: a new database
        return False
    return [row[0] for row in found] == [HEAD]


def wait_while_locked(call: Callable[[], T], *, seconds: float) -> T:
    """`call()`, tried again while SQLite answers "database is locked" (another process,
    such as one draining before a restart, holds the writer), for up to `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            log.info("database locked by another process; waiting to start")
            time.sleep(0.5)
