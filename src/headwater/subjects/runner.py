"""Running a claimed erasure (contract section 17): in the order of danger, each step in
short database transactions that first renew the claim (a worker that lost it stops),
each finding what is left, so a worker that dies anywhere leaves work the next one
finishes, nothing erased twice and nothing missed:

1. records, a batch of each covered dataset at a time (`ingestion.erasure`: their
   tombstones in the record feed); the transactions they belonged to are noted
   (`ErasureItem`) in the same database transaction;
2. quarantined rows in which a subject is a whole value, the same way;
3. the raw files of the transactions noted: removed from the store, then marked
   (`file_erased`) with the item done;
4. exports that may hold a removed record: their files removed, then `erased`;
5. completed, with its `erasure.completed` event and its `erasure` activity entry,
   counts only.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import structlog
from sqlalchemy import Connection, select, update

from headwater import jobs
from headwater.db import Database, dialect_insert
from headwater.events import outbox
from headwater.exports import service as exports
from headwater.files import quarantine
from headwater.files import service as files
from headwater.files.stores import Store, delete_own
from headwater.ingestion import api as ingestion
from headwater.kit.actor import Actor
from headwater.kit.clock import utcnow_ms
from headwater.subjects.models import COMPLETED, Erasure, ErasureItem
from headwater.subjects.service import QUEUE, summary

log = structlog.get_logger("headwater.subjects")

RECORD_BATCH = 5000
FILE_BATCH = 100
MAX_REST = 2.0  # seconds: the longest rest between two steps
RENEW_SECONDS = 10.0  # a scan that finds nothing renews its claim this often


class Interrupted(Exception):
    """The process is stopping: the erasure is handed back, to go on elsewhere."""


class Lost(Exception):
    """Another worker took the erasure over (this one's claim went stale)."""


class _Run:
    def __init__(
        self,
        db: Database,
        store: Store,
        erasure: Any,
        worker: str,
        stop: threading.Event | None,
        duty: float,
    ) -> None:
        self.db = db
        self.store = store
        self.erasure = erasure
        self.worker = worker
        self.stop = stop
        self.duty = duty
        self.resumed = self.renewed = time.monotonic()
        self.id: uuid.UUID = erasure.id
        self.company_id: uuid.UUID = erasure.company_id
        self.digests = [bytes.fromhex(digest) for digest in erasure.digests]

    def pace(self) -> None:
        """Rest between steps so that the erasure works at most `duty` of the time (as
        PostgreSQL's vacuum_cost_delay paces a vacuum): pushes and files of every
        company keep their speed while it runs, and it still ends within seconds."""
        worked = time.monotonic() - self.resumed
        if self.duty < 1.0 and worked > 0:
            time.sleep(min(worked * (1 - self.duty) / self.duty, MAX_REST))
        self.resumed = time.monotonic()

    @contextmanager
    def step(self) -> Iterator[Connection]:
        """A step's database transaction, begun after the rest that paces the erasure
        (`pace`), never during it: SQLite's write transaction holds the one write lock
        from its start, and every other writer would wait out the rest. The claim is
        renewed first (`own`)."""
        self.pace()
        with self.db.begin() as connection:
            self.own(connection)
            yield connection

    def own(self, connection: Connection) -> None:
        """Renew the claim (raising Lost if it is gone) and stop if asked to."""
        if not jobs.renew(connection, QUEUE, self.id, worker=self.worker):
            raise Lost
        self.renewed = time.monotonic()
        if self.stop is not None and self.stop.is_set():
            raise Interrupted

    def add(self, connection: Connection, **counts: int) -> None:
        connection.execute(
            update(Erasure)
            .where(Erasure.id == self.id)
            .values({getattr(Erasure, k): getattr(Erasure, k) + v for k, v in counts.items()})
        )

    def note(
        self,
        connection: Connection,
        dataset_pk: uuid.UUID,
        transactions: dict[uuid.UUID, datetime | None],
    ) -> None:
        """The transactions records or rows were removed of: their raw files and the
        exports holding their records go next."""
        if not transactions:
            return
        statement = dialect_insert(connection.dialect)(ErasureItem)
        rows = [
            {
                "company_id": self.company_id,
                "erasure_id": self.id,
                "transaction_id": transaction_id,
                "dataset_pk": dataset_pk,
                "ingested_at": ingested_at,
                "file_done": False,
            }
            for transaction_id, ingested_at in transactions.items()
        ]
        # a transaction noted for its rows first and for its records later keeps the time
        connection.execute(
            statement.on_conflict_do_update(
                index_elements=["company_id", "erasure_id", "transaction_id"],
                set_={"ingested_at": statement.excluded.ingested_at},
                where=ErasureItem.ingested_at.is_(None),
            ),
            rows,
        )

    def datasets(self) -> list[ingestion.SubjectDataset]:
        erasure = self.erasure
        clients = [erasure.client_id] if erasure.client_id is not None else erasure.client_ids
        with self.db.read_connection() as connection:
            return ingestion.subject_datasets(
                connection, self.company_id, client_ids=clients, dataset_id=erasure.dataset_id
            )

    # --- the steps ----------------------------------------------------------------------

    def records(self, dataset: ingestion.SubjectDataset) -> None:
        """Remove the subjects' records, up to `RECORD_BATCH` a transaction, probing
        `SUBJECT_PROBES` digests a statement."""
        step = ingestion.SUBJECT_PROBES
        left = [self.digests[i : i + step] for i in range(0, len(self.digests), step)]
        while left:
            with self.step() as connection:
                count = 0
                transactions: dict[uuid.UUID, datetime | None] = {}
                while left and count < RECORD_BATCH:
                    limit = RECORD_BATCH - count
                    removed = ingestion.remove_subjects(
                        connection, dataset.dataset_pk, left[0], limit=limit
                    )
                    count += removed.count
                    for transaction_id, at in removed.transactions.items():
                        transactions.setdefault(transaction_id, at)
                    if removed.count < limit:  # none left of these digests
                        left.pop(0)
                if count:
                    self.note(connection, dataset.dataset_pk, transactions)
                    self.add(connection, records=count)

    def rows(self, dataset: ingestion.SubjectDataset) -> None:
        with self.db.read_connection() as connection:
            matches = ingestion.subject_matcher(connection, self.company_id, self.digests)
        after: int | None = 0
        while after is not None:
            self.pace()
            with self.db.read_connection() as connection:
                hit, after = quarantine.matching_rows(
                    connection, dataset.dataset_pk, matches, after=after
                )
            if not hit and time.monotonic() - self.renewed < RENEW_SECONDS:
                continue
            with self.step() as connection:
                seqs = [seq for seq, _ in hit]
                removed = quarantine.remove_rows(connection, self.company_id, seqs)
                if removed:
                    self.note(connection, dataset.dataset_pk, dict.fromkeys(t for _, t in hit))
                    self.add(connection, quarantined_rows=removed)

    def files(self) -> None:
        while True:
            with self.db.read_connection() as connection:
                todo = list(
                    connection.scalars(
                        select(ErasureItem.transaction_id)
                        .where(
                            ErasureItem.company_id == self.company_id,
                            ErasureItem.erasure_id == self.id,
                            ErasureItem.file_done.is_(False),
                        )
                        .limit(FILE_BATCH)
                    )
                )
                stored = files.stored_files(connection, todo)
            if not todo:
                return
            for _, bucket, key in stored:
                delete_own(self.store, bucket, key)
            with self.step() as connection:
                ingestion.mark_file_erased(connection, [t for t, _, _ in stored])
                connection.execute(
                    update(ErasureItem)
                    .where(
                        ErasureItem.company_id == self.company_id,
                        ErasureItem.erasure_id == self.id,
                        ErasureItem.transaction_id.in_(todo),
                    )
                    .values(file_done=True)
                )
                self.add(connection, files=len(stored))

    def exports(self) -> None:
        with self.db.read_connection() as connection:
            removed: Sequence[Any] = connection.execute(
                select(ErasureItem.dataset_pk, ErasureItem.ingested_at).where(
                    ErasureItem.company_id == self.company_id,
                    ErasureItem.erasure_id == self.id,
                    ErasureItem.ingested_at.is_not(None),
                )
            ).all()
            holding = exports.holding(connection, [(r.dataset_pk, r.ingested_at) for r in removed])
        for row in holding:
            delete_own(self.store, row.bucket, row.object_key)
        with self.step() as connection:
            self.add(connection, exports=exports.mark_erased(connection, [r.id for r in holding]))

    def complete(self) -> None:
        from headwater.activity import service as activity

        self.pace()
        with self.db.unit_of_work() as session:
            connection = session.connection()
            self.own(connection)
            now = utcnow_ms()
            connection.execute(
                update(Erasure)
                .where(Erasure.id == self.id)
                .values(status=COMPLETED, completed_at=now, claimed_by=None, error=None)
            )
            row = connection.execute(select(Erasure.__table__).where(Erasure.id == self.id)).one()
            data = summary(row)
            outbox.write(
                connection,
                [outbox.event("erasure.completed", company_id=self.company_id, data=data)],
            )
            activity.record(
                session,
                actor=Actor(company_id=self.company_id, author_id=row.author_id),
                action="create",
                resource_type="erasure",
                resource_id=self.id,
                before=None,
                after=data,
            )


def run(
    db: Database,
    store: Store,
    erasure_id: uuid.UUID,
    *,
    worker: str,
    stop: threading.Event | None = None,
    duty: float = 1.0,
) -> None:
    """Run a claimed erasure to completion (see the module's steps), working at most
    `duty` of the time (`HEADWATER_ERASURE_DUTY`)."""
    with db.read_connection() as connection:
        erasure = connection.execute(
            select(Erasure.__table__).where(Erasure.id == erasure_id)
        ).one()
    job = _Run(db, store, erasure, worker, stop, duty)
    try:
        covered = job.datasets()
        for dataset in covered:
            job.records(dataset)
        for dataset in covered:
            job.rows(dataset)
        job.files()
        job.exports()
        job.complete()
    except Lost:
        log.warning("erasure taken over by another worker", erasure=str(erasure_id))
        return
    log.info("erasure completed", erasure=str(erasure_id), datasets=len(covered))
