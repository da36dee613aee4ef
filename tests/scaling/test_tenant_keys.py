"""Tenant keys (contract 19): every table that grows with a company's traffic carries
`company_id` in its primary key, in each unique key and in each foreign key to another
such table, so it can be distributed by company (Citus) or partitioned. Checked on the
models and on a migrated database's own catalog, on both databases."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from headwater import migrations
from headwater.config import Settings
from headwater.db import Base
from headwater.models import load_all
from tests.factories import fresh_pg_database

# docs/scaling.md lists the same three kinds; a new table fails here until it is sorted.
TRAFFIC = {
    "records",
    "transactions",
    "quarantined_rows",
    "file_uploads",
    "file_jobs",
    "events",
    "webhook_deliveries",
    "webhook_attempts",
    "activity_entries",
    "exports",
    "inbox_messages",
    "inbox_message_ids",
    "sftp_uploads",
    "sftp_held_files",
    "idempotency_keys",
    "record_staging",
    "record_tombstones",
    "dedupe_keys",
    "suppressions",
    "erasures",
    "erasure_items",
}
# a row or a few per company or dataset, written as traffic flows: distributed with
# their company's rows, keyed by it
PER_COMPANY = {
    "event_heads",
    "event_horizons",
    "activity_heads",
    "company_hash_keys",
    "dataset_record_counts",
    "record_feed_heads",
}
# small, changed by people rather than traffic: reference tables under Citus
CONFIGURATION = {
    "companies",
    "ingestion_clients",
    "credentials",
    "datasets",
    "dataset_schemas",
    "dataset_transforms",
    "workflow_categories",
    "workflow_templates",
    "workflows",
    "workflow_tasks",
    "webhook_endpoints",
    "sftp_accounts",
    "inboxes",
    "signing_keys",
    "token_issuer",
    "shared_keys",
    "scheduled_jobs",
    "console_sessions",
}
# SQLite numbers these rows with its rowid, which only a one-column INTEGER PRIMARY KEY
# is: there the key stays the number alone (unique by itself, and no distribution)
ROWID_ON_SQLITE = {
    "records",
    "quarantined_rows",
    "events",
    "webhook_deliveries",
    "webhook_attempts",
}


def _keys(columns: Any) -> list[str]:
    return [getattr(column, "name", column) for column in columns]


def _problems_of_models() -> list[str]:
    load_all()
    problems = []
    for table in Base.metadata.tables.values():
        if table.name not in TRAFFIC | PER_COMPANY:
            continue
        if "company_id" not in _keys(table.primary_key.columns):
            problems.append(f"{table.name}: primary key {_keys(table.primary_key.columns)}")
        for constraint in table.constraints:
            keyed = "company_id" in _keys(constraint.columns)
            if isinstance(constraint, sa.UniqueConstraint) and not keyed:
                problems.append(f"{table.name}: unique {_keys(constraint.columns)}")
            foreign = isinstance(constraint, sa.ForeignKeyConstraint)
            if foreign and not keyed and constraint.referred_table.name in TRAFFIC:
                problems.append(f"{table.name}: foreign key {_keys(constraint.columns)}")
        for index in table.indexes:
            if index.unique and "company_id" not in _keys(index.columns):
                problems.append(f"{table.name}: unique index {_keys(index.columns)}")
    return problems


def test_every_table_is_sorted_as_traffic_per_company_or_configuration() -> None:
    load_all()
    kinds = (TRAFFIC, PER_COMPANY, CONFIGURATION)
    assert not TRAFFIC & PER_COMPANY and not TRAFFIC & CONFIGURATION
    assert not PER_COMPANY & CONFIGURATION
    assert set(Base.metadata.tables) == set().union(*kinds)


def test_the_models_key_every_traffic_table_by_company() -> None:
    assert _problems_of_models() == []


@pytest.fixture
def migrated(backend: str, tmp_path: Path) -> Iterator[sa.Engine]:
    """A new database, migrated to the head."""
    if backend == "sqlite":
        settings = Settings(data_dir=tmp_path, database_url=None, log_level="WARNING")
        migrations.upgrade(settings)
        engine = sa.create_engine(f"sqlite:///{tmp_path / 'headwater.db'}")
        yield engine
        engine.dispose()
        return
    with fresh_pg_database("hw_tenant") as (_name, url):
        settings = Settings(data_dir=tmp_path, database_url=url, log_level="WARNING")
        migrations.upgrade(settings)
        engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
        yield engine
        engine.dispose()


def test_the_migrated_catalog_keys_every_traffic_table_by_company(
    backend: str, migrated: sa.Engine
) -> None:
    """The database's own catalog, as the migrations left it (not the models' word)."""
    inspector = sa.inspect(migrated)
    problems = []
    for name in sorted(TRAFFIC | PER_COMPANY):
        columns = {column["name"] for column in inspector.get_columns(name)}
        if "company_id" not in columns:
            problems.append(f"{name}: no company_id")
        key = inspector.get_pk_constraint(name)["constrained_columns"]
        if backend == "sqlite" and name in ROWID_ON_SQLITE:
            assert len(key) == 1, name  # the rowid itself
        elif "company_id" not in key:
            problems.append(f"{name}: primary key {key}")
        for unique in inspector.get_unique_constraints(name):
            if "company_id" not in unique["column_names"]:
                problems.append(f"{name}: unique {unique['column_names']}")
        for index in inspector.get_indexes(name):
            if index["unique"] and "company_id" not in index["column_names"]:
                problems.append(f"{name}: unique index {index['column_names']}")
        for foreign in inspector.get_foreign_keys(name):
            target, columns = foreign["referred_table"], foreign["constrained_columns"]
            rowid = backend == "sqlite" and target in ROWID_ON_SQLITE
            if target in TRAFFIC and not rowid and "company_id" not in columns:
                problems.append(f"{name}: foreign key {columns}")
    assert problems == []


# --- a database with data from the previous version --------------------------------------------

PREVIOUS = "0023"


def _filled(table: sa.Table, backend: str, given: dict[str, Any]) -> dict[str, Any]:
    """A row of `table` as the previous version could hold it: `given`, and a plain value
    in every other column that must have one."""
    row = dict(given)
    for column in table.columns:
        if column.name in row or column.nullable or column.server_default is not None:
            continue
        kind = repr(column.type).upper()
        if "INT" in kind and list(table.primary_key.columns) == [column]:
            continue  # numbered by the database
        if "UUID" in kind or kind.startswith("CHAR(LENGTH=32)"):
            row[column.name] = _uuid(backend, uuid.uuid4())
        elif "INT" in kind:
            row[column.name] = 1
        elif "DATE" in kind or "TIME" in kind:
            row[column.name] = datetime(2026, 11, 29, tzinfo=UTC)
        elif "JSON" in kind:
            row[column.name] = "[]" if backend == "sqlite" else []
        elif "BOOL" in kind:
            row[column.name] = False
        elif "BLOB" in kind or "BYTEA" in kind:
            row[column.name] = b"x"
        else:
            row[column.name] = "x"
    return row


def _uuid(backend: str, value: uuid.UUID) -> Any:
    return value.hex if backend == "sqlite" else value


def _old_data(engine: sa.Engine, backend: str) -> dict[str, uuid.UUID]:
    """One company's rows in every table 0024 changes, written at 0023, and a message id
    of an inbox that is gone. The ids it chose."""
    ids = {name: uuid.uuid4() for name in ("company", "dataset", "transaction", "upload")}
    ids |= {name: uuid.uuid4() for name in ("endpoint", "inbox", "gone_inbox", "event")}
    u = {name: _uuid(backend, value) for name, value in ids.items()}
    company = {"company_id": u["company"]}
    rows: list[tuple[str, dict[str, Any]]] = [
        ("companies", {"id": u["company"]}),
        ("ingestion_clients", {"client_id": "crm", **company}),
        ("datasets", {"id": u["dataset"], "client_id": "crm", **company}),
        ("transactions", {"id": u["transaction"], "dataset_pk": u["dataset"], **company}),
        ("records", {"dataset_pk": u["dataset"], "transaction_id": u["transaction"], **company}),
        ("records", {"dataset_pk": u["dataset"], "transaction_id": u["transaction"], **company}),
        ("quarantined_rows", {"transaction_id": u["transaction"], **company}),
        ("file_uploads", {"id": u["upload"], "transaction_id": u["transaction"], **company}),
        ("file_jobs", {"file_id": u["upload"], "etag": "e1"}),
        ("events", {"id": u["event"], **company}),
        ("webhook_endpoints", {"id": u["endpoint"], **company}),
        ("webhook_deliveries", {"id": 7, "endpoint_id": u["endpoint"], "event_seq": 1}),
        ("webhook_attempts", {"delivery_id": 7}),
        ("activity_entries", {"seq": 1, **company}),
        ("exports", {"dataset_pk": u["dataset"], **company}),
        ("inboxes", {"id": u["inbox"], "local_part": "orders", **company}),
        ("inbox_messages", {"inbox_id": u["inbox"], **company}),
        ("inbox_message_ids", {"inbox_id": u["inbox"], "message_key": "k1"}),
        ("inbox_message_ids", {"inbox_id": u["gone_inbox"], "message_key": "k2"}),
        ("sftp_uploads", {"transaction_id": u["transaction"], **company}),
        ("record_staging", {"transaction_id": u["transaction"], "dataset_pk": u["dataset"]}),
        ("dataset_record_counts", {"dataset_pk": u["dataset"], "shard": 3, "records": 2}),
        ("record_feed_heads", {"dataset_pk": u["dataset"], "pos": 5}),
    ]
    tables = sa.MetaData()
    tables.reflect(engine)
    with engine.begin() as connection:
        for name, given in rows:
            table = tables.tables[name]
            connection.execute(table.insert().values(_filled(table, backend, given)))
    return ids


@pytest.fixture
def previous(backend: str, tmp_path: Path) -> Iterator[tuple[Settings, sa.Engine]]:
    """A new database at the previous version's head."""
    if backend == "sqlite":
        settings = Settings(data_dir=tmp_path, database_url=None, log_level="WARNING")
        migrations.upgrade(settings, PREVIOUS)
        engine = sa.create_engine(f"sqlite:///{tmp_path / 'headwater.db'}")
        yield settings, engine
        engine.dispose()
        return
    with fresh_pg_database("hw_tenant_data") as (_name, url):
        settings = Settings(data_dir=tmp_path, database_url=url, log_level="WARNING")
        migrations.upgrade(settings, PREVIOUS)
        engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
        yield settings, engine
        engine.dispose()


