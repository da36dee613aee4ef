"""The ingestion core as channels use it: files (upload URLs today; SFTP and email next)
open a transaction, hand it checked rows and finish it here, and never touch
ingestion's tables themselves.

Every function works in the caller's database transaction (a Session or Connection
the caller's unit of work commits) and none commits, but `discard`, which removes a
file's staged records in short transactions of its own. A channel's life of a file:

    transaction_id = open_file(...)            # awaiting_upload, or processing
    received(...)                              # the bytes arrived: processing
    target = file_target(connection, id)       # the dataset's current schema, compiled
    stage_begun(connection, target)            # did an earlier run stage records?
    discard(db, id)                            # if so, they go first
    stage_begin(connection, target)            # with the first batch: hidden from here on
    stage_rows(connection, target, records)    # a batch a short transaction, hidden
    publish(connection, target, accepted)      # with the last batch and `finish`, in one
    finish(connection, id, Status.COMPLETED, **counts)   # shown at once, with the event
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select
from sqlalchemy.orm import Session

from headwater.db import Database, core_connection
from headwater.identity.tokens import Principal
from headwater.ingestion import (
    check,
    compiling,
    datasets,
    dedupe,
    erasure,
    hashkeys,
    lifecycle,
    repository,
    sinks,
    staging,
    subjects,
)
from headwater.ingestion.check import Errors, Kept
from headwater.ingestion.datasets import UsableTree, usable_tree
from headwater.ingestion.datasets import find as find_dataset
from headwater.ingestion.errors import DatasetNotFound, TransactionNotFound
from headwater.ingestion.lifecycle import Channel, Status
from headwater.ingestion.models import Dataset, Suppression, Transaction
from headwater.ingestion.schemas import DatasetId, TransactionRead
from headwater.ingestion.transactions import (
    PENDING_STATUSES,
    get_transaction,
    transaction_read,
    visible_to,
    visible_where,
)
from headwater.kit.clock import utcnow_ms
from headwater.kit.pagination import paginate

__all__ = [
    "PENDING_STATUSES",
    "Channel",
    "DatasetId",
    "DatasetNotFound",
    "Errors",
    "FileDataset",
    "FileTarget",
    "Kept",
    "Status",
    "TransactionNotFound",
    "TransactionRead",
    "UsableTree",
    "check_one",
    "check_table",
    "dataset_for",
    "discard",
    "file_dataset",
    "file_target",
    "file_transaction",
    "find_dataset",
    "finish",
    "open_file",
    "progress",
    "publish",
    "received",
    "record_finished",
    "stage_begin",
    "stage_begun",
    "stage_end",
    "stage_rows",
    "started",
    "store_rows",
    "transaction_read",
    "transform",
    "usable_tree",
    "visible_to",
    "visible_where",
]


def dataset_for(session: Session, caller: Principal, client_id: str, dataset_id: str) -> Dataset:
    """The dataset a caller names for a new file: 403 unless its token may use the
    client, 404 if the client has no such dataset."""
    return datasets.caller_dataset(session, caller, client_id, dataset_id)


@dataclass(frozen=True, slots=True)
class FileDataset:
    """What a new file's transaction needs of its dataset (`file_dataset`)."""

    id: uuid.UUID
    company_id: uuid.UUID
    client_id: str
    dataset_id: str
    transform_version: int


def file_dataset(
    connection: Connection | Session, caller: Principal, client_id: str, dataset_id: str
) -> FileDataset:
    """`dataset_for` in one statement without the ORM (the client's state and the
    dataset's, as a push reads them): every file of every door opens with it."""
    row = repository.target(core_connection(connection), client_id, dataset_id)
    row = datasets.usable_target(caller, client_id, dataset_id, row)
    return FileDataset(row.id, row.company_id, client_id, dataset_id, row.transform_version)


def open_file(
    connection: Connection | Session,
    dataset: Dataset | FileDataset,
    *,
    channel: Channel,
    author_id: uuid.UUID,
    status: Status = Status.AWAITING_UPLOAD,
    file_name: str | None,
    content_type: str,
    **columns: Any,
) -> uuid.UUID:
    """Open a file transaction (`awaiting_upload`, or `processing` for a channel that has
    the bytes already); its id."""
    row = lifecycle.new(
        channel=channel,
        kind="file",
        status=status,
        company_id=dataset.company_id,
        dataset_pk=dataset.id,
        client_id=dataset.client_id,
        dataset_id=dataset.dataset_id,
        author_id=author_id,
        created_at=utcnow_ms(),
        file_name=file_name,
        content_type=content_type,
        transform_version=dataset.transform_version or None,
        **columns,
    )
    lifecycle.begin(core_connection(connection), row)
    return uuid.UUID(str(row["id"]))


