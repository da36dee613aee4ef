"""Storing records in bulk: COPY on PostgreSQL, one multi-row executemany elsewhere."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import insert
from sqlalchemy.orm import Session

from headwater.ingestion.models import Record

_COLUMNS = (
    "record_id",
    "company_id",
    "dataset_pk",
    "transaction_id",
    "schema_version",
    "ingested_at",
    "data",
)
_COPY = f"COPY records ({', '.join(_COLUMNS)}) FROM STDIN"


def insert_records(
    session: Session,
    records: Sequence[dict[str, Any]],
    *,
    company_id: uuid.UUID,
    dataset_pk: uuid.UUID,
    transaction_id: uuid.UUID,
    schema_version: int,
    ingested_at: datetime,
) -> None:
    """Add `records` to the session's transaction; never one INSERT per record."""
    if not records:
        return
    if session.get_bind().dialect.name == "postgresql":
        connection = session.connection().connection.driver_connection
        assert connection is not None
        with connection.cursor() as cursor, cursor.copy(_COPY) as copy:
            for data in records:
                copy.write_row(
                    (
                        uuid.uuid4(),
                        company_id,
                        dataset_pk,
                        transaction_id,
                        schema_version,
                        ingested_at,
                        orjson.dumps(data).decode(),
                    )
                )
        return
    session.execute(
        insert(Record),
        [
            {
                "record_id": uuid.uuid4(),
                "company_id": company_id,
                "dataset_pk": dataset_pk,
                "transaction_id": transaction_id,
                "schema_version": schema_version,
                "ingested_at": ingested_at,
                "data": data,
            }
            for data in records
        ],
    )
