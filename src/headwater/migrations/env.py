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


config = context.config
settings = config.attributes["settings"]
engine = make_engine(settings)

with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_object=_managed,
    )
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
