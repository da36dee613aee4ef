"""Inboxes, and the messages they received (the durable queue of replies)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from headwater.db import Base, UTCDateTime


class Inbox(Base):
    """An address for one dataset; mail is taken only from its allowed senders."""

    __tablename__ = "inboxes"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    # the local part: at least 80 random bits, unique
    local_part: Mapped[str] = mapped_column(String(64), unique=True)
    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("companies.id"), index=True)
    client_id: Mapped[str] = mapped_column(String(64))
    dataset_id: Mapped[str] = mapped_column(String(64))
    allowed_senders: Mapped[list[str]] = mapped_column(JSON)
    # the author of its transactions
    author_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class InboxMessageId(Base):
    """A Message-ID an inbox took, by its SHA-256 (a Message-ID may be longer than an
    index entry): the primary key makes two copies of one message, arriving at once on
    two connections or instances, store once."""

    __tablename__ = "inbox_message_ids"

    inbox_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    message_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime)


class InboxMessage(Base):
    """A message an inbox took: its transactions, and its reply's state (`pending` until
    sent, `sent`, `none` without a relay, `limited` past the sender's hourly limit,
    `failed` after the last attempt)."""

    __tablename__ = "inbox_messages"
    __table_args__ = (
        Index(None, "inbox_id", "message_id"),
        Index(None, "reply_state", "next_attempt_at"),
        Index(None, "sender", "replied_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    inbox_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    message_id: Mapped[str] = mapped_column(String(998))
    sender: Mapped[str] = mapped_column(String(320))
    subject: Mapped[str] = mapped_column(String(998))
    transaction_ids: Mapped[list[str]] = mapped_column(JSON)
    ignored: Mapped[list[str]] = mapped_column(JSON)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime)
    reply_state: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    # while its reply is being sent: the lease's end (`jobs.Due`)
    leased_until: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    replied_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    last_error: Mapped[str | None] = mapped_column(String(500), default=None)
    extra: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
