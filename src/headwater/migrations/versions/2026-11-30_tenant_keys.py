"""tenant_keys: company_id in every key of the tables that grow with traffic (contract 19)

Every table that grows with a company's traffic (and each company's or dataset's
counters written as traffic flows) gets `company_id` in its primary key, its unique keys
and its foreign keys to another such table, so it can be distributed by company (Citus)
or partitioned. The column is appended: a lookup by the old key alone still finds the
index's leading columns. Tables without the column get it from their parent row.

SQLite numbers `records`, `quarantined_rows`, `events`, `webhook_deliveries` and
`webhook_attempts` with its rowid, which only a one-column INTEGER PRIMARY KEY is; there
those keep the number alone as their key (and the foreign keys that point at it).

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-30 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

# a table without the column: where its company comes from (a correlated subquery,
# which both databases take)
ADDED = {
    "file_jobs": "SELECT company_id FROM file_uploads WHERE file_uploads.id = file_jobs.file_id",
    "webhook_deliveries": (
        "SELECT company_id FROM events WHERE events.seq = webhook_deliveries.event_seq"
    ),
    "webhook_attempts": (
        "SELECT company_id FROM webhook_deliveries"
        " WHERE webhook_deliveries.id = webhook_attempts.delivery_id"
    ),
    "inbox_message_ids": "SELECT company_id FROM inboxes WHERE inboxes.id = inbox_message_ids.inbox_id",
    "record_staging": (
        "SELECT company_id FROM transactions WHERE transactions.id = record_staging.transaction_id"
    ),
    "dataset_record_counts": (
        "SELECT company_id FROM datasets WHERE datasets.id = dataset_record_counts.dataset_pk"
    ),
    "record_feed_heads": (
        "SELECT company_id FROM datasets WHERE datasets.id = record_feed_heads.dataset_pk"
    ),
}
# each table's primary key before, company_id appended after
KEYS = {
    "transactions": ["id"],
    "records": ["seq"],
    "quarantined_rows": ["seq"],
    "file_uploads": ["id"],
    "file_jobs": ["id"],
    "events": ["seq"],
    "webhook_deliveries": ["id"],
    "webhook_attempts": ["id"],
    "activity_entries": ["id"],
    "exports": ["id"],
    "inbox_messages": ["id"],
    "inbox_message_ids": ["inbox_id", "message_key"],
    "sftp_uploads": ["transaction_id"],
    "record_staging": ["transaction_id"],
    "dataset_record_counts": ["dataset_pk", "shard"],
    "record_feed_heads": ["dataset_pk"],
}
ROWID_ON_SQLITE = {
    "records",
    "quarantined_rows",
    "events",
    "webhook_deliveries",
    "webhook_attempts",
}
# (table, name, columns): company_id appended
UNIQUES = [
    ("file_uploads", "uq_file_uploads_transaction_id", ["transaction_id"]),
    ("file_jobs", "uq_file_jobs_bucket", ["bucket", "object_key", "etag"]),
    ("webhook_deliveries", "uq_webhook_deliveries_endpoint_id", ["endpoint_id", "event_seq"]),
]
# (table, name, column, target, target column, on delete): company_id on both sides
FOREIGN_KEYS: list[tuple[str, str, str, str, str, str | None]] = [
    (
        "file_uploads",
        "fk_file_uploads_transaction_id_transactions",
        "transaction_id",
        "transactions",
        "id",
        None,
    ),
    ("file_jobs", "fk_file_jobs_file_id_file_uploads", "file_id", "file_uploads", "id", None),
    (
        "webhook_deliveries",
        "fk_webhook_deliveries_event_seq_events",
        "event_seq",
        "events",
        "seq",
        "CASCADE",
    ),
    (
        "webhook_attempts",
        "fk_webhook_attempts_delivery_id_webhook_deliveries",
        "delivery_id",
        "webhook_deliveries",
        "id",
        "CASCADE",
    ),
]


def _add_company_columns() -> None:
    """The column, filled from the parent row; a row without a parent (an inbox's message
    ids after the inbox went) has no company and is dropped."""
    for table, source in ADDED.items():
        op.add_column(table, sa.Column("company_id", sa.Uuid(), nullable=True))
        op.execute(f"UPDATE {table} SET company_id = ({source})")  # noqa: S608 (constants)
        op.execute(f"DELETE FROM {table} WHERE company_id IS NULL")  # noqa: S608


def _upgrade_postgresql() -> None:
    for table in ADDED:
        op.alter_column(table, "company_id", nullable=False)
    for table, name, *_ in FOREIGN_KEYS:
        op.drop_constraint(name, table, type_="foreignkey")
    for table, name, _columns in UNIQUES:
        op.drop_constraint(name, table, type_="unique")
    for table, key in KEYS.items():
        op.drop_constraint(f"pk_{table}", table, type_="primary")
        op.create_primary_key(f"pk_{table}", table, [*key, "company_id"])
    for table, name, columns in UNIQUES:
        op.create_unique_constraint(name, table, [*columns, "company_id"])
    for table, name, column, target, target_column, ondelete in FOREIGN_KEYS:
        op.create_foreign_key(
            name,
            table,
            target,
            [column, "company_id"],
            [target_column, "company_id"],
            ondelete=ondelete,
        )


def _upgrade_sqlite() -> None:
    """SQLite changes a key by copying the table (Alembic's batch mode); `env.py` turns
    foreign key enforcement off around it and checks every key before the commit."""
    uniques = {table: (name, columns) for table, name, columns in UNIQUES}
    for table, key in KEYS.items():
        with op.batch_alter_table(table, recreate="always") as batch:
            if table in ADDED:
                batch.alter_column("company_id", existing_type=sa.Uuid(), nullable=False)
            if table in uniques:
                name, columns = uniques[table]
                batch.drop_constraint(name, type_="unique")
                batch.create_unique_constraint(name, [*columns, "company_id"])
            for child, name, column, target, target_column, ondelete in FOREIGN_KEYS:
                if child != table or target in ROWID_ON_SQLITE:
                    continue
                batch.drop_constraint(name, type_="foreignkey")
                batch.create_foreign_key(
                    name,
                    target,
                    [column, "company_id"],
                    [target_column, "company_id"],
                    ondelete=ondelete,
                )
            if table not in ROWID_ON_SQLITE:
                batch.drop_constraint(f"pk_{table}", type_="primary")
                batch.create_primary_key(f"pk_{table}", [*key, "company_id"])


def upgrade() -> None:
    _add_company_columns()
    if op.get_bind().dialect.name == "postgresql":
        _upgrade_postgresql()
    else:
        _upgrade_sqlite()


def downgrade() -> None:
    raise NotImplementedError("tenant keys are not taken out again")
