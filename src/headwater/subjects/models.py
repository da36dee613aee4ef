"""Erasures: each request, its place in the worker's queue and its counts, and the
transactions it touched (whose raw files and exports it removes next)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import BigInteger, Boolean, Index, Integer, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from headwater.db import Base, JSONDocument, UTCDateTime

QUEUED, RUNNING, COMPLETED, FAILED = "queued", "running", "completed", "failed"


class Erasure(Base):
    """One erasure. `status` goes queued → running → completed | failed; a running one
    whose worker stopped renewing its claim (`claimed_at`) is queued work again, and
    each of its steps finds what is left. Its subjects are kept only as digests."""

    __tablename__ = "erasures"
    __table_args__ = (
        Index("ix_erasures_status", "status", "created_at"),
        Index("ix_erasures_company_id", "company_id", "created_at"),
    )

    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    client_id: Mapped[str | None] = mapped_column(String(64), default=None)
    dataset_id: Mapped[str | None] = mapped_column(String(64), default=None)
    # the clients the token may use when none is named (empty: all of the company's)
    client_ids: Mapped[list[str]] = mapped_column(JSONDocument, default=list)
    subject_count: Mapped[int] = mapped_column(Integer)
    suppress: Mapped[bool] = mapped_column(Boolean)
    # hex digests of the subjects (`ingestion.subjects.digests`), as a JSON array
    digests: Mapped[list[str]] = mapped_column(JSONDocument)
    status: Mapped[str] = mapped_column(String(16))
    records: Mapped[int] = mapped_column(BigInteger, default=0)
    quarantined_rows: Mapped[int] = mapped_column(BigInteger, default=0)
    files: Mapped[int] = mapped_column(Integer, default=0)
    exports: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(String(500), default=None)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    claimed_by: Mapped[str | None] = mapped_column(String(255), default=None)
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    author_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)


class ErasureItem(Base):
    """A transaction an erasure removed records or quarantined rows of: its raw file is
    removed next (`file_done` once it is), and the exports that may hold its records
    (`ingested_at`, None for rows only). Written with the removal it follows, so a
    worker that dies in between loses none."""

    __tablename__ = "erasure_items"

    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    erasure_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    transaction_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    dataset_pk: Mapped[uuid.UUID] = mapped_column(Uuid)
    ingested_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    file_done: Mapped[bool] = mapped_column(Boolean, default=False)
