"""A file's records on their way in: stored in short database transactions while the
file is read, hidden until the file's transaction completes, then shown all at once.

Contract section 10: a file's records become visible together when its transaction
completes, yet no database transaction of a file lasts long (SQLite's one writer stays
free for other writes; PostgreSQL's vacuum is never held back). So:

- `begin` marks the transaction staged (a `record_staging` row), with its first batch;
- `stage` stores a batch, in a short database transaction of the caller's; every read of
  records leaves out those of a staged transaction (`visible`, a probe of a table that
  holds only the files being processed);
- `publish`, in the database transaction that completes the file (and may store its last
  batch: a file of one batch is never marked), removes the mark and counts the records:
  they appear at once, with the `completed` status;
- `discard` removes a staged transaction's records in short transactions of its own: a
  file that is rejected, or run again after its worker died, starts from nothing.

A crash at any step leaves the records hidden (the mark commits with the first batch)
until the file is run again or its transaction ends without them (`sweep`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, delete, select

from headwater.db import Database, delete_in_batches, dialect_insert
from headwater.ingestion import dedupe, lifecycle, sinks
from headwater.ingestion.models import Record, StagedTransaction, Transaction
from headwater.kit.clock import utcnow_ms

# Records removed by one short transaction of `discard`.
DISCARD_BATCH = 5000


def begin(connection: Connection, target: sinks.Staged) -> None:
    """Mark the transaction staged, in the database transaction that stores its first
    batch (nothing is stored under a transaction unless it is marked)."""
    connection.execute(
        dialect_insert(connection.dialect)(StagedTransaction)
        .values(
            transaction_id=target.transaction_id,
            company_id=target.company_id,
            dataset_pk=target.dataset_pk,
            created_at=utcnow_ms(),
        )
        .on_conflict_do_nothing(index_elements=["transaction_id", "company_id"])
    )


def begun(connection: Connection, transaction_id: uuid.UUID) -> bool:
    """Whether the transaction is marked staged: a run before this one stored batches
    (and died, or lost its job), to be discarded before this run stores its own."""
    marked = connection.scalar(
        select(StagedTransaction.transaction_id).where(
            StagedTransaction.transaction_id == transaction_id
        )
    )
    return marked is not None


def stage(connection: Connection, batch: sinks.RecordBatch) -> int:
    """Store a batch of a staged transaction's checked records, hidden and not counted,
    after its dedupe claims; how many were duplicates (not stored)."""
    batches, lost = dedupe.claim(connection, [batch], staged=True)
    sinks.for_dialect(connection.dialect.name).add(connection, batches, counted=False)
    return lost.get(batch.transaction_id, 0)


def publish(connection: Connection, target: sinks.Staged, records: int) -> None:
    """Show a staged transaction's `records` records, counted, when the caller's database
    transaction (the one that completes it) commits."""
    end(connection, target.transaction_id)
    sinks.add_count(connection, target, records)


def end(connection: Connection, transaction_id: uuid.UUID) -> None:
    """The transaction is no longer staged (its records shown, or none left)."""
    connection.execute(
        delete(StagedTransaction).where(StagedTransaction.transaction_id == transaction_id)
    )


def discard(db: Database, transaction_id: uuid.UUID) -> int:
    """Remove every record stored under the transaction, `DISCARD_BATCH` a short
    database transaction, and its dedupe claims; how many records. For a staged
    transaction only: its records were never shown."""
    removed = delete_in_batches(
        db, Record.transaction_id, transaction_id, order=Record.seq, batch=DISCARD_BATCH
    )
    dedupe.release(db, transaction_id)
    return removed


def visible(dataset_pk: Any) -> Any:
    """The condition a record of the dataset is visible on (its transaction not staged)."""
    return Record.transaction_id.not_in(
        select(StagedTransaction.transaction_id).where(StagedTransaction.dataset_pk == dataset_pk)
    )


# The same, as SQL text for psycopg itself: the records' alias `r`, the dataset a parameter.
VISIBLE_SQL = (
    "r.transaction_id NOT IN (SELECT transaction_id FROM record_staging WHERE dataset_pk = %s)"
)


def sweep(db: Database, *, limit: int = 100) -> int:
    """Remove the staged records of transactions that ended without them (a file whose
    job failed for good, or whose worker died between its rejection and `discard`'s
    end); how many transactions."""
    with db.read_connection() as connection:
        ended: Sequence[Any] = connection.scalars(
            select(StagedTransaction.transaction_id)
            .join(Transaction, Transaction.id == StagedTransaction.transaction_id)
            .where(Transaction.status.in_([str(s) for s in lifecycle.FINAL]))
            .limit(limit)
        ).all()
    for transaction_id in ended:
        discard(db, transaction_id)
        with db.begin() as connection:
            end(connection, transaction_id)
    return len(ended)
