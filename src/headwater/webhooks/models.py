"""Webhook endpoints, one delivery per (endpoint, event), and each delivery's attempts."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    Uuid,
    false,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from headwater.db import Base, UTCDateTime

BIGINT = BigInteger().with_variant(Integer(), "sqlite")


class WebhookEndpoint(Base):
    """A company's receiver. `secret` (and `previous_secret`, which still signs until
    `previous_secret_until` after a rotation) are stored encrypted (`webhooks.crypto`).
    `failing_since`: when its first failed attempt since the last success happened."""

    __tablename__ = "webhook_endpoints"
    __table_args__ = (Index(None, "company_id", "created_at"),)

    # `status` of an endpoint deleted through the API: gone from it, its deliveries
    # never leased, until the worker has removed them and then the row
    # (`service.remove_deleted`)
    DELETED = "deleted"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    company_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    url: Mapped[str] = mapped_column(String(2048))
    event_types: Mapped[list[str]] = mapped_column(JSON)
    description: Mapped[str] = mapped_column(String(500))
    status: Mapped[str] = mapped_column(String(16))
    secret: Mapped[str] = mapped_column(Text)
    previous_secret: Mapped[str | None] = mapped_column(Text, default=None)
    previous_secret_until: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    failing_since: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    # its status changed, and its pending deliveries do not all follow it yet (out of
    # the schedule if disabled, due if enabled): the worker moves them a batch a
    # transaction (`dispatch.reschedule`)
    rescheduling: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    author_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class WebhookDelivery(Base):
    """One event for one endpoint: `pending` (due at `next_attempt_at`; while an attempt
    runs, at its lease's end, `leased_until`: a worker killed mid-attempt leaves it due
    again), `delivered` or `failed` (after the last retry)."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("endpoint_id", "event_seq", "company_id", "event_created_at"),
        ForeignKeyConstraint(
            ["event_seq", "company_id", "event_created_at"],
            ["events.seq", "events.company_id", "events.created_at"],
            ondelete="CASCADE",
        ),
        Index(None, "status", "next_attempt_at"),
        Index(None, "endpoint_id", "created_at"),
        Index(None, "event_seq"),
        Index(
            "ix_webhook_deliveries_leased",
            "endpoint_id",
            "leased_until",
            postgresql_where=text("leased_until IS NOT NULL"),
            sqlite_where=text("leased_until IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BIGINT, primary_key=True, autoincrement=True)
    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    endpoint_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("webhook_endpoints.id", ondelete="CASCADE")
    )
    event_seq: Mapped[int] = mapped_column(BIGINT)
    event_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    event_type: Mapped[str] = mapped_column(String(64))
    # the key's last column: PostgreSQL partitions the table by it, as it does events
    event_created_at: Mapped[datetime] = mapped_column(UTCDateTime, primary_key=True)
    status: Mapped[str] = mapped_column(String(16))
    # attempts since the delivery was (re)queued: where it is in the retry schedule
    attempt_count: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    # while an attempt runs: its lease's end (`jobs.Due`)
    leased_until: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class WebhookAttempt(Base):
    """One POST: its answer's status code, or the error that stood for one."""

    __tablename__ = "webhook_attempts"
    __table_args__ = (
        Index(None, "delivery_id", "id"),
        ForeignKeyConstraint(
            ["delivery_id", "company_id", "event_created_at"],
            [
                "webhook_deliveries.id",
                "webhook_deliveries.company_id",
                "webhook_deliveries.event_created_at",
            ],
            ondelete="CASCADE",
        ),
    )

    id: Mapped[int] = mapped_column(BIGINT, primary_key=True, autoincrement=True)
    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    delivery_id: Mapped[int] = mapped_column(BIGINT)
    # its delivery's event's time: PostgreSQL partitions the table by it, as it does events
    event_created_at: Mapped[datetime] = mapped_column(UTCDateTime, primary_key=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    status_code: Mapped[int | None] = mapped_column(Integer, default=None)
    error: Mapped[str | None] = mapped_column(String(500), default=None)
    duration_ms: Mapped[int] = mapped_column(Integer)
