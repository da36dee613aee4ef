"""A company's traffic by hour: transactions and records per channel and status, for
the console's charts. One indexed range read of the company's transactions
(`company_id, created_at`), grouped in the database; never a scan of the records."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, literal_column
from sqlalchemy.orm import Session

from headwater.identity.tokens import Principal
from headwater.ingestion.models import Transaction
from headwater.ingestion.transactions import visible_to


@dataclass(frozen=True, slots=True)
class HourCount:
    hour: datetime
    channel: str
    status: str
    transactions: int
    records: int  # received
    rejected: int


def hourly(session: Session, caller: Principal, *, hours: int, now: datetime) -> list[HourCount]:
    """The caller's transactions created in the last `hours` whole hours up to `now`,
    counted by hour (UTC), channel and status."""
    end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    start = end - timedelta(hours=hours)
    if session.get_bind().dialect.name == "postgresql":
        utc = func.timezone(literal_column("'UTC'"), Transaction.created_at)
        hour = func.date_trunc(literal_column("'hour'"), utc)
    else:  # stored as "YYYY-MM-DD HH:MM:SS.ffffff"
        hour = func.substr(Transaction.created_at, 1, 13)
    statement = (
        visible_to(caller, Transaction)
        .with_only_columns(
            hour.label("hour"),
            Transaction.channel,
            Transaction.status,
            func.count(),
            func.coalesce(func.sum(Transaction.records_received), 0),
            func.coalesce(func.sum(Transaction.records_rejected), 0),
        )
        .where(Transaction.created_at >= start, Transaction.created_at < end)
        .group_by(hour, Transaction.channel, Transaction.status)
    )
    return [
        HourCount(_hour(h), channel, status, int(n), int(records), int(rejected))
        for h, channel, status, n, records, rejected in session.execute(statement)
    ]


def _hour(value: datetime | str) -> datetime:
    if isinstance(value, str):
        return datetime.strptime(value, "%Y-%m-%d %H").replace(tzinfo=UTC)
    return value.replace(tzinfo=UTC)
