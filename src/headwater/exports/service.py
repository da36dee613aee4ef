"""Export use cases: ask for one, read it (with a fresh presigned download), and the
worker's side: claim, run, finish (with its event), and delete files past their time."""

from __future__ import annotations

import hmac
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog
from sqlalchemy import Connection, select, update
from sqlalchemy.orm import Session

from headwater import jobs, wakeups
from headwater.db import Database
from headwater.events import outbox
from headwater.exports import metrics
from headwater.exports.errors import DownloadRefused, ExportExpired, ExportNotFound
from headwater.exports.models import Export
from headwater.exports.schemas import ExportCreate, ExportQuery, ExportRead
from headwater.files.stores import EmbeddedStore, Store
from headwater.identity.tokens import Principal
from headwater.ingestion import api as ingestion
from headwater.kit.clock import utcnow, utcnow_ms
from headwater.kit.pagination import paginate

log = structlog.get_logger("headwater.exports")

QUEUED, RUNNING, COMPLETED, FAILED = "queued", "running", "completed", "failed"
ERASED = "erased"  # it held a record an erasure removed: its file is gone


@dataclass(frozen=True, slots=True)
class JobSettings:
    retention: timedelta
    stale: timedelta
    max_attempts: int
    row_group_rows: int


class Interrupted(Exception):
    """The process is stopping: the export is handed back, to run again."""


# --- the API's side ---------------------------------------------------------------------------


def create(session: Session, caller: Principal, body: ExportCreate, *, store: Store) -> Export:
    """Queue an export of the caller's dataset (403/404 as reads of the dataset)."""
    dataset = ingestion.dataset_for(session, caller, body.client_id, body.dataset_id)
    export_id = uuid.uuid4()
    export = Export(
        id=export_id,
        company_id=dataset.company_id,
        dataset_pk=dataset.id,
        client_id=dataset.client_id,
        dataset_id=dataset.dataset_id,
        format=body.format,
        status=QUEUED,
        ingested_after=body.ingested_after,
        ingested_before=body.ingested_before,
        csv_formulas=body.csv_formulas,
        bucket=store.bucket,
        object_key=store.export_key(
            company_id=dataset.company_id, export_id=export_id, suffix=body.format
        ),
        attempts=0,
        author_id=caller.actor.author_id,
        created_at=utcnow_ms(),
    )
    session.add(export)
    session.flush()
    wakeups.mark(session.connection(), "exports")
    return export


def get(session: Session, caller: Principal, export_id: uuid.UUID) -> Export:
    """The caller's export: 404 for another company's (or client's), 410 once deleted."""
    export: Export | None = session.scalars(
        ingestion.visible_to(caller, Export).where(Export.id == export_id)
    ).one_or_none()
    if export is None:
        raise ExportNotFound(f"No export {export_id}.")
    if export.deleted_at is not None:
        raise ExportExpired(
            f"Export {export_id}'s file was deleted at the end of its lifetime "
            "(HEADWATER_EXPORT_RETENTION_HOURS); ask for a new export."
        )
    return export


def list_exports(
    session: Session, caller: Principal, query: ExportQuery
) -> tuple[Sequence[Export], int]:
    """The caller's company's exports (its clients' only, when its token names some),
    newest first; those whose file was deleted at the end of its lifetime are left out."""
    statement = ingestion.visible_where(
        session,
        caller,
        Export,
        client_id=query.client_id,
        dataset_id=query.dataset_id,
        status=query.status,
    )
    statement = statement.where(Export.deleted_at.is_(None))
    return paginate(session, statement, Export.created_at.desc(), Export.id, params=query)


def filename(export: Export) -> str:
    return f"{export.dataset_id}-{export.id.hex[:8]}.{export.format}"


def view(
    export: Export | Any, *, store: Store | None = None, url_lifetime: timedelta = timedelta()
) -> ExportRead:
    """The export as the API answers it; with a download URL signed now when `store` is
    given and the file is there."""
    url = expires = None
    if store is not None and export.status == COMPLETED and export.available_until is not None:
        expires = min(utcnow() + url_lifetime, export.available_until).replace(microsecond=0)
        url = store.download_url(
            key=export.object_key, filename=filename(export), expires_at=expires
        )
    return ExportRead(
        export_id=export.id,
        client_id=export.client_id,
        dataset_id=export.dataset_id,
        format=export.format,
        status=export.status,
        ingested_after=export.ingested_after,
        ingested_before=export.ingested_before,
        csv_formulas=export.csv_formulas,
        record_count=export.record_count,
        file_size=export.file_size,
        download_url=url,
        expires_at=expires,
        available_until=export.available_until,
        error=export.error,
        created_at=export.created_at,
        started_at=export.started_at,
        completed_at=export.completed_at,
    )


DOWNLOAD_QUERY = ("expires", "filename", "signature")


