"""Time partitions of the event log (contract 19): on PostgreSQL events, deliveries and
attempts lie in partitions of their event's day, made ahead by a periodic job, and
retention drops whole days; SQLite keeps plain tables."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import pytest
from sqlalchemy import Connection, func, insert, select, text
from starlette.testclient import TestClient

from headwater import worker
from headwater.db import Database
from headwater.events import log, outbox
from headwater.events.models import Event
from headwater.kit.clock import utcnow
from headwater.runtime import Runtime
from headwater.webhooks import partitions
from headwater.webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from tests.webhooks.conftest import HookTenant


def _runtime(client: TestClient) -> Runtime:
    return client.app.state.runtime  # type: ignore[attr-defined,no-any-return]


@pytest.fixture
def postgresql(backend: str) -> None:
    if backend != "postgresql":
        pytest.skip("partitions are PostgreSQL's; SQLite keeps plain tables")


def _partition_of(connection: Connection, table: str, **where: Any) -> str:
    (column, value), *_ = where.items()
    return str(
        connection.execute(
            text(f"SELECT tableoid::regclass::text FROM {table} WHERE {column} = :v"),
            {"v": value},
        ).scalar_one()
    )


def test_the_event_log_is_partitioned_by_day_ahead(backend: str, client: TestClient) -> None:
    with _runtime(client).db.begin() as connection:
        if backend == "sqlite":
            assert not partitions.partitioned(connection)
            return
        assert partitions.partitioned(connection)
        today = utcnow().date()
        ahead = {today + timedelta(days=n) for n in range(partitions.DAYS_AHEAD + 1)}
        for table in partitions.TABLES:
            assert ahead <= set(partitions.days(connection, table)), table


def test_the_periodic_job_makes_the_days_ahead(postgresql: None, client: TestClient) -> None:
    runtime = _runtime(client)
    last = utcnow().date() + timedelta(days=partitions.DAYS_AHEAD)
    with runtime.db.begin() as connection:  # as if the job had not run for a day
        partitions.drop_day(connection, last)
    asyncio.run(worker.make_partitions(runtime))
    with runtime.db.begin() as connection:
        for table in partitions.TABLES:
            assert partitions.days(connection, table)[-1] == last


def _endpoint(connection: Connection, company_id: uuid.UUID) -> uuid.UUID:
    endpoint_id, now = uuid.uuid4(), utcnow()
    connection.execute(
        insert(WebhookEndpoint).values(
            id=endpoint_id,
            company_id=company_id,
            url="https://receiver.example/hook",
            event_types=["*"],
            description="",
            status="disabled",
            secret="sealed",
            author_id=uuid.uuid4(),
            created_at=now,
            updated_at=now,
        )
    )
    return endpoint_id


def _old_day(db: Database, company_id: uuid.UUID, day: date) -> list[uuid.UUID]:
    """Two events of `day` (its partitions made), one with a delivery and an attempt."""
    at = datetime.combine(day, time(12), tzinfo=UTC)
    rows = [
        outbox.event("transaction.completed", company_id=company_id, data={}, created_at=at)
        for _ in range(2)
    ]
    with db.begin() as connection:
        partitions.make_day(connection, day)
        outbox.write(connection, rows)
        seq = connection.scalar(select(Event.seq).where(Event.id == rows[0]["id"]))
        delivery = {
            "company_id": company_id,
            "endpoint_id": _endpoint(connection, company_id),
            "event_seq": seq,
            "event_id": rows[0]["id"],
            "event_type": "transaction.completed",
            "event_created_at": at,
            "status": "delivered",
            "attempt_count": 1,
            "created_at": at,
        }
        delivery_id = connection.execute(
            insert(WebhookDelivery).values(delivery).returning(WebhookDelivery.id)
        ).scalar_one()
        connection.execute(
            insert(WebhookAttempt).values(
                company_id=company_id,
                delivery_id=delivery_id,
                event_created_at=at,
                at=at,
                status_code=200,
                duration_ms=5,
            )
        )
    return [row["id"] for row in rows]


def test_retention_drops_a_days_events_deliveries_and_attempts_whole(
    postgresql: None, client: TestClient, hooks: HookTenant
) -> None:
    runtime = _runtime(client)
    company_id = uuid.UUID(hooks.company_id)
    day = utcnow().date() - timedelta(days=runtime.settings.event_retention_days + 10)
    old = _old_day(runtime.db, company_id, day)
    with runtime.db.begin() as connection:
        assert _partition_of(connection, "events", id=old[0]) == partitions.name("events", day)
        assert _partition_of(connection, "webhook_attempts", company_id=company_id) == (
            partitions.name("webhook_attempts", day)
        )
    numbered = hooks.events()["data"]  # numbers both
    assert {uuid.UUID(e["id"]) for e in numbered} >= set(old)
    first = hooks.events(limit=1)  # a cursor after the company's first event
    hooks.push(1)
    asyncio.run(worker.purge_events(runtime))
    with runtime.db.begin() as connection:
        for table in partitions.TABLES:
            assert day not in partitions.days(connection, table), table
        assert connection.scalar(select(Event.id).where(Event.id.in_(old))) is None
    # the cursor behind the dropped day answers 410; from the start, today's event only
    expired = hooks.client.get(
        "/platform/v1/events", params={"after": first["next_cursor"]}, headers=hooks.headers
    )
    assert expired.status_code == 410, expired.text
    kept = hooks.follow()[0]
    assert not {uuid.UUID(e["id"]) for e in kept} & set(old)
    assert [e["type"] for e in kept][-1] == "transaction.completed"  # today's push


def test_a_drop_that_fails_before_its_commit_leaves_the_day_whole(
    postgresql: None, client: TestClient, hooks: HookTenant
) -> None:
    """The horizons move and the day's partitions go in one database transaction: a
    process killed before its commit leaves both as they were."""
    runtime = _runtime(client)
    company_id = uuid.UUID(hooks.company_id)
    day = utcnow().date() - timedelta(days=runtime.settings.event_retention_days + 20)
    old = _old_day(runtime.db, company_id, day)
    hooks.events()  # numbered
    with runtime.db.begin() as connection:
        last = connection.scalar(select(func.max(Event.pos)).where(Event.id.in_(old)))
    cutoff = datetime.combine(day + timedelta(days=1), time(), tzinfo=UTC)
    with pytest.raises(RuntimeError), runtime.db.begin() as connection:
        dropped, events = partitions.drop_before(connection, cutoff)
        assert (dropped, events) == ([day], 2)
        raise RuntimeError("killed before the commit")
    with runtime.db.begin() as connection:
        assert day in partitions.days(connection, "webhook_attempts")
        assert len(connection.scalars(select(Event.id).where(Event.id.in_(old))).all()) == 2
        assert log.horizon(connection, company_id) == 0
    with runtime.db.begin() as connection:  # and then it does
        assert partitions.drop_before(connection, cutoff) == ([day], 2)
        assert log.horizon(connection, company_id) == last


def test_an_event_of_a_day_without_a_partition_lands_in_the_default_one(
    postgresql: None, client: TestClient, hooks: HookTenant
) -> None:
    """Kept there, and removed row by row once past retention."""
    runtime = _runtime(client)
    company_id = uuid.UUID(hooks.company_id)
    later = datetime.combine(
        utcnow().date() + timedelta(days=partitions.DAYS_AHEAD + 30), time(), tzinfo=UTC
    )
    row = outbox.event("transaction.completed", company_id=company_id, data={}, created_at=later)
    with runtime.db.begin() as connection:
        outbox.write(connection, [row])
        assert _partition_of(connection, "events", id=row["id"]) == "events_default"
    with runtime.db.begin() as connection:
        log.purge(connection, older_than=later + timedelta(seconds=1), batch=100_000)
        assert connection.scalar(select(Event.id).where(Event.id == row["id"])) is None
