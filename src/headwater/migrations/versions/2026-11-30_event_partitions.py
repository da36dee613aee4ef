"""event_partitions: events, deliveries and attempts partitioned by day (contract 19)

On PostgreSQL, `events`, `webhook_deliveries` and `webhook_attempts` become tables
partitioned by range of their event's time, a partition a UTC day (named
`<table>_pYYYYMMDD`, as `webhooks.partitions` makes them later), with a default
partition each. The event's time joins each primary key, unique key and foreign key (a
partitioned table's keys must hold its partition key); an attempt gets the column,
from its delivery. Existing rows are copied into the partitions of their days; the
numbering sequences carry on.

SQLite keeps plain tables: it gains the attempt's column and the wider unique key.

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-30 10:00:00
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import sqlalchemy as sa
from alembic import op

import headwater.db

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

DAYS_AHEAD = 7  # as `webhooks.partitions.DAYS_AHEAD`
# (table, its partition key, its sequence's column)
TABLES = [
    ("events", "created_at", "seq"),
    ("webhook_deliveries", "event_created_at", "id"),
    ("webhook_attempts", "event_created_at", "id"),
]
# every index but the keys, as 0024 left them
INDEXES = [
    "CREATE INDEX ix_events_company_id ON events (company_id, pos) WHERE pos IS NOT NULL",
    "CREATE INDEX ix_events_unsequenced ON events (company_id, seq) WHERE pos IS NULL",
    "CREATE INDEX ix_webhook_deliveries_status ON webhook_deliveries (status, next_attempt_at)",
    "CREATE INDEX ix_webhook_deliveries_endpoint_id ON webhook_deliveries (endpoint_id, created_at)",
    "CREATE INDEX ix_webhook_deliveries_event_seq ON webhook_deliveries (event_seq)",
    "CREATE INDEX ix_webhook_deliveries_leased ON webhook_deliveries (endpoint_id, leased_until)"
    " WHERE leased_until IS NOT NULL",
    "CREATE INDEX ix_webhook_attempts_delivery_id ON webhook_attempts (delivery_id, id)",
]
KEYS = [
    "ALTER TABLE events ADD CONSTRAINT pk_events PRIMARY KEY (seq, company_id, created_at)",
    "ALTER TABLE webhook_deliveries ADD CONSTRAINT pk_webhook_deliveries"
    " PRIMARY KEY (id, company_id, event_created_at)",
    "ALTER TABLE webhook_attempts ADD CONSTRAINT pk_webhook_attempts"
    " PRIMARY KEY (id, company_id, event_created_at)",
    "ALTER TABLE webhook_deliveries ADD CONSTRAINT uq_webhook_deliveries_endpoint_id"
    " UNIQUE (endpoint_id, event_seq, company_id, event_created_at)",
    "ALTER TABLE webhook_deliveries ADD CONSTRAINT"
    " fk_webhook_deliveries_endpoint_id_webhook_endpoints FOREIGN KEY (endpoint_id)"
    " REFERENCES webhook_endpoints (id) ON DELETE CASCADE",
    "ALTER TABLE webhook_deliveries ADD CONSTRAINT fk_webhook_deliveries_event_seq_events"
    " FOREIGN KEY (event_seq, company_id, event_created_at)"
    " REFERENCES events (seq, company_id, created_at) ON DELETE CASCADE",
    "ALTER TABLE webhook_attempts ADD CONSTRAINT"
    " fk_webhook_attempts_delivery_id_webhook_deliveries"
    " FOREIGN KEY (delivery_id, company_id, event_created_at)"
    " REFERENCES webhook_deliveries (id, company_id, event_created_at) ON DELETE CASCADE",
]


def _days() -> list[date]:
    """Every day from the oldest event's through `DAYS_AHEAD` days from today."""
    today = datetime.now(UTC).date()
    oldest = op.get_bind().scalar(sa.text("SELECT min(created_at) FROM events"))
    first = min(oldest.astimezone(UTC).date(), today) if oldest else today
    return [first + timedelta(days=n) for n in range((today - first).days + DAYS_AHEAD + 1)]


def _upgrade_postgresql() -> None:
    days = _days()
    for table, key, numbered in TABLES:
        added = ", event_created_at timestamptz NOT NULL" if table == "webhook_attempts" else ""
        op.execute(
            f"CREATE TABLE {table}_new (LIKE {table} INCLUDING DEFAULTS{added})"
            f" PARTITION BY RANGE ({key})"
        )
        for day in days:
            after = day + timedelta(days=1)
            op.execute(
                f"CREATE TABLE {table}_p{day:%Y%m%d} PARTITION OF {table}_new"
                f" FOR VALUES FROM ('{day} 00:00:00+00') TO ('{after} 00:00:00+00')"
            )
        op.execute(f"CREATE TABLE {table}_default PARTITION OF {table}_new DEFAULT")
        op.execute(f"ALTER SEQUENCE {table}_{numbered}_seq OWNED BY NONE")
    op.execute("INSERT INTO events_new SELECT * FROM events")
    op.execute("INSERT INTO webhook_deliveries_new SELECT * FROM webhook_deliveries")
    op.execute(
        "INSERT INTO webhook_attempts_new (id, company_id, delivery_id, event_created_at, at,"
        " status_code, error, duration_ms)"
        " SELECT a.id, a.company_id, a.delivery_id, d.event_created_at, a.at, a.status_code,"
        " a.error, a.duration_ms"
        " FROM webhook_attempts a JOIN webhook_deliveries d"
        " ON d.id = a.delivery_id AND d.company_id = a.company_id"
    )
    for table, _key, _numbered in TABLES:
        op.execute(f"DROP TABLE {table} CASCADE")
    for table, _key, numbered in TABLES:
        op.execute(f"ALTER TABLE {table}_new RENAME TO {table}")
        op.execute(f"ALTER SEQUENCE {table}_{numbered}_seq OWNED BY {table}.{numbered}")
    for statement in KEYS + INDEXES:
        op.execute(statement)


def _upgrade_sqlite() -> None:
    op.add_column(
        "webhook_attempts",
        sa.Column("event_created_at", headwater.db.UTCDateTime(timezone=True), nullable=True),
    )
    op.execute(
        "UPDATE webhook_attempts SET event_created_at = (SELECT event_created_at"
        " FROM webhook_deliveries WHERE webhook_deliveries.id = webhook_attempts.delivery_id)"
    )
    op.execute("DELETE FROM webhook_attempts WHERE event_created_at IS NULL")
    with op.batch_alter_table("webhook_attempts", recreate="always") as batch:
        batch.alter_column(
            "event_created_at",
            existing_type=headwater.db.UTCDateTime(timezone=True),
            nullable=False,
        )
    with op.batch_alter_table("webhook_deliveries", recreate="always") as batch:
        batch.drop_constraint("uq_webhook_deliveries_endpoint_id", type_="unique")
        batch.create_unique_constraint(
            "uq_webhook_deliveries_endpoint_id",
            ["endpoint_id", "event_seq", "company_id", "event_created_at"],
        )


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _upgrade_postgresql()
    else:
        _upgrade_sqlite()


def downgrade() -> None:
    raise NotImplementedError("the partitions are not taken out again")
