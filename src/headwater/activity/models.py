"""Activity tables: the entries, and each company's chain head."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, String, UniqueConstraint, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from headwater.db import Base, UTCDateTime


class ActivityEntry(Base):
    """One change. `seq` numbers a company's entries from 1; `hash` chains them."""

    __tablename__ = "activity_entries"
    __table_args__ = (
        UniqueConstraint("company_id", "seq"),
        # One index per filter member, each ending in the sort order (timestamp, seq),
        # so a filtered, newest-first page is an index range scan.
        Index("ix_activity_company_time", "company_id", "timestamp", "seq"),
        Index("ix_activity_company_resource", "company_id", "resource_id", "timestamp", "seq"),
        Index("ix_activity_company_author", "company_id", "author_id", "timestamp", "seq"),
        Index(
            "ix_activity_company_type_action",
            "company_id",
            "resource_type",
            "action",
            "timestamp",
            "seq",
        ),
        Index("ix_activity_company_action", "company_id", "action", "timestamp", "seq"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(BigInteger)
    resource_type: Mapped[str] = mapped_column(String(32))
    resource_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    author_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    action: Mapped[str] = mapped_column(String(16))
    # Plain JSON, not JSONB, on purpose: JSONB rewrites numbers and key order, and the
    # chain hash must be recomputable from exactly what was stored.
    before: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    after: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    timestamp: Mapped[datetime] = mapped_column(UTCDateTime)
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))


class ActivityHead(Base):
    """The newest link of a company's chain. Its row lock orders that company's writes."""

    __tablename__ = "activity_heads"

    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id"), primary_key=True
    )
    count: Mapped[int] = mapped_column(BigInteger)
    hash: Mapped[str] = mapped_column(String(64))
