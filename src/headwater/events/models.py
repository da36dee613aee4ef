"""The outbox: one row per event, written by the change it reports."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Index, Integer, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from headwater.db import Base, JSONDocument, UTCDateTime


class Event(Base):
    """`{"id", "type", "created_at", "company_id", "data"}` (contract section 13); `seq`
    orders a company's events as they were written."""

    __tablename__ = "events"
    __table_args__ = (Index(None, "company_id", "seq"),)

    seq: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    id: Mapped[uuid.UUID] = mapped_column(Uuid, unique=True)
    type: Mapped[str] = mapped_column(String(64))
    company_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    data: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
