"""The durable file-processing queue: claim a job, process its file once, or fail it.

A job is claimed in a short transaction (attempts + 1, `running`), then processed in one
long database transaction that first locks the job's row: every record, quarantined row
and the transaction's outcome commit together, or nothing does. A worker killed
mid-file loses its connection, its transaction rolls back and its lock goes; the job is
taken over once `file_job_stale_seconds` have passed since its claim, and runs again
from the start: the result is as if it ran once. On PostgreSQL, `FOR UPDATE SKIP
LOCKED` lets several workers share the queue without ever holding one job together;
SQLite has one writer at a time, so its workers take turns.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import structlog
from sqlalchemy import Connection, and_, insert, or_, select, update
from sqlalchemy.orm import aliased

from headwater.db import Database
from headwater.files import parsers
from headwater.files.models import DONE, QUEUED, RUNNING, FileJob, FileUpload, QuarantinedRow
from headwater.files.stores import Store
from headwater.ingestion import api as ingestion
from headwater.ingestion import validation
from headwater.kit.clock import utcnow_ms

log = structlog.get_logger("headwater.files")

MAX_ROW_ERRORS = 20  # errors kept with one quarantined row


@dataclass(frozen=True, slots=True)
class JobSettings:
    batch_rows: int
    stale: timedelta
    max_attempts: int
    max_depth: int
    max_expanded: int


class Tally:
    """Counts of one file's rows, and the first errors with their record and line."""

    def __init__(self) -> None:
        self.received = 0
        self.accepted = 0
        self.rejected = 0
        self.error_count = 0
        self.errors: list[dict[str, Any]] = []

    def invalid(self, record: int, line: int, errors: Sequence[dict[str, Any]]) -> None:
        self.rejected += 1
        self.error_count += len(errors)
        room = validation.MAX_LISTED_ERRORS - len(self.errors)
        for error in errors[: max(room, 0)]:
            self.errors.append({"record": record, "line": line, **error})

    def columns(self) -> dict[str, Any]:
        return {
            "records_received": self.received,
            "records_accepted": self.accepted,
            "records_rejected": self.rejected,
            "error_count": self.error_count,
            "errors": self.errors,
        }


# --- claiming ---------------------------------------------------------------------------------


def _company_busy(fresh_since: Any) -> Any:
    """True for a job whose company has a file being processed (claimed, not stale):
    one file per company at a time, so one company's files never take every worker
    while another company's file waits (contract section 15)."""
    running, upload = aliased(FileJob), aliased(FileUpload)
    return (
        select(running.id)
        .join(upload, upload.id == running.file_id)
        .where(
            running.state == RUNNING,
            running.claimed_at >= fresh_since,
            upload.company_id == FileUpload.company_id,
        )
        .exists()
    )


def claim_next(
    db: Database, *, worker: str, bucket: str, settings: JobSettings
) -> uuid.UUID | None:
    """Take the oldest job of this store (`bucket`, "" for the embedded one) that is
    queued, or running under a claim gone stale (its worker died); None when there is
    none. A job past its attempts fails instead."""
    while True:
        now = utcnow_ms()
        with db.begin() as connection:
            row = connection.execute(
                select(FileJob.id, FileJob.attempts, FileUpload.transaction_id)
                .join(FileUpload, FileUpload.id == FileJob.file_id)
                .where(
                    FileJob.bucket == bucket,
                    or_(
                        FileJob.state == QUEUED,
                        and_(FileJob.state == RUNNING, FileJob.claimed_at < now - settings.stale),
                    ),
                    ~_company_busy(now - settings.stale),
                )
                .order_by(FileJob.created_at)
                .limit(1)
                .with_for_update(skip_locked=True, of=FileJob)
            ).one_or_none()
            if row is None:
                return None
            if row.attempts >= settings.max_attempts:
                _fail(
                    connection,
                    row.id,
                    row.transaction_id,
                    f"processing failed {row.attempts} times",
                )
                log.error("file job failed for good", job=str(row.id), attempts=row.attempts)
                continue
            connection.execute(
                update(FileJob)
                .where(FileJob.id == row.id)
                .values(state=RUNNING, claimed_by=worker, claimed_at=now, attempts=row.attempts + 1)
            )
            ingestion.started(connection, row.transaction_id, at=now)
            return uuid.UUID(str(row.id))