def check_download(
    store: EmbeddedStore,
    *,
    key: str,
    expires: str | None,
    filename: str | None,
    signature: str | None,
    unsigned: tuple[str, ...] = (),
) -> None:
    """An embedded store's signed GET: 403 unless the signature covers this key, expiry
    and file name (and every query parameter: `unsigned` lists those it does not), and
    the expiry has not passed."""
    if unsigned:
        raise DownloadRefused(
            f"The URL's signature does not cover the parameter {unsigned[0]!r}; "
            "use the download_url exactly as it was given."
        )
    if not (expires and filename and signature and expires.isdigit()):
        raise DownloadRefused("The URL lacks its expires, filename or signature parameter.")
    expected = store.download_signature(key=key, expires=int(expires), filename=filename)
    if not hmac.compare_digest(expected, signature):
        raise DownloadRefused("The URL's signature does not match.")
    if int(expires) < utcnow().timestamp():
        raise DownloadRefused("The download URL has expired; read the export for a new one.")


# --- the worker's side ------------------------------------------------------------------------


QUEUE = jobs.Queue(
    model=Export,
    state=Export.status,
    queued=QUEUED,
    running=RUNNING,
    wakeup="exports",
)


def claim_next(
    db: Database, *, worker: str, bucket: str, settings: JobSettings
) -> uuid.UUID | None:
    """Take the oldest export of this store (`bucket`, "" for the embedded one) that is
    queued, or running under a claim gone stale (its worker died); None when there is
    none. One past its attempts fails instead."""

    def exhausted(connection: Connection, row: Any, now: datetime) -> None:
        _fail(connection, row.id, f"the export failed {row.attempts} times", now=now)

    row = jobs.claim(
        db,
        QUEUE,
        worker=worker,
        stale=settings.stale,
        max_attempts=settings.max_attempts,
        exhausted=exhausted,
        where=lambda _now: [Export.bucket == bucket],
        values={"started_at": lambda now: now},
    )
    return None if row is None else uuid.UUID(str(row.id))


def event(connection: Any, export_id: uuid.UUID, type: outbox.EventType) -> str:
    """The export's event, its data the export as read (without a download URL: a
    presigned URL must not outlive its purpose in an event log)."""
    row = connection.execute(select(Export.__table__).where(Export.id == export_id)).one()
    data = view(row).model_dump(mode="json")
    outbox.write(connection, [outbox.event(type, company_id=row.company_id, data=data)])
    return str(row.format)


def _fail(connection: Any, export_id: uuid.UUID, error: str, *, now: datetime) -> None:
    connection.execute(
        update(Export)
        .where(Export.id == export_id)
        .values(status=FAILED, error=error[:500], completed_at=now, claimed_by=None)
    )
    format = event(connection, export_id, "export.failed")
    metrics.EXPORTS.labels(format, "failed").inc()
    log.error("export failed for good", export=str(export_id), error=error)


def release(db: Database, export_id: uuid.UUID, *, worker: str, handed_back: bool = False) -> None:
    """After a failed attempt: queue the export again at once (its attempts are counted).
    `handed_back`: the process is stopping, and this attempt does not count."""
    jobs.release(db, QUEUE, export_id, worker=worker, handed_back=handed_back)


def purge(db: Database, store: Store, *, batch: int = 100) -> int:
    """Delete the files of exports past `available_until`, and mark them deleted."""
    now = utcnow()
    with db.read_connection() as connection:
        due = connection.execute(
            select(Export.id, Export.object_key)
            .where(
                Export.available_until < now,
                Export.deleted_at.is_(None),
                Export.bucket == store.bucket,
            )
            .limit(batch)
        ).all()
    for row in due:
        store.delete(row.object_key)
        with db.begin() as connection:
            connection.execute(update(Export).where(Export.id == row.id).values(deleted_at=now))
    return len(due)


def known_exports(session: Session, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Which of these ids are exports' (an export's file)."""
    return set(session.scalars(select(Export.id).where(Export.id.in_(list(ids)))))


# --- erasures (contract section 17) ---------------------------------------------------------


def holding(connection: Connection, removed: Sequence[tuple[uuid.UUID, datetime]]) -> list[Any]:
    """The exports (id, object_key, bucket) that hold, or are being written with, a
    record of these (dataset, ingested_at): completed or running, their bounds around
    it, not completed before it."""
    times: dict[uuid.UUID, list[datetime]] = {}
    for dataset_pk, ingested_at in removed:
        times.setdefault(dataset_pk, []).append(ingested_at)
    found = []
    for dataset_pk, moments in times.items():
        rows = connection.execute(
            select(
                Export.id,
                Export.object_key,
                Export.bucket,
                Export.ingested_after,
                Export.ingested_before,
                Export.completed_at,
            ).where(Export.dataset_pk == dataset_pk, Export.status.in_([COMPLETED, RUNNING]))
        ).all()
        found += [
            row
            for row in rows
            if any(
                (row.ingested_after is None or row.ingested_after <= moment)
                and (row.ingested_before is None or moment < row.ingested_before)
                and (row.completed_at is None or moment <= row.completed_at)
                for moment in moments
            )
        ]
    return found


def mark_erased(connection: Connection, export_ids: Sequence[uuid.UUID]) -> int:
    """The exports (completed or running) held erased records: `erased`, with no
    download; how many changed (their files are the caller's to delete, first)."""
    if not export_ids:
        return 0
    result = connection.execute(
        update(Export)
        .where(Export.id.in_(list(export_ids)), Export.status.in_([COMPLETED, RUNNING]))
        .values(status=ERASED, available_until=None, claimed_by=None)
    )
    return int(result.rowcount)
