"""Alembic migrations, shipped inside the package so `headwater db upgrade` works anywhere."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from headwater.config import Settings

HERE = Path(__file__).parent


def alembic_config(settings: Settings) -> Config:
    config = Config()
    config.set_main_option("script_location", str(HERE))
    config.set_main_option("sqlalchemy.url", settings.sqlalchemy_url.replace("%", "%%"))
    config.set_main_option("file_template", "%%(year)d-%%(month).2d-%%(day).2d_%%(slug)s")
    config.attributes["settings"] = settings
    return config


def upgrade(settings: Settings, revision: str = "head") -> None:
    """Bring the database to `revision` (creating the SQLite directory first)."""
    if settings.database_url is None:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    command.upgrade(alembic_config(settings), revision)
