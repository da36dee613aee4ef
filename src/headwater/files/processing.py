"""The durable file-processing queue: claim a job, process its file once, or fail it.

A job is claimed in a short transaction (attempts + 1, `running`). Its file is then
processed in short database transactions (contract section 10): its records are staged
a batch at a time, hidden (`ingestion.stage_rows`), and shown together with the
transaction's final status and event in one last transaction. Each step renews the
claim first (`claimed_at`, the job's lease). A worker killed mid-file leaves hidden
records and a claim that goes stale once `file_job_stale_seconds` pass without a step;
another worker then takes the job over, removes what the dead one staged, and runs the
file again from its first row: the result is as if it ran once. On PostgreSQL, `FOR
UPDATE SKIP LOCKED` lets several workers share the queue without ever holding one job
together; SQLite has one writer at a time, so its workers take turns.
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
from sqlalchemy import Connection, insert, select, update
from sqlalchemy.orm import aliased

from headwater import jobs
from headwater.db import Database, delete_in_batches
from headwater.files import parsers
from headwater.files.models import DONE, QUEUED, RUNNING, FileJob, FileUpload, QuarantinedRow
from headwater.files.stores import Store
from headwater.ingestion import api as ingestion
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
    hold: float | None = None  # a staging transaction's time open; None: HOLD_SECONDS


class Tally:
    """Counts of one file's rows, and its errors (`ingestion.Errors`: all counted, the
    first listed with their record and line)."""

    def __init__(self) -> None:
        self.received = 0
        self.accepted = 0  # valid and kept by the steps: handed to be stored
        self.filtered = 0
        self.duplicates = 0  # of an earlier record in the same batch
        self.suppressed = 0  # of a subject an erasure suppressed
        self.claimed = 0  # of a stored record, found as the batch was stored (its writer's)
        self.errors = ingestion.Errors()

    def invalid(self, record: int, line: int, errors: Sequence[dict[str, Any]]) -> None:
        self.errors.add(record, errors, line=line)

    def kept(self, kept: ingestion.Kept) -> ingestion.Kept:
        """Count what the steps kept of a batch."""
        self.accepted += len(kept.records)
        self.filtered += kept.filtered
        self.duplicates += kept.duplicates
        self.suppressed += kept.suppressed
        return kept

    @property
    def stored(self) -> int:
        return self.accepted - self.claimed

    def columns(self) -> dict[str, Any]:
        return {
            "records_received": self.received,
            "records_accepted": self.stored,
            "records_filtered": self.filtered,
            "records_duplicates": self.duplicates + self.claimed,
            "records_suppressed": self.suppressed,
            "records_rejected": self.errors.records,
            "error_count": self.errors.count,
            "errors": self.errors.listed,
        }


# --- claiming ---------------------------------------------------------------------------------


def _company_busy(bucket: str, fresh_since: Any) -> Any:
    """True for a job whose company has a file of this store being processed (claimed,
    not stale): one file per company at a time, so one company's files never take every
    worker while another company's file waits (contract section 15).

    The busy companies are read once a claim (`NOT IN` a set of the running jobs, which
    PostgreSQL hashes), not once a queued file: asked for each file in turn (`NOT
    EXISTS`), a claim among 2,000 queued files of one company took 12.7 s on a table
    without statistics (3.6 million index probes). The running jobs are found through
    the store's (bucket, state) index."""
    running = aliased(FileJob)
    return FileJob.company_id.in_(
        select(running.company_id).where(
            running.bucket == bucket,
            running.state == RUNNING,
            running.claimed_at >= fresh_since,
        )
    )


QUEUE = jobs.Queue(
    model=FileJob,
    state=FileJob.state,
    queued=QUEUED,
    running=RUNNING,
    wakeup="files",
)


def claim_next(
    db: Database, *, worker: str, bucket: str, settings: JobSettings
) -> uuid.UUID | None:
    """Take the oldest job of this store (`bucket`, "" for the embedded one) that is
    queued, or running under a claim gone stale (its worker died), of a company with no
    other file being processed; None when there is none. A job past its attempts fails
    instead."""

    def exhausted(connection: Connection, row: Any, _now: Any) -> None:
        _fail(connection, row.id, row.transaction_id, f"processing failed {row.attempts} times")
        log.error("file job failed for good", job=str(row.id), attempts=row.attempts)

    row = jobs.claim(
        db,
        QUEUE,
        worker=worker,
        stale=settings.stale,
        max_attempts=settings.max_attempts,
        exhausted=exhausted,
        where=lambda now: [
            FileJob.bucket == bucket,
            ~_company_busy(bucket, now - settings.stale),
        ],
        columns=[FileUpload.transaction_id],
        join=(FileUpload, FileUpload.id == FileJob.file_id),
        claimed=lambda connection, row, now: ingestion.started(
            connection, row.transaction_id, at=now
        ),
    )
    return None if row is None else uuid.UUID(str(row.id))


