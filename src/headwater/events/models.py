"""The outbox: one row per event, written by the change it reports."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Index, Integer, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from headwater.db import Base, UTCDateTime


class Event(Base):
    """`{"id", "type", "created_at", "company_id", "data"}` (contract section 13); `seq`
    orders a company's events as they were written.

    A transaction's event names its transaction (`transaction_id`) instead of copying
    it into `data`: a transaction never changes once final, so the row *is* its data at
    that moment, and a push's write stays small (its event is made in SQL from the row).
    `ingestion.lifecycle.event_json` renders such an event whole."""

    __tablename__ = "events"
    __table_args__ = (Index(None, "company_id", "seq"),)

    seq: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    id: Mapped[uuid.UUID] = mapped_column(Uuid)
    type: Mapped[str] = mapped_column(String(64))
    company_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    transaction_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, default=None)
    # JSON text, not JSONB: read back whole, never queried into
    data: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