def received(connection: Connection, transaction_id: uuid.UUID, *, size: int, at: datetime) -> bool:
    """The file arrived whole: `processing`. False if the transaction had moved on."""
    return lifecycle.advance(
        connection, transaction_id, Status.PROCESSING, file_size=size, uploaded_at=at
    )


def started(connection: Connection, transaction_id: uuid.UUID, *, at: datetime) -> None:
    """A worker (again) starts reading the file from its first row."""
    lifecycle.note(connection, transaction_id, started_at=at, records_processed=None)


def progress(connection: Connection, transaction_id: uuid.UUID, rows: int) -> None:
    """`rows` of the file are read so far."""
    lifecycle.note(connection, transaction_id, records_processed=rows)


def finish(
    connection: Connection, transaction_id: uuid.UUID, status: Status, **columns: Any
) -> bool:
    """The one way to a final status (and its event): `lifecycle.finish`."""
    return lifecycle.finish(connection, transaction_id, status, **columns)


@dataclass(frozen=True, slots=True)
class FileTarget:
    """What a file's rows are checked against and stored with: its dataset's current
    schema version (compiled, numbers and booleans read from text) and policy."""

    transaction_id: uuid.UUID
    company_id: uuid.UUID
    dataset_pk: uuid.UUID
    version: int
    quarantine: bool
    check: compiling.Compiled  # with the transform steps the records go through
    ingested_at: datetime

    def batch(self, kept: Kept, transaction_id: uuid.UUID | None = None) -> sinks.RecordBatch:
        """Records kept by the steps, as a sink stores them (under the target's
        transaction, or `transaction_id`)."""
        return sinks.RecordBatch(
            records=kept.records,
            company_id=self.company_id,
            dataset_pk=self.dataset_pk,
            transaction_id=transaction_id or self.transaction_id,
            schema_version=self.version,
            ingested_at=self.ingested_at,
            transform_version=self.check.transform_version,
            digests=kept.digests,
            window=kept.window,
            subjects=kept.subjects,
        )


def file_target(
    connection: Connection,
    transaction_id: uuid.UUID,
    *,
    lock: bool = False,
    steps_now: bool = False,
) -> FileTarget:
    """The file transaction's dataset as it is now, with the transform steps in force
    when the transaction began (`steps_now`: the dataset's current ones, for a new
    transaction made from it, a resubmit). `lock`: the transaction's row stays locked
    until the caller's commit, so that two callers (two resubmissions of its quarantined
    rows) take their turns."""
    statement = (
        select(
            Transaction.company_id,
            Transaction.transform_version,
            Dataset.id,
            Dataset.schema_version,
            Dataset.options,
            Dataset.transform_version.label("current_steps"),
            Dataset.subjects_version,
        )
        .join(Dataset, Dataset.id == Transaction.dataset_pk)
        .where(Transaction.id == transaction_id, Transaction.kind == "file")
    )
    if lock:
        statement = statement.with_for_update(of=Transaction, key_share=True)
    row = connection.execute(statement).one()
    return FileTarget(
        transaction_id=transaction_id,
        company_id=row.company_id,
        dataset_pk=row.id,
        version=row.schema_version,
        quarantine=row.options.get("invalid_rows") == "quarantine",
        check=compiling.compiled(
            connection,
            dataset_pk=row.id,
            version=row.schema_version,
            options=row.options,
            coerce=True,
            transform_version=(row.current_steps if steps_now else row.transform_version) or 0,
            subjects_version=row.subjects_version,
        ),
        ingested_at=utcnow_ms(),
    )


def store_rows(
    connection: Connection,
    target: FileTarget,
    kept: check.Kept,
    *,
    transaction_id: uuid.UUID | None = None,
) -> int:
    """Store records the steps kept (`transform`) of the target's transaction (or of
    `transaction_id`, one being made, as a resubmit's), counted, in the caller's
    database transaction, after their dedupe claims; how many were duplicates."""
    batches, lost = dedupe.claim(connection, [target.batch(kept, transaction_id)])
    sinks.for_dialect(connection.dialect.name).add(connection, batches)
    return sum(lost.values())


