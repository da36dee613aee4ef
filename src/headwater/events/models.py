"""The outbox: one row per event, written by the change it reports."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Index, Integer, String, Uuid, text
from sqlalchemy.orm import Mapped, mapped_column

from headwater.db import Base, UTCDateTime


class Event(Base):
    """`{"id", "type", "created_at", "company_id", "data"}` (contract section 13).

    `seq` numbers events as they are *inserted*; concurrent writers commit in another
    order, so a reader that followed `seq` could pass a gap that is filled later. `pos`,
    the event's place in its company's log, which the feed and webhooks follow, is given
    after the commit, by `events.log.sequence` (null until then).

    A transaction's event names its transaction (`transaction_id`) instead of copying
    it into `data`: a transaction never changes once final, so the row *is* its data at
    that moment, and a push's write stays small (its event is made in SQL from the row).
    `ingestion.lifecycle.event_json` renders such an event whole."""

    __tablename__ = "events"
    __table_args__ = (
        Index(
            "ix_events_company_id",
            "company_id",
            "pos",
            postgresql_where=text("pos IS NOT NULL"),
            sqlite_where=text("pos IS NOT NULL"),
        ),
        Index(
            "ix_events_unsequenced",
            "company_id",
            "seq",
            postgresql_where=text("pos IS NULL"),
            sqlite_where=text("pos IS NULL"),
        ),
    )

    seq: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    id: Mapped[uuid.UUID] = mapped_column(Uuid)
    type: Mapped[str] = mapped_column(String(64))
    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    # the key's last column: PostgreSQL partitions the table by it (`events.partitions`)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, primary_key=True)
    transaction_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, default=None)
    # JSON text, not JSONB: read back whole, never queried into
    data: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    pos: Mapped[int | None] = mapped_column(BigInteger, default=None)


class EventHead(Base):
    """A company's last position given. Its row lock makes the company's sequencing one
    at a time."""

    __tablename__ = "event_heads"

    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    pos: Mapped[int] = mapped_column(BigInteger)


class EventHorizon(Base):
    """The last position of a company's events removed by retention: a cursor before it
    has lost events (410 `cursor_expired`)."""

    __tablename__ = "event_horizons"

    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    deleted_through: Mapped[int] = mapped_column(BigInteger)
