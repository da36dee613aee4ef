"""The `dedupe` step's claims (contract section 16): a record is stored only if its
digest (`transforms.Steps.run`) is claimed by its write, in the database transaction
that stores it.

A claim is one primary-key probe a record: `INSERT ... ON CONFLICT DO UPDATE ... WHERE
the claim there is older than the window RETURNING digest`. A digest that comes back is
new (or its last record is out of the window), and the record is stored; one that does
not is a duplicate. Two transactions claiming one digest at once: on PostgreSQL the
second waits for the first's row and finds it when the first commits (or takes it if
the first rolls back); SQLite has one writer. Claims are made in digest order, so two
writes never wait on each other's rows in opposite order.

A file's claims are made as its batches are staged, and released with its records if
the file is discarded (`release`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from sqlalchemy import Connection, delete, select

from headwater.db import Database, delete_in_batches, dialect_insert
from headwater.ingestion.models import DedupeKey
from headwater.ingestion.sinks import RecordBatch

# rows a statement: within SQLite's and PostgreSQL's bound parameters
CHUNK = 1000


def claim(
    connection: Connection, batches: Sequence[RecordBatch]
) -> tuple[list[RecordBatch], dict[uuid.UUID, int]]:
    """The batches with their duplicates left out, and how many each transaction lost.
    Batches without digests pass as they are; of two batches of one dataset holding one
    digest, the first keeps it."""
    seen: set[tuple[uuid.UUID, bytes]] = set()
    out: list[RecordBatch] = []
    duplicates: dict[uuid.UUID, int] = {}
    for batch in batches:
        if batch.digests is None or batch.window is None:
            out.append(batch)
            continue
        fresh = [
            digest
            for digest in batch.digests
            if digest is not None and (batch.dataset_pk, digest) not in seen
        ]
        claimed = _claim(connection, batch, fresh, batch.window, batch.ingested_at)
        records = []
        for record, digest in zip(batch.records, batch.digests, strict=True):
            if digest is None:
                records.append(record)
            elif digest in claimed and (batch.dataset_pk, digest) not in seen:
                seen.add((batch.dataset_pk, digest))
                records.append(record)
        lost = len(batch.records) - len(records)
        duplicates[batch.transaction_id] = duplicates.get(batch.transaction_id, 0) + lost
        out.append(replace(batch, records=records, digests=None, texts=None) if lost else batch)
    return out, duplicates


def _claim(
    connection: Connection,
    batch: RecordBatch,
    digests: list[bytes],
    window: timedelta,
    at: datetime,
) -> set[bytes]:
    """The digests this write claims (new, or last seen before the window)."""
    claimed: set[bytes] = set()
    ordered = sorted(set(digests))
    insert = dialect_insert(connection.dialect)
    for start in range(0, len(ordered), CHUNK):
        rows = [
            {
                "company_id": batch.company_id,
                "dataset_pk": batch.dataset_pk,
                "digest": digest,
                "seen_at": at,
                "transaction_id": batch.transaction_id,
            }
            for digest in ordered[start : start + CHUNK]
        ]
        statement = insert(DedupeKey).values(rows)
        statement = statement.on_conflict_do_update(
            index_elements=["company_id", "dataset_pk", "digest"],
            set_={
                "seen_at": statement.excluded.seen_at,
                "transaction_id": statement.excluded.transaction_id,
            },
            where=DedupeKey.seen_at < at - window,
        ).returning(DedupeKey.digest)
        claimed.update(connection.scalars(statement))
    return claimed


def release(db: Database, transaction_id: uuid.UUID) -> int:
    """Forget a discarded transaction's claims (its records were never shown), in short
    database transactions; how many."""
    return delete_in_batches(
        db, DedupeKey.transaction_id, transaction_id, order=DedupeKey.digest, batch=CHUNK * 5
    )


# The longest window a dedupe step may have: a claim older than this is of no use.
LONGEST_WINDOW = timedelta(hours=720)


def purge(db: Database, *, now: datetime, batch: int = CHUNK * 5) -> int:
    """Forget claims older than the longest window, `batch` a short database
    transaction (a range of `seen_at`, through its index); how many went."""
    removed = 0
    cutoff = now - LONGEST_WINDOW
    while True:
        with db.begin() as connection:
            last = connection.scalar(
                select(DedupeKey.seen_at)
                .where(DedupeKey.seen_at < cutoff)
                .order_by(DedupeKey.seen_at)
                .offset(batch - 1)
                .limit(1)
            )
            bound = DedupeKey.seen_at < cutoff if last is None else DedupeKey.seen_at <= last
            removed += int(connection.execute(delete(DedupeKey).where(bound)).rowcount)
        if last is None:
            return removed
