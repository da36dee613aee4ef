"""Alembic environment: online migrations with the app's own engine settings."""

from __future__ import annotations

from alembic import context

from headwater.db import Base, make_engine
from headwater.models import load_all

load_all()


def _managed(
    obj: object, name: str | None, type_: str, reflected: bool, compare_to: object
) -> bool:
    """Leave out of autogenerate the PostgreSQL-only indexes migrations create by hand."""
    return not (type_ == "index" and name is not None and name.endswith("_trgm"))


# An arbitrary constant naming Headwater's migration lock among advisory locks.
MIGRATION_LOCK = 0x4857_6D69_6772

config = context.config
settings = config.attributes["settings"]
engine = make_engine(settings, name="headwater migrate")

with engine.connect() as connection:
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:
        # SQLite changes a table's keys by copying it; with foreign keys enforced, dropping
        # the old copy would fail for the rows that point at it. Enforcement is a setting
        # of the connection, not of a transaction: off before it begins (the driver's own
        # call, which begins none), every key checked before the commit (below).
        driver = connection.connection.driver_connection
        assert driver is not None
        driver.execute("PRAGMA foreign_keys=OFF")
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=sqlite,
        compare_type=True,
        include_object=_managed,
    )
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            # Instances started together migrate one at a time: the others wait here, then
            # find the database at head. The lock ends with the migration's transaction.
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
        context.run_migrations()
        if sqlite:
            broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
            if broken:
                raise RuntimeError(f"the migration broke foreign keys: {broken[:5]}")
engine.dispose()
