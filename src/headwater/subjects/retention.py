"""Retention (contract section 17), run by the scheduler once a period across every
worker: a dataset's `retention_days` removes its records ingested longer ago (as an
erasure does: tombstones in the record feed), with the quarantined rows and raw files
of its file transactions of that age; `HEADWATER_RAW_FILE_RETENTION_DAYS` removes any
file transaction's raw file that long after it ended (`file_erased`). Each batch is a
short database transaction of its own (contract section 10's rule), so retention never
holds the database long; a worker that stops half-way leaves the rest to the next run.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from headwater.db import Database
from headwater.files import quarantine
from headwater.files import service as files
from headwater.files.stores import Store, delete_own
from headwater.ingestion import api as ingestion

BATCH = 5000
FILE_BATCH = 100


@dataclass(slots=True)
class Removed:
    records: int = 0
    quarantined_rows: int = 0
    files: int = 0


def run(db: Database, store: Store, *, now: datetime, raw_file_days: int) -> Removed:
    """One pass: every dataset's retention, then raw files past their days."""
    removed = Removed()
    with db.read_connection() as connection:
        retained = ingestion.retained_datasets(connection)
    for dataset_pk, days in retained:
        before = now - timedelta(days=days)
        while True:
            with db.begin() as connection:
                batch = ingestion.remove_older(connection, dataset_pk, before, limit=BATCH)
            removed.records += batch.count
            if batch.count < BATCH:
                break
        _files(db, store, before, removed, dataset_pk=dataset_pk)
    _files(db, store, now - timedelta(days=raw_file_days), removed)
    return removed


def _files(
    db: Database,
    store: Store,
    before: datetime,
    removed: Removed,
    *,
    dataset_pk: uuid.UUID | None = None,
) -> None:
    """Raw files of file transactions ended before `before` (a dataset's: with their
    quarantined rows), a batch a short transaction, the bytes removed first."""
    while True:
        with db.read_connection() as connection:
            due = ingestion.files_ended_before(
                connection, before, dataset_pk=dataset_pk, limit=FILE_BATCH
            )
            stored = files.stored_files(connection, due)
        if not due:
            return
        for _, bucket, key in stored:
            delete_own(store, bucket, key)
        with db.begin() as connection:
            if dataset_pk is not None:
                removed.quarantined_rows += quarantine.remove_of(connection, due)
            ingestion.mark_file_erased(connection, due)
        removed.files += len(stored)
