"""Ingestion tables: datasets and their schema versions, transactions, records, idempotency."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    SmallInteger,
    String,
    UniqueConstraint,
    Uuid,
    false,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from headwater.db import Base, JSONDocument, UTCDateTime

# A stored transaction not numbered in its dataset's record feed yet.
UNFED = "feed_pos IS NULL AND status = 'completed' AND records_accepted > 0"
# A file transaction whose raw file is kept (raw file retention looks at these).
RAW_FILE_KEPT = "kind = 'file' AND NOT file_erased"


class Dataset(Base):
    """A `dataset_id` of an ingestion client, with its current schema version and options."""

    __tablename__ = "datasets"
    __table_args__ = (UniqueConstraint("client_id", "dataset_id"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("companies.id"), index=True)
    client_id: Mapped[str] = mapped_column(String(64), ForeignKey("ingestion_clients.client_id"))
    dataset_id: Mapped[str] = mapped_column(String(64))
    schema_version: Mapped[int] = mapped_column(Integer)
    # its current transform steps' version (0: none ever set)
    transform_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # changed with each erasure of its records and each suppression that covers it: a
    # compiled check (its suppressed subjects) and a feed page read ahead name it
    subjects_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    options: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class DatasetSchema(Base):
    """One version of a dataset's schema. Versions are never changed or removed."""

    __tablename__ = "dataset_schemas"
    __table_args__ = (UniqueConstraint("dataset_pk", "version"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    dataset_pk: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("datasets.id"))
    version: Mapped[int] = mapped_column(Integer)
    schema: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    author_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class DatasetTransform(Base):
    """One version of a dataset's transform steps (contract section 16). Versions are
    never changed or removed."""

    __tablename__ = "dataset_transforms"

    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    dataset_pk: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("datasets.id"), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    steps: Mapped[list[dict[str, Any]]] = mapped_column(JSONDocument)
    author_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class CompanyHashKey(Base):
    """A company's key for the `hash` step, made by the service and kept sealed
    (AES-256-GCM, the company's id as associated data); never shown."""

    __tablename__ = "company_hash_keys"

    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id"), primary_key=True
    )
    sealed: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class DedupeKey(Base):
    """The values at a `dedupe` step's keys of a record stored, as a digest, and when:
    a record whose digest is here within the step's window is a duplicate. One primary
    key probe a record; a concurrent claim of the same digest waits for the first."""

    __tablename__ = "dedupe_keys"
    __table_args__ = (
        Index(
            "ix_dedupe_keys_staged",
            "staged_by",
            "digest",
            postgresql_where=text("staged_by IS NOT NULL"),
            sqlite_where=text("staged_by IS NOT NULL"),
        ),
    )

    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    dataset_pk: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    # the first 128 bits of the HMAC: one index entry of 48 bytes a claim
    digest: Mapped[bytes] = mapped_column(LargeBinary(16), primary_key=True)
    seen_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    # the file transaction that claimed it while staging (a discarded file's claims go
    # with it); NULL for a push's or a resubmit's, which commit with their records
    staged_by: Mapped[uuid.UUID | None] = mapped_column(Uuid, default=None)


class Transaction(Base):
    """What happened to one push or one file: kept whether it was stored or rejected."""

    __tablename__ = "transactions"
    __table_args__ = (
        Index(None, "company_id", "created_at"),
        Index(None, "dataset_pk", "created_at"),
        Index(
            "ix_transactions_feed",
            "dataset_pk",
            "feed_pos",
            postgresql_where=text("feed_pos IS NOT NULL"),
            sqlite_where=text("feed_pos IS NOT NULL"),
        ),
        Index(
            "ix_transactions_raw_files",
            "completed_at",
            postgresql_where=text(RAW_FILE_KEPT),
            sqlite_where=text(RAW_FILE_KEPT),
        ),
        Index(
            "ix_transactions_unfed",
            "dataset_pk",
            "completed_at",
            postgresql_where=text(UNFED),
            sqlite_where=text(UNFED),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id"), primary_key=True
    )
    dataset_pk: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("datasets.id"))
    client_id: Mapped[str] = mapped_column(String(64))
    dataset_id: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(8))
    # the door it came through: api, upload, sftp or email (contract section 10)
    channel: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    schema_version: Mapped[int | None] = mapped_column(Integer)
    records_received: Mapped[int] = mapped_column(Integer, default=0)
    # a file's rows read so far while it is processing (written every few seconds)
    records_processed: Mapped[int | None] = mapped_column(Integer, default=None)
    records_accepted: Mapped[int] = mapped_column(Integer, default=0)
    records_rejected: Mapped[int] = mapped_column(Integer, default=0)
    # records a `filter` step or a `dedupe` step kept out (contract section 16)
    records_filtered: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    records_duplicates: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # records of suppressed subjects, not stored (contract section 17)
    records_suppressed: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # its raw file was removed (an erasure, or raw file retention)
    file_erased: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # the dataset's transform version when the transaction began (None: it had none)
    transform_version: Mapped[int | None] = mapped_column(Integer, default=None)
    error_count: Mapped[int] = mapped_column(Integer, default=0)
    errors: Mapped[list[dict[str, Any]]] = mapped_column(JSONDocument, default=list)
    file_name: Mapped[str | None] = mapped_column(String(255), default=None)
    file_size: Mapped[int | None] = mapped_column(BigInteger, default=None)
    content_type: Mapped[str | None] = mapped_column(String(64), default=None)
    author_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    uploaded_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    # a resubmission: the transaction whose quarantined rows it took
    resubmit_of: Mapped[uuid.UUID | None] = mapped_column(Uuid, default=None)
    # its place in its dataset's record feed, given after commit (`ingestion.feed`)
    feed_pos: Mapped[int | None] = mapped_column(BigInteger, default=None)