def release(db: Database, job_id: uuid.UUID, *, worker: str, handed_back: bool = False) -> None:
    """After a failed attempt: queue the job again at once (its attempts are counted).
    `handed_back`: the process is stopping, and this attempt does not count."""
    values: dict[str, Any] = {"state": QUEUED, "claimed_by": None}
    if handed_back:
        values["attempts"] = FileJob.attempts - 1
    with db.begin() as connection:
        connection.execute(
            update(FileJob)
            .where(FileJob.id == job_id, FileJob.claimed_by == worker, FileJob.state == RUNNING)
            .values(**values)
        )


def _finish(connection: Connection, job_id: Any, *, now: Any) -> None:
    connection.execute(
        update(FileJob).where(FileJob.id == job_id).values(state=DONE, finished_at=now)
    )


def _fail(connection: Connection, job_id: Any, transaction_id: Any, message: str) -> None:
    """The job is done and its transaction `failed`, with one `file` error saying why."""
    now = utcnow_ms()
    _finish(connection, job_id, now=now)
    ingestion.finish(
        connection,
        transaction_id,
        ingestion.Status.FAILED,
        completed_at=now,
        error_count=1,
        errors=[file_error(0, 0, message)],
    )


def file_error(record: int, line: int, message: str) -> dict[str, Any]:
    """An error about the whole file (keyword `file`), in the shape of a record error."""
    return {"record": record, "line": line, "path": "", "keyword": "file", "message": message}


# --- processing -------------------------------------------------------------------------------


class _Progress:
    """Writes how many rows a file has read so far (`records_processed`) every
    `EVERY_SECONDS`, in a short autocommit statement of its own, so that it is visible
    while the file's own transaction runs. PostgreSQL only: SQLite has one writer, which
    the file's transaction holds."""

    EVERY_SECONDS = 2.0

    def __init__(self, db: Database, transaction_id: uuid.UUID) -> None:
        self.db = db
        self.transaction_id = transaction_id
        self.enabled = db.engine.dialect.name == "postgresql"
        self.last = time.monotonic()

    def reached(self, count: int) -> None:
        """`count` rows are read: written if the last write is old enough."""
        if self.enabled and time.monotonic() - self.last >= self.EVERY_SECONDS:
            self.write(count)

    def write(self, count: int) -> None:
        self.last = time.monotonic()
        try:
            with self.db.atomic() as connection:
                ingestion.progress(connection, self.transaction_id, count)
        except Exception as exc:  # progress is a courtesy: never a reason to fail the file
            log.warning("progress not written", error=str(exc).splitlines()[0])


class Interrupted(Exception):
    """The process is stopping: the job's transaction rolls back and the job is handed
    back (`release(..., handed_back=True)`), to run again here or elsewhere."""


def _watched(
    items: Iterator[parsers.Row | parsers.Table],
    *,
    stop: threading.Event | None,
    progress: _Progress,
) -> Iterator[parsers.Row | parsers.Table]:
    """`items`; every 1,000 rows or so, raise `Interrupted` if the process is stopping,
    and let `progress` write how far the file has got."""
    count = 0
    check = 0
    for item in items:
        if count >= check:
            if stop is not None and stop.is_set():
                raise Interrupted()
            if count:
                progress.reached(count)
            check = count + 1000
        count += len(item.rows) if type(item) is parsers.Table else 1
        yield item


