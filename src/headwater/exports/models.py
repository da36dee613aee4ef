"""The exports table: each export's request, its place in the worker's queue and its file."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from headwater.db import Base, UTCDateTime


class Export(Base):
    """One export. `status` goes queued → running → completed | failed; a running export
    whose worker stopped renewing its claim (`claimed_at`) is queued work again. The
    file lives at `object_key` in the store (`bucket`, "" for the embedded one) until
    `available_until`; then it is deleted (`deleted_at`)."""

    __tablename__ = "exports"
    __table_args__ = (
        Index("ix_exports_status", "status", "created_at"),
        Index("ix_exports_company_id", "company_id", "created_at"),
        Index("ix_exports_available_until", "available_until"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    dataset_pk: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("datasets.id"))
    client_id: Mapped[str] = mapped_column(String(64))
    dataset_id: Mapped[str] = mapped_column(String(64))
    format: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    ingested_after: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    ingested_before: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    # CSV only: "escape" (formula-like text cells get a leading ') or "as_sent"
    csv_formulas: Mapped[str] = mapped_column(String(16), default="escape")
    record_count: Mapped[int | None] = mapped_column(BigInteger, default=None)
    file_size: Mapped[int | None] = mapped_column(BigInteger, default=None)
    bucket: Mapped[str] = mapped_column(String(255))
    object_key: Mapped[str] = mapped_column(String(255))
    error: Mapped[str | None] = mapped_column(String(500), default=None)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    claimed_by: Mapped[str | None] = mapped_column(String(255), default=None)
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    author_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    available_until: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
