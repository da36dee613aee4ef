"""Alembic environment: online migrations with the app's own engine settings."""

from __future__ import annotations

from alembic import context

from headwater.db import Base, make_engine
from headwater.models import load_all

load_all()
config = context.config
settings = config.attributes["settings"]
engine = make_engine(settings)

with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
