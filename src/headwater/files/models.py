"""File tables: one upload per file transaction, the processing queue, quarantined rows."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    ForeignKeyConstraint,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    Uuid,
)
from sqlalchemy.orm import Mapped, mapped_column

from headwater.db import Base, UTCDateTime

# FileUpload.state
PENDING = "pending"  # URL handed out, nothing received yet
RECEIVING = "receiving"  # an embedded PUT is streaming in
UPLOADED = "uploaded"  # the object is complete; a job is queued
REFUSED = "refused"  # the object arrived but cannot be processed (size, content type)
EXPIRED = "expired"  # nothing arrived in time

# FileJob.state
QUEUED, RUNNING, DONE = "queued", "running", "done"


class FileUpload(Base):
    """The object a file transaction waits for: where it goes and what it may be.

    `object_key` is made by the service from ids only; the client's file name is kept on
    the transaction as metadata and never names anything in a store.
    """

    __tablename__ = "file_uploads"
    __table_args__ = (
        Index(None, "state", "expires_at"),
        UniqueConstraint("transaction_id", "company_id"),
        ForeignKeyConstraint(
            ["transaction_id", "company_id"], ["transactions.id", "transactions.company_id"]
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    transaction_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    bucket: Mapped[str] = mapped_column(String(255))
    object_key: Mapped[str] = mapped_column(String(255))
    content_type: Mapped[str] = mapped_column(String(64))
    max_bytes: Mapped[int] = mapped_column(BigInteger)
    state: Mapped[str] = mapped_column(String(16))
    etag: Mapped[str | None] = mapped_column(String(128), default=None)
    size: Mapped[int | None] = mapped_column(BigInteger, default=None)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    uploaded_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)


class FileJob(Base):
    """Processing of one uploaded object. (bucket, object_key, etag) is unique, so a
    repeated notification of the same upload queues nothing."""

    __tablename__ = "file_jobs"
    __table_args__ = (
        UniqueConstraint("bucket", "object_key", "etag", "company_id"),
        Index(None, "bucket", "state", "created_at"),
        ForeignKeyConstraint(
            ["file_id", "company_id"], ["file_uploads.id", "file_uploads.company_id"]
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    file_id: Mapped[uuid.UUID] = mapped_column(Uuid, index=True)
    bucket: Mapped[str] = mapped_column(String(255))
    object_key: Mapped[str] = mapped_column(String(255))
    etag: Mapped[str] = mapped_column(String(128))
    state: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    claimed_by: Mapped[str | None] = mapped_column(String(64), default=None)
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)


class QuarantinedRow(Base):
    """An invalid row of a file whose dataset quarantines: kept with its errors until a
    re-submission stores it (then `resolved_by` names the new transaction)."""

    __tablename__ = "quarantined_rows"
    __table_args__ = (Index(None, "transaction_id", "seq"), Index(None, "dataset_pk", "seq"))

    seq: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    dataset_pk: Mapped[uuid.UUID] = mapped_column(Uuid)
    transaction_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    line: Mapped[int] = mapped_column(Integer)
    record: Mapped[int] = mapped_column(Integer)
    data: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    raw: Mapped[str | None] = mapped_column(Text, default=None)
    errors: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    resolved_by: Mapped[uuid.UUID | None] = mapped_column(Uuid, default=None)