def run_job(
    db: Database,
    store: Store,
    job_id: uuid.UUID,
    *,
    worker: str,
    settings: JobSettings,
    stop: threading.Event | None = None,
) -> bool:
    """Process a claimed job's file; False if another worker holds it now. Raises
    `Interrupted` (nothing stored) once `stop` is set."""
    with db.begin() as connection:
        # Wait for the row rather than skip it: another worker's claim_next may hold its
        # lock for a moment (PostgreSQL keeps the lock of a row it re-checked and passed
        # over), and skipping would leave this claimed job untouched until it went stale.
        # A worker that took the job over holds it while it works, and then it is no
        # longer ours: nothing is done twice.
        job = connection.execute(
            select(FileJob.file_id)
            .where(FileJob.id == job_id, FileJob.claimed_by == worker, FileJob.state == RUNNING)
            .with_for_update()
        ).one_or_none()
        if job is None:
            return False
        upload = connection.execute(
            select(
                FileUpload.transaction_id,
                FileUpload.object_key,
                FileUpload.content_type,
                FileUpload.size,
            ).where(FileUpload.id == job.file_id)
        ).one()
        target = ingestion.file_target(connection, upload.transaction_id)
        file = _File(connection, target, batch_rows=settings.batch_rows)
        try:
            stream = store.open(upload.object_key)
        except FileNotFoundError:
            _missing(connection, job_id, target.transaction_id)
            return True
        with stream:
            rows = parsers.rows(
                stream,
                upload.content_type,
                max_depth=settings.max_depth,
                compressed_size=upload.size or 0,
                max_expanded=settings.max_expanded,
            )
            progress = _Progress(db, target.transaction_id)
            outcome = file.process(_watched(rows, stop=stop, progress=progress))
        now = utcnow_ms()
        ingestion.finish(
            connection,
            target.transaction_id,
            outcome,
            schema_version=target.version,
            completed_at=now,
            records_processed=file.tally.received,
            **file.tally.columns(),
        )
        _finish(connection, job_id, now=now)
    log.info(
        "file processed",
        transaction_id=str(target.transaction_id),
        status=outcome,
        received=file.tally.received,
        accepted=file.tally.accepted,
        rejected=file.tally.rejected,
    )
    return True


MISSING = "the stored file is missing (the store lost it): send the file again"


def _missing(connection: Connection, job_id: uuid.UUID, transaction_id: uuid.UUID) -> None:
    """The job's stored bytes are gone: its transaction fails at once with a `file` error
    instead of being tried again for ever (nothing else can bring them back)."""
    _fail(connection, job_id, transaction_id, MISSING)
    log.error("file job failed: stored file missing", transaction_id=str(transaction_id))