def release(db: Database, job_id: uuid.UUID, *, worker: str, handed_back: bool = False) -> None:
    """After a failed attempt: queue the job again at once (its attempts are counted).
    `handed_back`: the process is stopping, and this attempt does not count."""
    jobs.release(db, QUEUE, job_id, worker=worker, handed_back=handed_back)


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

# How often a file's progress (`records_processed`) and its claim's heartbeat are written.
PROGRESS_SECONDS = 2.0


class Interrupted(Exception):
    """The process is stopping: the job's open database transaction rolls back and the
    job is handed back (`release(..., handed_back=True)`), to run again here or
    elsewhere, from its first row."""


class Lost(Exception):
    """Another worker took the job over (this one's claim went stale): stop, store
    nothing more."""


def _own(connection: Connection, job_id: uuid.UUID, worker: str) -> bool:
    """Whether the job is still this worker's, its claim renewed (`jobs.renew`)."""
    return jobs.renew(connection, QUEUE, job_id, worker=worker)


def _watched(
    items: Iterator[parsers.Row | parsers.Table],
    *,
    stop: threading.Event | None,
    tick: Callable[[int], None],
) -> Iterator[parsers.Row | parsers.Table]:
    """`items`; every 1,000 rows or so, raise `Interrupted` if the process is stopping,
    and every `PROGRESS_SECONDS` tell `tick` how many rows were read."""
    count = 0
    check = 0
    last = time.monotonic()
    for item in items:
        if count >= check:
            if stop is not None and stop.is_set():
                raise Interrupted()
            if count and time.monotonic() - last >= PROGRESS_SECONDS:
                last = time.monotonic()
                tick(count)
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
    `Interrupted` (nothing shown) once `stop` is set.

    Every step is a short database transaction (contract section 10): the records are
    staged a batch at a time, hidden (`ingestion.stage_rows`), and the last batch stored
    and all shown with the transaction's final status in the last one (a file of one
    batch takes that one only). Each step first renews the claim (`_own`); a crash
    between steps leaves the records hidden, and the next run removes them before it
    starts."""
    with db.begin() as connection:
        _relaxed(connection)
        if not _own(connection, job_id, worker):
            return False
        upload = connection.execute(
            select(
                FileUpload.transaction_id,
                FileUpload.object_key,
                FileUpload.content_type,
                FileUpload.size,
            )
            .join(FileJob, FileJob.file_id == FileUpload.id)
            .where(FileJob.id == job_id)
        ).one()
        target = ingestion.file_target(connection, upload.transaction_id)
        earlier = ingestion.stage_begun(connection, target)
    if earlier:  # a run before this one died: what it stored goes first
        _discard(db, target.transaction_id)
    try:
        stream = store.open(upload.object_key)
    except FileNotFoundError:
        with db.begin() as connection:
            if not _own(connection, job_id, worker):
                return False
            ingestion.stage_end(connection, target.transaction_id)
            _missing(connection, job_id, target.transaction_id)
        return True
    tally = Tally()
    stager = _Stager(db, target, lambda c: _own(c, job_id, worker), tally, hold=settings.hold)
    file = _File(stager, target, tally, batch_rows=settings.batch_rows)
    try:
        with stream:
            rows = parsers.rows(
                stream,
                upload.content_type,
                max_depth=settings.max_depth,
                compressed_size=upload.size or 0,
                max_expanded=settings.max_expanded,
            )
            outcome = file.process(_watched(rows, stop=stop, tick=file.tick))
        if outcome != ingestion.Status.COMPLETED:
            _discard(db, target.transaction_id)
        stager.end(
            (file.last, file.held, None),
            lambda connection: _end(connection, job_id, target, file.tally, outcome),
        )
    except Lost:
        log.warning("file job taken over by another worker", job=str(job_id))
        return False
    log.info(
        "file processed",
        transaction_id=str(target.transaction_id),
        status=outcome,
        received=file.tally.received,
        accepted=file.tally.stored,
        rejected=file.tally.errors.records,
    )
    return True


def _end(
    connection: Connection,
    job_id: uuid.UUID,
    target: ingestion.FileTarget,
    tally: Tally,
    outcome: ingestion.Status,
) -> None:
    """The file's transaction ends `outcome`, its records shown if it completed, and its
    job is done."""
    now = utcnow_ms()
    if outcome == ingestion.Status.COMPLETED:
        ingestion.publish(connection, target, tally.stored)
    else:
        ingestion.stage_end(connection, target.transaction_id)
    ingestion.finish(
        connection,
        target.transaction_id,
        outcome,
        schema_version=target.version,
        completed_at=now,
        records_processed=tally.received,
        **tally.columns(),
    )
    _finish(connection, job_id, now=now)


def _discard(db: Database, transaction_id: uuid.UUID) -> None:
    """Remove what a file's runs stored and did not show: its staged records and its
    quarantined rows, in short database transactions."""
    ingestion.discard(db, transaction_id)
    delete_in_batches(
        db,
        QuarantinedRow.transaction_id,
        transaction_id,
        order=QuarantinedRow.seq,
        batch=DISCARD_ROWS,
    )


DISCARD_ROWS = 5000
MISSING = "the stored file is missing (the store lost it): send the file again"


def _missing(connection: Connection, job_id: uuid.UUID, transaction_id: uuid.UUID) -> None:
    """The job's stored bytes are gone: its transaction fails at once with a `file` error
    instead of being tried again for ever (nothing else can bring them back)."""
    _fail(connection, job_id, transaction_id, MISSING)
    log.error("file job failed: stored file missing", transaction_id=str(transaction_id))


def _relaxed(connection: Connection) -> None:
    """A step before the publishing one need not reach the disk at its commit: the
    publishing transaction's commit flushes PostgreSQL's log up to it, and a crash before
    that reruns the file from its first row. Waiting for each flush cost the file 10-15%
    (bench.file_ingest, 2M rows), and small files more (bench.email)."""
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql("SET LOCAL synchronous_commit = off")


# A batch for the writer thread: records the steps kept (or None), quarantined rows, and
# the rows read so far (a progress tick, or None).
Batch = tuple[ingestion.Kept | None, list[dict[str, Any]], int | None]


class _Stager:
    """A file's batches written to the database, on the writer thread, in short database
    transactions: each renews the job's claim first (`own`; `Lost` if it is gone), and
    commits once it has been open `hold` seconds (`HOLD_SECONDS` unless the settings say).
    SQLite has one writer: there every batch commits, and before the next one begins,
    writers waiting for the lock go first (`Database.give_way`). The file's last batch
    and its end share one transaction (`end`): the one still open, if any."""

    def __init__(
        self,
        db: Database,
        target: ingestion.FileTarget,
        own: Callable[[Connection], bool],
        tally: Tally,
        *,
        hold: float | None = None,
    ) -> None:
        self.db = db
        self.tally = tally
        self.target = target
        self.own = own
        if db.engine.dialect.name == "sqlite":
            self.hold = 0.0
        else:
            self.hold = HOLD_SECONDS if hold is None else hold
        self._connection: Connection | None = None
        self._began = 0.0
        self._marked = False

    def write(self, batch: Batch) -> None:
        """Stage a batch, hidden, committed before the file ends."""
        connection = self._open()
        if not self._marked and (batch[0] is not None or batch[1]):
            ingestion.stage_begin(connection, self.target)
            self._marked = True
        self._store(connection, batch)
        if time.monotonic() - self._began >= self.hold:
            self.commit()

    def end(self, batch: Batch, then: Callable[[Connection], None]) -> None:
        """Store the file's last batch and run `then` (which ends the file) in one
        database transaction, committed durably: a batch in it is never hidden."""
        connection = self._open()
        try:
            self._store(connection, batch)
            if connection.dialect.name == "postgresql":  # `_relaxed` no more
                connection.exec_driver_sql("SET LOCAL synchronous_commit = on")
            then(connection)
        except BaseException:
            self.close(commit=False)
            raise
        self.close(commit=True)

    def _store(self, connection: Connection, batch: Batch) -> None:
        kept, held, processed = batch
        if kept is not None and kept.records:
            self.tally.claimed += ingestion.stage_rows(connection, self.target, kept)
        if held:
            connection.execute(insert(QuarantinedRow), held)
        if processed is not None:
            ingestion.progress(connection, self.target.transaction_id, processed)

    def _open(self) -> Connection:
        if self._connection is None:
            connection = self.db.engine.connect()
            connection.begin()
            _relaxed(connection)
            self._connection = connection
            self._began = time.monotonic()
            if not self.own(connection):
                self.close(commit=False)
                raise Lost()
        return self._connection

    def commit(self) -> None:
        if self._connection is not None:
            self.close(commit=True)
            self.db.give_way()

    def close(self, *, commit: bool) -> None:
        """End the open database transaction, if any: committed, or rolled back."""
        connection, self._connection = self._connection, None
        if connection is None:
            return
        try:
            if commit:
                connection.commit()
            else:
                connection.rollback()
        finally:
            connection.close()


# A staging transaction is committed once open this long (PostgreSQL; contract section
# 10 allows 10 s): few commits, and each short.
HOLD_SECONDS = 1.0


class _File:
    """One file's rows checked, and handed in batches to a writer thread that stages
    them (`_Stager`)."""

    def __init__(
        self, stager: _Stager, target: ingestion.FileTarget, tally: Tally, *, batch_rows: int
    ) -> None:
        self.stager = stager
        self.target = target
        self.batch_rows = batch_rows
        self.tally = tally
        # the file's state while its rows are read (`_rows`)
        self.records: list[dict[str, Any]] = []  # valid, not yet handed to the writer
        self.last: ingestion.Kept | None = None  # the last batch, after the steps
        self.held: list[dict[str, Any]] = []  # quarantined, not yet handed to the writer
        self.rejecting = False  # a row was refused and the dataset does not quarantine
        self.writer: _Writer | None = None

    def process(self, rows: Any) -> ingestion.Status:
        """Stage every valid row (in batches) and handle the invalid ones by the dataset's
        policy; answers the transaction's status. The last batch (`records`, `held`) is
        left to the caller, to store as it ends the file; a rejected file has none, and
        its staged rows are the caller's to discard.

        Batches are written by a second thread while this one parses the next: the
        database's work and the parsing overlap (the driver releases the GIL while it
        waits for the server).
        """
        stager = self.stager
        writer = self.writer = _Writer(stager.write)
        try:
            outcome = self._rows(rows, writer)
            writer.close()
        except parsers.FileUnreadable as exc:
            writer.close(discard=True)
            self.tally.errors.first(file_error(self.tally.received, exc.line, exc.message))
            outcome = ingestion.Status.REJECTED
        except BaseException:
            writer.close(discard=True)
            stager.close(commit=False)
            raise
        if outcome == ingestion.Status.REJECTED:
            stager.close(commit=False)
            self.tally.accepted = self.tally.claimed = 0
            self.tally.filtered = self.tally.duplicates = self.tally.suppressed = 0
            self.records, self.held, self.last = [], [], None
        return outcome

    def tick(self, rows: int) -> None:
        """`rows` are read: the writer writes the progress (and renews the claim)."""
        if self.writer is not None:
            self.writer.put((None, [], rows))

    def _rows(self, items: Any, writer: _Writer) -> ingestion.Status:
        """Each row through the core's record check (a `Table`'s together: normalised a
        column at a time and validated in one call), the valid ones batched to `writer`,
        the invalid ones counted and (by the dataset's policy) held or the file
        rejected."""
        check = self.target.check
        tally = self.tally
        self.records, self.held, self.rejecting = [], [], False
        for item in items:
            first = tally.received
            if type(item) is parsers.Table:
                tally.received += len(item.rows)
                cleaned, failed = ingestion.check_table(check, item.header, item.rows)
                if not failed:
                    self._keep(cleaned, writer)
                    continue
                failures = dict(failed)
                header = item.header
                for offset, (line, fields, record) in enumerate(
                    zip(item.lines, item.rows, cleaned, strict=True)
                ):
                    if offset not in failures:
                        self._keep([record], writer)
                        continue
                    data = dict(zip(header, fields, strict=True))
                    self._refuse(first + offset, line, data, None, failures[offset], writer)
                continue
            tally.received += 1
            data = item.data
            if data is None:
                errors = [{"path": "", "keyword": item.keyword, "message": item.message}]
                self._refuse(first, item.line, None, item.raw, errors, writer)
                continue
            record, errors = ingestion.check_one(check, data, nul=item.nul)
            if errors:
                # a record holding U+0000 is held as its text (escaped), never as JSON
                self._refuse(first, item.line, None if item.nul else data, item.raw, errors, writer)
            elif not self.rejecting:
                self.records.append(record)
                if len(self.records) >= self.batch_rows:
                    self._flush(writer)
        if self.rejecting:
            return ingestion.Status.REJECTED
        # the last batch: the caller's (`process`)
        self.last = tally.kept(ingestion.transform(check, self.records))
        self.records = []
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
        """Hand the valid records read so far to the writer, after the steps."""
        writer.put(
            (self.tally.kept(ingestion.transform(self.target.check, self.records)), [], None)
        )
        self.records = []

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
            writer.put((None, self.held, None))
            self.held = []


class _Writer:
    """One thread that runs `write` on each batch put to it, in order; at most two batches
    wait, so memory stays bounded. The first error stops it and is raised to the producer
    at its next put, or at close."""

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