def check_one(
    compiled: compiling.Compiled, data: dict[str, Any], *, nul: bool = False
) -> tuple[Any, list[dict[str, Any]]]:
    """The core's record check of one record (`check.one`): normalised, and its errors."""
    return check.one(compiled, data, nul=nul)


def transform(compiled: compiling.Compiled, records: Sequence[dict[str, Any]]) -> check.Kept:
    """The dataset's transform steps on valid records (`check.transform`): those to
    store, and how many were filtered or duplicates within them."""
    return check.transform(compiled, records)


def check_table(
    compiled: compiling.Compiled, header: Sequence[str], rows: Sequence[Sequence[str]]
) -> tuple[list[Any], list[tuple[int, list[dict[str, Any]]]]]:
    """The core's record check of CSV rows under one header (`check.table`)."""
    return check.table(compiled, header, rows)


def stage_begun(connection: Connection, target: FileTarget) -> bool:
    """Whether an earlier run of the file staged records (the caller's to `discard`
    before it stages its own)."""
    return staging.begun(connection, target.transaction_id)


def stage_begin(connection: Connection, target: FileTarget) -> None:
    """The file's records are hidden from here on, until `publish` (`ingestion.staging`):
    in the database transaction of its first staged batch."""
    staging.begin(connection, target)


def stage_rows(connection: Connection, target: FileTarget, kept: check.Kept) -> int:
    """Store a batch of the file's records the steps kept, hidden until `publish`, in
    the caller's (short) database transaction; how many were duplicates (not stored)."""
    return staging.stage(connection, target.batch(kept))


def publish(connection: Connection, target: FileTarget, records: int) -> None:
    """Show the file's `records` staged records, counted, when the caller's database
    transaction commits: the one that finishes it `completed`."""
    staging.publish(connection, target, records)


def stage_end(connection: Connection, transaction_id: uuid.UUID) -> None:
    """The file ends without records (rejected, failed): `discard` removed them."""
    staging.end(connection, transaction_id)


def discard(db: Database, transaction_id: uuid.UUID) -> int:
    """Remove the file's staged records, in short database transactions of their own."""
    return staging.discard(db, transaction_id)


def record_finished(
    connection: Connection,
    source: Transaction,
    target: FileTarget,
    *,
    transaction_id: uuid.UUID,
    author_id: uuid.UUID,
    started_at: datetime,
    **columns: Any,
) -> None:
    """Store a file transaction made final at once (a resubmit of `source`'s quarantined
    rows, whose records `store_rows` stored under `transaction_id`), with its event."""
    row = lifecycle.new(
        transaction_id=transaction_id,
        channel=source.channel,  # type: ignore[arg-type]
        kind="file",
        status=Status.COMPLETED,
        company_id=source.company_id,
        dataset_pk=target.dataset_pk,
        client_id=source.client_id,
        dataset_id=source.dataset_id,
        author_id=author_id,
        created_at=started_at,
        schema_version=target.version,
        transform_version=target.check.transform_version,
        file_name=source.file_name,
        file_size=source.file_size,
        content_type=source.content_type,
        started_at=started_at,
        resubmit_of=source.id,
        **columns,
    )
    row["completed_at"] = utcnow_ms()
    sinks.for_dialect(connection.dialect.name).store(connection, [row], [])


def file_transaction(session: Session, caller: Principal, transaction_id: uuid.UUID) -> Transaction:
    """The caller's file transaction (404 if not theirs, or not a file's)."""
    transaction = get_transaction(session, caller, transaction_id)
    if transaction.kind != "file":
        raise TransactionNotFound(f"Transaction {transaction_id} is not a file transaction.")
    return transaction


# --- data subjects (contract section 17) ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class SubjectDataset:
    """A dataset an erasure covers: it has a `subject_key`."""

    dataset_pk: uuid.UUID
    client_id: str
    dataset_id: str