class _File:
    """One file's rows on their way into the database, inside the caller's transaction."""

    def __init__(
        self, connection: Connection, target: ingestion.FileTarget, *, batch_rows: int
    ) -> None:
        self.connection = connection
        self.target = target
        self.batch_rows = batch_rows
        self.tally = Tally()
        # the file's state while its rows are read (`_rows`)
        self.records: list[dict[str, Any]] = []  # valid, not yet handed to the writer
        self.held: list[dict[str, Any]] = []  # quarantined, not yet handed to the writer
        self.rejecting = False  # a row was refused and the dataset does not quarantine

    def process(self, rows: Any) -> ingestion.Status:
        """Store every valid row (in batches) and handle the invalid ones by the dataset's
        policy; answers the transaction's status. Nothing is stored for a rejected file.

        Batches are written by a second thread while this one parses the next: the
        database's work and the parsing overlap (the driver releases the GIL while it
        waits for the server).
        """
        savepoint = self.connection.begin_nested()
        writer = _Writer(self._write)
        try:
            outcome = self._rows(rows, writer)
        except parsers.FileUnreadable as exc:
            writer.close(discard=True)
            savepoint.rollback()
            tally = self.tally
            tally.accepted = 0
            tally.error_count += 1
            tally.errors.insert(0, file_error(tally.received, exc.line, exc.message))
            del tally.errors[validation.MAX_LISTED_ERRORS :]
            return ingestion.Status.REJECTED
        except BaseException:
            writer.close(discard=True)
            raise
        writer.close()
        if outcome == ingestion.Status.REJECTED:
            savepoint.rollback()
            self.tally.accepted = 0
        else:
            savepoint.commit()
        return outcome

    def _rows(self, items: Any, writer: _Writer) -> ingestion.Status:
        """Each row checked (a `Table`'s together: normalised a column at a time and
        validated in one call), the valid ones batched to `writer`, the invalid ones
        counted and (by the dataset's policy) held or the file rejected."""
        check = self.target.check
        table, normalise, batch = check.normaliser.table, check.normaliser, check.batch
        is_valid = check.validator.is_valid
        tally = self.tally
        self.records, self.held, self.rejecting = [], [], False
        for item in items:
            first = tally.received
            if type(item) is parsers.Table:
                tally.received += len(item.rows)
                cleaned = table(item.header, item.rows)
                if batch is not None and batch.is_valid(cleaned):
                    self._keep(cleaned, writer)
                    continue
                header = item.header
                for offset, (line, fields, record) in enumerate(
                    zip(item.lines, item.rows, cleaned, strict=True)
                ):
                    if is_valid(record):
                        self._keep([record], writer)
                    else:
                        data = dict(zip(header, fields, strict=True))
                        self._invalid(first + offset, line, data, None, record, writer)
                continue
            tally.received += 1
            data = item.data
            if data is None:
                errors = [{"path": "", "keyword": item.keyword, "message": item.message}]
                self._refuse(first, item.line, None, item.raw, errors, writer)
                continue
            record = normalise(data)
            if not is_valid(record):
                self._invalid(first, item.line, data, item.raw, record, writer)
            elif not self.rejecting:
                self.records.append(record)
                if len(self.records) >= self.batch_rows:
                    self._flush(writer)
        if self.rejecting:
            return ingestion.Status.REJECTED
        tally.accepted += len(self.records)
        writer.put((self.records, self.held))
        return ingestion.Status.COMPLETED

    def _keep(self, records: list[dict[str, Any]], writer: _Writer) -> None:
        """Valid records, stored in batches of `batch_rows` or more (none once the file
        is being rejected)."""
        if self.rejecting:
            return
        self.records.extend(records)
        if len(self.records) >= self.batch_rows:
            self._flush(writer)

    def _flush(self, writer: _Writer) -> None:
        """Hand the valid records read so far to the writer."""
        self.tally.accepted += len(self.records)
        writer.put((self.records, []))
        self.records = []

    def _invalid(
        self,
        index: int,
        line: int,
        data: dict[str, Any],
        raw: str | None,
        record: dict[str, Any],
        writer: _Writer,
    ) -> None:
        """A record its schema refuses (`record`, normalised from `data`)."""
        errors = list(validation.errors_of(self.target.check.validator, record))
        self._refuse(index, line, data, raw, errors, writer)

    def _refuse(
        self,
        index: int,
        line: int,
        data: dict[str, Any] | None,
        raw: str | None,
        errors: list[dict[str, Any]],
        writer: _Writer,
    ) -> None:
        """A row that is not stored: counted, and held in quarantine or the file
        rejected, by the dataset's policy."""
        self.tally.invalid(index, line, errors)
        target = self.target
        if not target.quarantine:
            self.rejecting = True
            self.records = []
            return
        self.held.append(
            {
                "company_id": target.company_id,
                "dataset_pk": target.dataset_pk,
                "transaction_id": target.transaction_id,
                "line": line,
                "record": index,
                "data": data,
                "raw": raw,
                "errors": errors[:MAX_ROW_ERRORS],
            }
        )
        if len(self.held) >= self.batch_rows:
            writer.put(([], self.held))
            self.held = []

    def _write(self, batch: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> None:
        records, held = batch
        if records:
            ingestion.store_rows(self.connection, self.target, records)
        if held:
            self.connection.execute(insert(QuarantinedRow), held)


class _Writer:
    """One thread that runs `write` on each batch put to it, in order; at most two
    batches wait, so memory stays bounded. The first error stops it and is raised to
    the producer at its next put, or at close."""

    def __init__(self, write: Callable[[Any], None]) -> None:
        self._write = write
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=2)
        self._error: BaseException | None = None
        self._discard = False
        self._thread = threading.Thread(target=self._run, name="file-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (item := self._queue.get()) is not _DONE:
            if self._error is None and not self._discard:
                try:
                    self._write(item)
                except BaseException as exc:
                    self._error = exc

    def put(self, item: Any) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put(item)

    def close(self, *, discard: bool = False) -> None:
        """Wait for every batch to be written (or, with `discard`, skip those left)."""
        self._discard = discard
        self._queue.put(_DONE)
        self._thread.join()
        if self._error is not None and not discard:
            raise self._error


_DONE = object()
