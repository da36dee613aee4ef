"""Removing stored records (contract section 17): an erasure's (records of its subjects)
and retention's (records ingested too long ago), in batches that each are one short
database transaction of the caller's, and what the rest of ingestion shows of them.

A batch removes at most `limit` records of one dataset, subtracts them from the
dataset's counts, and writes each as a tombstone at one new position of the dataset's
record feed (its head row locked last, for the shortest time), so a follower reads
`{"record_id", "erased": true}` once, after the record itself if it read that. It moves
the dataset's `subjects_version`: a feed page read ahead before it is not served after
it. Records of a file still staging are not visible, and are left alone.

Suppressions (subjects whose later records are not stored) are ingestion's too: the
record check reads them (`compiling.Compiled.subjects`), keyed by `subjects_version`.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, insert, select, update

from headwater.db import locked_head
from headwater.ingestion import sinks, staging
from headwater.ingestion.models import (
    Dataset,
    FeedHead,
    Record,
    RecordCount,
    RecordTombstone,
    Suppression,
    Transaction,
)
from headwater.kit.clock import utcnow_ms

BATCH = 5000
# Digests one removal probes. A planner without statistics on `records` (this project's
# test server runs without autovacuum; any server just after a bulk load) takes a
# dataset for a two-hundredth of the table: given a few digests it probes them in
# `ix_records_subject`, given thousands it read the dataset's whole range of its
# `ingested_at` index instead (1.4 s for 2,000 digests in a million records).
PROBES = 16


@dataclass(slots=True)
class Removed:
    """What a batch removed: how many records, and of which transactions (each with its
    records' `ingested_at`)."""

    count: int = 0
    transactions: dict[uuid.UUID, datetime] = field(default_factory=dict)


def remove_subjects(
    connection: Connection,
    dataset_pk: uuid.UUID,
    digests: Sequence[bytes],
    *,
    limit: int = BATCH,
) -> Removed:
    """Remove up to `limit` visible records of the dataset whose subject is one of
    `digests` (an index probe each: `ix_records_subject`; at most `PROBES` of them)."""
    return _remove(connection, dataset_pk, Record.subject.in_(list(digests)), limit)


def remove_older(
    connection: Connection, dataset_pk: uuid.UUID, before: datetime, *, limit: int = BATCH
) -> Removed:
    """Remove up to `limit` visible records of the dataset ingested before `before` (a
    range of `ix_records_dataset_pk_ingested_at_seq`)."""
    return _remove(connection, dataset_pk, Record.ingested_at < before, limit)


def _remove(connection: Connection, dataset_pk: uuid.UUID, where: Any, limit: int) -> Removed:
    """Remove up to `limit` visible records of the dataset `where` picks. Each is deleted
    by its whole key, its company's id beside its `seq`: by `seq` alone, a PostgreSQL
    without statistics on `records` took `seq` for a column of repeats and read the
    whole table to join the picked ones to it (0.5 s a batch in a million records,
    against 2 ms)."""
    picked = (
        select(Record.seq)
        .where(Record.dataset_pk == dataset_pk, where, staging.visible(dataset_pk))
        .order_by(Record.seq)
        .limit(limit)
        .scalar_subquery()
    )
    company = select(Dataset.company_id).where(Dataset.id == dataset_pk).scalar_subquery()
    rows = list(
        connection.execute(
            delete(Record)
            .where(Record.company_id == company, Record.seq.in_(picked))
            .returning(
                Record.seq,
                Record.record_id,
                Record.company_id,
                Record.transaction_id,
                Record.ingested_at,
            )
        )
    )
    removed = Removed()
    if not rows:
        return removed
    rows.sort(key=lambda row: row.seq)
    removed.count = len(rows)
    shards: Counter[int] = Counter()
    for row in rows:
        removed.transactions.setdefault(row.transaction_id, row.ingested_at)
        shards[row.transaction_id.int % RecordCount.SHARDS] += 1
    for shard, count in sorted(shards.items()):
        sinks.subtract_count(connection, rows[0].company_id, dataset_pk, shard, count)
    connection.execute(
        update(Dataset)
        .where(Dataset.id == dataset_pk)
        .values(subjects_version=Dataset.subjects_version + 1)
    )
    # the feed position last: its head row is locked until the commit
    pos = (
        locked_head(connection, FeedHead.dataset_pk, dataset_pk, company_id=rows[0].company_id) + 1
    )
    connection.execute(
        insert(RecordTombstone),
        [
            {
                "company_id": row.company_id,
                "dataset_pk": dataset_pk,
                "pos": pos,
                "seq": row.seq,
                "record_id": row.record_id,
            }
            for row in rows
        ],
    )
    connection.execute(update(FeedHead).where(FeedHead.dataset_pk == dataset_pk).values(pos=pos))
    return removed


def mark_file_erased(connection: Connection, transaction_ids: Sequence[uuid.UUID]) -> None:
    """The transactions' raw files were removed (`file_erased`)."""
    if transaction_ids:
        connection.execute(
            update(Transaction)
            .where(Transaction.id.in_(list(transaction_ids)))
            .values(file_erased=True)
        )


# --- suppressions ---------------------------------------------------------------------------


def _touch(connection: Connection, company_id: uuid.UUID, client_id: Any, dataset_id: Any) -> None:
    """Move `subjects_version` of the datasets in a suppression's scope: their compiled
    checks read the suppressions again."""
    statement = update(Dataset).where(Dataset.company_id == company_id)
    if client_id is not None:
        statement = statement.where(Dataset.client_id == client_id)
    if dataset_id is not None:
        statement = statement.where(Dataset.dataset_id == dataset_id)
    connection.execute(statement.values(subjects_version=Dataset.subjects_version + 1))


def suppress(
    connection: Connection,
    *,
    company_id: uuid.UUID,
    erasure_id: uuid.UUID,
    client_id: str | None,
    dataset_id: str | None,
    subjects: Sequence[Sequence[bytes]],
) -> None:
    """One suppression a subject (its digests), in the erasure's scope."""
    now = utcnow_ms()
    connection.execute(
        insert(Suppression),
        [
            {
                "company_id": company_id,
                "id": uuid.uuid4(),
                "client_id": client_id,
                "dataset_id": dataset_id,
                "digests": [digest.hex() for digest in digests],
                "erasure_id": erasure_id,
                "created_at": now,
            }
            for digests in subjects
        ],
    )
    _touch(connection, company_id, client_id, dataset_id)


def lift(connection: Connection, company_id: uuid.UUID, suppression_id: uuid.UUID) -> bool:
    """Remove a suppression of the company; False if it has none of that id."""
    row = connection.execute(
        delete(Suppression)
        .where(Suppression.company_id == company_id, Suppression.id == suppression_id)
        .returning(Suppression.client_id, Suppression.dataset_id)
    ).one_or_none()
    if row is None:
        return False
    _touch(connection, company_id, row.client_id, row.dataset_id)
    return True