def subject_datasets(
    connection: Connection,
    company_id: uuid.UUID,
    *,
    client_ids: Sequence[str],
    dataset_id: str | None = None,
) -> list[SubjectDataset]:
    """The company's datasets with a `subject_key`, of these clients (none: every
    client), and named `dataset_id` if given."""
    statement = select(Dataset.id, Dataset.client_id, Dataset.dataset_id, Dataset.options).where(
        Dataset.company_id == company_id
    )
    if client_ids:
        statement = statement.where(Dataset.client_id.in_(list(client_ids)))
    if dataset_id is not None:
        statement = statement.where(Dataset.dataset_id == dataset_id)
    return [
        SubjectDataset(row.id, row.client_id, row.dataset_id)
        for row in connection.execute(statement.order_by(Dataset.client_id, Dataset.dataset_id))
        if row.options.get("subject_key")
    ]


def subject_digests(
    connection: Connection, company_id: uuid.UUID, values: Sequence[str]
) -> list[list[bytes]]:
    """Each subject's digests (`subjects.digests`) under the company's hash key, which is
    made here if the company has none yet (in the caller's transaction)."""
    hashkeys.ensure(connection, company_id)
    key = hashkeys.key(connection, company_id)
    forms = subjects.Forms(key)
    return [forms.of(value) for value in values]


def subject_matcher(connection: Connection, company_id: uuid.UUID, digests: Sequence[bytes]) -> Any:
    """A test of a whole value: whether its digest, under the company's key, is one of
    `digests` (an erasure's, for its quarantined rows). Answers are remembered (most
    values of a dataset's rows repeat: a currency, a country, a channel), at most
    `MATCHES_KEPT` of them."""
    matcher = subjects.Subjects((), hashkeys.key(connection, company_id))
    wanted = frozenset(digests)
    known: dict[str, bool] = {}

    def matches(value: str) -> bool:
        found = known.get(value)
        if found is None:
            found = matcher.digest(value) in wanted
            if len(known) < MATCHES_KEPT:
                known[value] = found
        return found

    return matches


MATCHES_KEPT = 100_000


def _suppressions(company_id: uuid.UUID, client_ids: Sequence[str]) -> Any:
    statement = select(Suppression).where(Suppression.company_id == company_id)
    if client_ids:
        statement = statement.where(
            Suppression.client_id.is_(None) | Suppression.client_id.in_(list(client_ids))
        )
    return statement


def suppressions(
    session: Session, company_id: uuid.UUID, client_ids: Sequence[str], params: Any
) -> tuple[Sequence[Suppression], int]:
    """A page of the company's suppressions (those of these clients, or of every
    client, when the token names some), newest first."""
    statement = _suppressions(company_id, client_ids)
    return paginate(
        session, statement, Suppression.created_at.desc(), Suppression.id, params=params
    )


def find_suppression(
    session: Session, company_id: uuid.UUID, client_ids: Sequence[str], suppression_id: uuid.UUID
) -> Suppression | None:
    statement = _suppressions(company_id, client_ids).where(Suppression.id == suppression_id)
    found: Suppression | None = session.scalars(statement).one_or_none()
    return found


usable_client = datasets.usable_client
whole_values = subjects.whole_values
remove_subjects = erasure.remove_subjects
SUBJECT_PROBES = erasure.PROBES
remove_older = erasure.remove_older
mark_file_erased = erasure.mark_file_erased
suppress = erasure.suppress
lift_suppression = erasure.lift
Removed = erasure.Removed


def retained_datasets(connection: Connection) -> list[tuple[uuid.UUID, int]]:
    """Every dataset with a `retention_days` option: (its id, the days)."""
    rows = connection.execute(select(Dataset.id, Dataset.options))
    return [
        (row.id, int(row.options["retention_days"]))
        for row in rows
        if row.options.get("retention_days")
    ]


def files_ended_before(
    connection: Connection,
    before: datetime,
    *,
    dataset_pk: uuid.UUID | None = None,
    limit: int = 100,
) -> list[uuid.UUID]:
    """File transactions whose raw file is still kept, final before `before` (of one
    dataset: created before it), oldest first (`ix_transactions_raw_files`)."""
    statement = select(Transaction.id).where(
        Transaction.kind == "file",
        Transaction.file_erased.is_(False),
        Transaction.completed_at < before,
    )
    if dataset_pk is not None:
        statement = statement.where(
            Transaction.dataset_pk == dataset_pk, Transaction.created_at < before
        )
    return list(connection.scalars(statement.order_by(Transaction.completed_at).limit(limit)))