class FeedHead(Base):
    """A dataset's last record feed position given. Its row lock makes the dataset's
    numbering one at a time."""

    __tablename__ = "record_feed_heads"

    dataset_pk: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    pos: Mapped[int] = mapped_column(BigInteger)


class Record(Base):
    """One stored record. `seq` orders records in the order they were stored.

    `data` is JSON text, not JSONB: it keeps the record as sent (member order included)
    and costs PostgreSQL no parsing into binary form on the ingestion path. There is no
    foreign key to the transaction: the two are written in one database transaction by
    the one function that stores records, and a per-row key check would cost each insert.
    """

    __tablename__ = "records"
    __table_args__ = (
        Index(None, "dataset_pk", "ingested_at", "seq"),
        Index(None, "transaction_id", "seq"),
        Index(
            "ix_records_subject",
            "dataset_pk",
            "subject",
            postgresql_where=text("subject IS NOT NULL"),
            sqlite_where=text("subject IS NOT NULL"),
        ),
    )

    seq: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    record_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    dataset_pk: Mapped[uuid.UUID] = mapped_column(Uuid)
    transaction_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    schema_version: Mapped[int] = mapped_column(Integer)
    transform_version: Mapped[int | None] = mapped_column(Integer, default=None)
    ingested_at: Mapped[datetime] = mapped_column(UTCDateTime)
    data: Mapped[dict[str, Any]] = mapped_column(JSON)
    # the digest of its value at the dataset's `subject_key` (`ingestion.subjects`)
    subject: Mapped[bytes | None] = mapped_column(LargeBinary(16), default=None)


class RecordTombstone(Base):
    """A record removed (an erasure, retention), as the record feed shows it once more:
    at a feed position of its own, taken from its dataset's numbering when it was
    removed, in the order of its `seq`."""

    __tablename__ = "record_tombstones"
    __table_args__ = (Index(None, "dataset_pk", "pos", "seq"),)

    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    dataset_pk: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    pos: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    record_id: Mapped[uuid.UUID] = mapped_column(Uuid)


class Suppression(Base):
    """A subject whose later records are not stored (contract section 17): only its
    digests (`ingestion.subjects.digests`), in the scope of the erasure that made it
    (a client, a dataset of it, or every client of the company: NULLs)."""

    __tablename__ = "suppressions"
    __table_args__ = (Index(None, "company_id", "created_at"),)

    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    client_id: Mapped[str | None] = mapped_column(String(64), default=None)
    dataset_id: Mapped[str | None] = mapped_column(String(64), default=None)
    # hex digests, as a JSON array
    digests: Mapped[list[str]] = mapped_column(JSONDocument)
    erasure_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class IdempotencyKey(Base):
    """A push that carried `Idempotency-Key`, kept for a day: its body's hash and its
    transaction, from which its answer is made again."""

    __tablename__ = "idempotency_keys"

    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    request_hash: Mapped[str] = mapped_column(String(64))
    transaction_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)


class RecordCount(Base):
    """How many records a dataset holds, kept in the transaction that stores them, so a
    records page answers its total without counting millions of rows.

    The count is split over `SHARDS` rows and each stored transaction adds to one of them
    (chosen by its id), so concurrent pushes to one dataset seldom wait on one row lock;
    the total is their sum. A removal (an erasure, retention) subtracts from the shards
    in the transaction that deletes the records, so the sum stays exact.
    """

    __tablename__ = "dataset_record_counts"

    SHARDS: ClassVar[int] = 16

    dataset_pk: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    shard: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    records: Mapped[int] = mapped_column(BigInteger)


class StagedTransaction(Base):
    """A file transaction whose records are being stored in short database transactions
    (`ingestion.staging`): while its row exists, none of its records is visible."""

    __tablename__ = "record_staging"

    transaction_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    dataset_pk: Mapped[uuid.UUID] = mapped_column(Uuid, index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