def test_the_migration_carries_the_previous_versions_rows(
    backend: str, previous: tuple[Settings, sa.Engine]
) -> None:
    settings, engine = previous
    ids = _old_data(engine, backend)
    before = _counts(engine)
    migrations.upgrade(settings)
    after = _counts(engine)
    # every row kept, but the message id of an inbox that is gone (no company to key it)
    assert after == before | {"inbox_message_ids": before["inbox_message_ids"] - 1}
    company = _uuid(backend, ids["company"])
    with engine.connect() as connection:
        for name in sorted(KEYS_ADDED):
            found = connection.execute(sa.text(f"SELECT company_id FROM {name}")).scalars()
            assert set(found) == {company}, name
        if backend == "sqlite":
            assert connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall() == []


def test_a_key_of_another_company_is_refused(
    backend: str, previous: tuple[Settings, sa.Engine]
) -> None:
    """A file upload names its transaction with the company: a row that names another
    company's transaction breaks its foreign key."""
    settings, engine = previous
    ids = _old_data(engine, backend)
    migrations.upgrade(settings)
    tables = sa.MetaData()
    tables.reflect(engine)
    uploads = tables.tables["file_uploads"]
    other = _uuid(backend, uuid.uuid4())
    given = {"id": _uuid(backend, uuid.uuid4()), "company_id": other}
    given["transaction_id"] = _uuid(backend, ids["transaction"])
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as connection:
        if backend == "sqlite":
            connection.exec_driver_sql("PRAGMA foreign_keys=ON")
        connection.execute(uploads.insert().values(_filled(uploads, backend, given)))


KEYS_ADDED = (
    "file_jobs",
    "webhook_deliveries",
    "webhook_attempts",
    "inbox_message_ids",
    "record_staging",
    "dataset_record_counts",
    "record_feed_heads",
)


def _counts(engine: sa.Engine) -> dict[str, int]:
    with engine.connect() as connection:
        return {
            name: connection.execute(sa.text(f"SELECT count(*) FROM {name}")).scalar_one()
            for name in sorted(TRAFFIC | PER_COMPANY)
            if sa.inspect(connection).has_table(name)
        }
