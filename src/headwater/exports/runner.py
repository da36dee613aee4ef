"""Running a claimed export: its columns from the dataset's schema versions, its rows
read from the database and written to the store, then its completion with its event.
The worker imports this module (and with it pyarrow); the API never does."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import structlog
from sqlalchemy import select, update

from headwater import jobs
from headwater.db import Database
from headwater.exports import columns, metrics, reading, writing
from headwater.exports.models import Export
from headwater.exports.service import (
    COMPLETED,
    ERASED,
    QUEUE,
    RUNNING,
    Interrupted,
    JobSettings,
    event,
)
from headwater.files.stores import Store
from headwater.ingestion import datasets
from headwater.kit.clock import utcnow_ms

log = structlog.get_logger("headwater.exports")


def _schemas(db: Database, dataset_pk: uuid.UUID) -> list[dict[str, Any]]:
    """The dataset's schema versions, newest first."""
    with db.read_connection() as connection:
        return datasets.schema_history(connection, dataset_pk)


def _renewing(
    batches: Iterator[Any], renew: Callable[[], None], every: float, stop: threading.Event | None
) -> Iterator[Any]:
    """The batches, renewing the claim every `every` seconds; Interrupted once `stop`."""
    renewed = time.monotonic()
    for batch in batches:
        if stop is not None and stop.is_set():
            raise Interrupted
        if time.monotonic() - renewed > every:
            renew()
            renewed = time.monotonic()
        yield batch


def run(
    db: Database,
    store: Store,
    export_id: uuid.UUID,
    *,
    worker: str,
    settings: JobSettings,
    stop: threading.Event | None = None,
) -> None:
    """Write a claimed export's file and complete it, with its event, in one database
    transaction (only while this worker still holds the claim)."""
    with db.read_session() as session:
        export = session.scalars(select(Export).where(Export.id == export_id)).one()
        session.expunge(export)
    props = columns.columns(_schemas(db, export.dataset_pk))
    selection = reading.Selection(export.dataset_pk, export.ingested_after, export.ingested_before)

    def renew() -> None:
        with db.begin() as connection:
            jobs.renew(connection, QUEUE, export_id, worker=worker)

    started = time.monotonic()
    out = store.incoming_file(export.object_key)
    try:
        # a read that may lag: the records the replica holds, if one is set
        with db.replica_connection() as connection:
            batches = reading.batches(
                connection, selection, None if export.format == "ndjson" else props
            )
            # closed here, on a failure too: the reading ends while its connection is open
            with contextlib.closing(batches):
                count = writing.write(
                    _renewing(batches, renew, settings.stale.total_seconds() / 3, stop),
                    format=export.format,  # type: ignore[arg-type]
                    props=props,
                    writer=out,
                    row_group_rows=settings.row_group_rows,
                    escape_formulas=export.csv_formulas != "as_sent",
                )
        out.commit()
    except BaseException:
        out.discard()
        raise
    now = utcnow_ms()
    with db.begin() as connection:
        done = connection.execute(
            update(Export)
            .where(Export.id == export_id, Export.claimed_by == worker, Export.status == RUNNING)
            .values(
                status=COMPLETED,
                record_count=count,
                file_size=out.size,
                completed_at=now,
                available_until=now + settings.retention,
                claimed_by=None,
            )
        ).rowcount
        if done:
            event(connection, export_id, "export.completed")
        erased = not done and connection.scalar(select(Export.status).where(Export.id == export_id))
    if erased == ERASED:  # an erasure removed records it may hold, while it ran
        store.delete(export.object_key)
        return
    seconds = time.monotonic() - started
    metrics.SECONDS.labels(export.format).observe(seconds)
    metrics.BYTES.labels(export.format).observe(out.size)
    metrics.RECORDS.labels(export.format).inc(count)
    metrics.EXPORTS.labels(export.format, "completed").inc()
    log.info(
        "export completed",
        export=str(export_id),
        records=count,
        bytes=out.size,
        seconds=round(seconds, 3),
    )
