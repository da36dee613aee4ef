"""From the event log to deliveries, and each delivery's attempts (the worker's side).

- `sequence_company` gives a company's committed events their positions
  (`events.log`) and, in the same database transaction, a `pending` delivery for each
  enabled endpoint of the company that subscribes to the event's type: every event
  gets its deliveries exactly once, however many workers run. The worker sequences the
  companies that have endpoints (`sequence_followed`); the feed, its reader's company.
- `claim` leases due deliveries through the job queue (`jobs.Due`: workers never take
  the same one, and a worker killed mid-attempt leaves the delivery due again when the
  lease ends: at least once), at most `per_endpoint` being attempted per endpoint across
  every process.
- `record` writes attempts (many at once, in one database transaction) and each
  delivery's next state: delivered, retried after the schedule's next delay (with up to
  10% jitter), or failed after the last; an endpoint failing for `disable_after` is
  disabled, with its event.
"""

from __future__ import annotations

import contextlib
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
import structlog
from sqlalchemy import (
    Connection,
    Insert,
    Select,
    and_,
    bindparam,
    exists,
    func,
    insert,
    literal,
    select,
    update,
)

from headwater import jobs, wakeups
from headwater.db import Database, driver_execute, in_batches
from headwater.events import log, outbox
from headwater.events.models import Event
from headwater.kit.clock import iso_ms, utcnow, utcnow_ms
from headwater.webhooks import metrics
from headwater.webhooks.crypto import SecretBox
from headwater.webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from headwater.webhooks.rendering import render

log_ = structlog.get_logger("headwater.webhooks")

JITTER = 0.10
# deliveries one sequencing's fan-out makes, about; and the fewest events it covers
FAN_OUT_ROWS = 20_000
MIN_BATCH = 50


def deliveries_of(
    events: Select[Any, Any, Any, Any, Any, Any], now: datetime, *, due: datetime | None
) -> Insert:
    """`INSERT ... SELECT`: a pending delivery, due at `due` (None: not scheduled), for
    each row `events` selects (its columns: `endpoint_id`, and the event's `seq`,
    `company_id`, `id`, `type`, `created_at`).

    Made in event order, each event's to every endpoint: deliveries due at one time are
    leased in the order they were made (the due-time index keeps equal times in the
    order of their rows), so a lease's candidates span every endpoint. Made endpoint by
    endpoint, they were the first few endpoints' alone, and those endpoints' slots left
    a lease at a fraction of its limit: a drain of 100 events to 100 endpoints (one
    sequencing) took 2.5 times the leases, 535-561 us of a lease's time a delivery
    against 222-253."""
    chosen = events.subquery()
    return insert(WebhookDelivery).from_select(
        [
            "endpoint_id",
            "company_id",
            "event_seq",
            "event_id",
            "event_type",
            "event_created_at",
            "status",
            "attempt_count",
            "next_attempt_at",
            "created_at",
        ],
        select(
            chosen.c.endpoint_id,
            chosen.c.company_id,
            chosen.c.seq,
            chosen.c.id,
            chosen.c.type,
            chosen.c.created_at,
            literal("pending"),
            literal(0),
            literal(due, WebhookDelivery.next_attempt_at.type),
            literal(now, WebhookDelivery.created_at.type),
        ).order_by(chosen.c.seq, chosen.c.endpoint_id),
    )


def fan_out(connection: Connection, sequenced: log.Sequenced) -> list[tuple[str, int]]:
    """Pending deliveries of the events a sequencing covered, to every enabled endpoint
    of the company that wants them and existed when they were written: one `INSERT ...
    SELECT` for each set of wanted types (most often one for all the endpoints; one an
    endpoint cost 125-360 ms a sequencing at 100 endpoints, in every delivery's
    latency), nothing through Python. The count of events by type."""
    counts = log.summary(connection, sequenced)
    types = {type_ for type_, _ in counts}
    endpoints = connection.execute(
        select(WebhookEndpoint.id, WebhookEndpoint.event_types).where(
            WebhookEndpoint.company_id == sequenced.company_id,
            WebhookEndpoint.status == "enabled",
        )
    ).all()
    wanting: dict[tuple[str, ...], list[uuid.UUID]] = {}
    for endpoint in endpoints:
        wanted = types if "*" in endpoint.event_types else types & set(endpoint.event_types)
        if wanted:
            wanting.setdefault(tuple(sorted(wanted)), []).append(endpoint.id)
    now = utcnow_ms()
    for kinds, ids in wanting.items():
        # an endpoint gets the events written since it was made (replay sends older ones)
        events = (
            select(
                WebhookEndpoint.id.label("endpoint_id"),
                Event.seq,
                Event.company_id,
                Event.id,
                Event.type,
                Event.created_at,
            )
            .select_from(Event)
            .join(
                WebhookEndpoint,
                and_(
                    WebhookEndpoint.id.in_(ids),
                    Event.created_at >= WebhookEndpoint.created_at,
                ),
            )
            .where(sequenced.events(), Event.type.in_(kinds))
        )
        connection.execute(deliveries_of(events, now, due=now))
    return counts


def sequence_company(db: Database, company_id: uuid.UUID, *, limit: int) -> int:
    """One sequencing of the company (at most `limit` events) with its deliveries, in one
    database transaction; how many events it covered."""
    with db.begin() as connection:
        sequenced = log.sequence(connection, company_id, limit=limit)
        if sequenced is None:
            return 0
        counts = fan_out(connection, sequenced)
        if counts:  # deliveries to make: every worker may take some
            wakeups.mark(connection, "events")
    for type_, count in counts:
        metrics.EVENTS.labels(type_).inc(count)
    return len(sequenced)


def sequence_all(db: Database, company_id: uuid.UUID) -> None:
    """Sequence the company until none of its committed events waits."""
    while sequence_company(db, company_id, limit=log.SEQUENCE_BATCH) == log.SEQUENCE_BATCH:
        continue


def sequence_followed(db: Database) -> int:
    """Sequence (with their deliveries) the waiting events of every company that has an
    enabled endpoint: the worker's round. A read answers when none waits, and no write
    lock is taken. Companies without endpoints are sequenced when their feed is read.

    A sequencing covers fewer events the more endpoints its company has (about
    `FAN_OUT_ROWS` deliveries a transaction), so that one busy company's fan-out never
    holds the worker (or its feed's readers) for long."""
    waiting = (
        select(WebhookEndpoint.company_id, func.count())
        .where(WebhookEndpoint.status == "enabled")
        .group_by(WebhookEndpoint.company_id)
        .having(log.waiting(WebhookEndpoint.company_id))
    )
    with db.read_connection() as connection:
        endpoints = {company_id: count for company_id, count in connection.execute(waiting)}
    return sum(
        sequence_company(
            db,
            company_id,
            limit=max(MIN_BATCH, min(log.SEQUENCE_BATCH, FAN_OUT_ROWS // count)),
        )
        for company_id, count in endpoints.items()
    )


# the deliveries to attempt: the job queue's jobs that fall due
DELIVERIES = jobs.Due(
    model=WebhookDelivery,
    state=WebhookDelivery.status,
    pending="pending",
    due=WebhookDelivery.next_attempt_at,
    leased=WebhookDelivery.leased_until,
    wakeup="events",
    partition=WebhookDelivery.event_created_at,
)


@dataclass(frozen=True, slots=True)
class Claimed:
    delivery_id: int
    company_id: uuid.UUID
    endpoint_id: uuid.UUID
    event_id: str
    url: str
    secrets: tuple[str, ...]
    body: bytes
    attempt_count: int
    until: datetime  # the lease's end: the attempt's record must still find it
    event_created_at: datetime  # its event's time, the key's last column


def _secrets(
    box: SecretBox, endpoint_id: uuid.UUID, endpoint: Any, now: datetime
) -> tuple[str, ...]:
    """The endpoint's secrets that sign now (its row's `secret` and, after a rotation,
    `previous_secret` until `previous_secret_until`), opened."""
    current = box.open(endpoint_id, endpoint.secret)
    if (
        endpoint.previous_secret
        and endpoint.previous_secret_until
        and (endpoint.previous_secret_until > now)
    ):
        return (current, box.open(endpoint_id, endpoint.previous_secret))
    return (current,)


def claim(
    db: Database, box: SecretBox, *, limit: int, per_endpoint: int, lease: timedelta
) -> list[Claimed]:
    """Lease due deliveries (`jobs.lease`; on PostgreSQL the same in two statements,
    `_lease_postgresql`): at most `limit`, and never more than `per_endpoint` of one
    endpoint being attempted at once across every process, so a slow receiver holds
    only its own slots. Each with its event's body and the endpoint's secrets."""
    now = utcnow()
    with db.read_connection() as connection:
        if not connection.scalar(
            select(
                exists().where(
                    WebhookDelivery.status == "pending", WebhookDelivery.next_attempt_at <= now
                )
            )
        ):
            return []
    with db.begin() as connection:
        if connection.dialect.name == "postgresql":
            picked, until, endpoints = _lease_postgresql(
                connection, now=now, duration=lease, limit=limit, per_endpoint=per_endpoint
            )
        else:
            picked, until = _lease(
                connection, now=now, duration=lease, limit=limit, per_endpoint=per_endpoint
            )
            endpoints = _endpoints(connection, {row.endpoint_id for row in picked})
        if not picked:
            return []
        return _claimed(connection, box, picked, endpoints, until=until, now=now)


def _lease(
    connection: Connection, *, now: datetime, duration: timedelta, limit: int, per_endpoint: int
) -> tuple[Sequence[Any], datetime]:
    """The lease through the job queue's own (`jobs.lease`): its rows and its end."""
    # endpoints whose slots are all taken, by any process
    full = (
        _attempting(now)
        .with_only_columns(WebhookDelivery.endpoint_id)
        .having(func.count() >= per_endpoint)
    )
    return jobs.lease(
        connection,
        DELIVERIES,
        now=now,
        duration=duration,
        limit=limit,
        columns=(
            WebhookDelivery.company_id,
            WebhookDelivery.endpoint_id,
            WebhookDelivery.event_seq,
            WebhookDelivery.event_created_at,
            WebhookDelivery.attempt_count,
        ),
        # `NOT IN`s, not a join: each stays a filter on the due-time index's scan,
        # which keeps its order, and the lease reads no more rows than it takes
        # (joined, every due delivery was read and sorted, 6 ms a lease at 14,000)
        where=(
            WebhookDelivery.endpoint_id.not_in(
                select(WebhookEndpoint.id).where(WebhookEndpoint.status != "enabled")
            ),
            WebhookDelivery.endpoint_id.not_in(full),
        ),
        pick=lambda c, rows: _within_slots(c, rows, per_endpoint=per_endpoint, now=now),
    )


def _lease_postgresql(
    connection: Connection, *, now: datetime, duration: timedelta, limit: int, per_endpoint: int
) -> tuple[Sequence[Any], datetime, dict[uuid.UUID, Any]]:
    """`_lease` on PostgreSQL in two statements through psycopg itself, with the leased
    deliveries' endpoints: the same rows locked in the same order (`jobs.lease`'s
    candidates, then their endpoints, as `_within_slots`), the slots counted after the
    locks are held (a statement's snapshot is taken as it begins), and the update
    answering what the attempts need of the endpoints. As six statements through
    SQLAlchemy, a claim took 14 ms of CPU a round of 66 deliveries."""
    until = now + duration
    candidates = driver_execute(
        connection,
        _CANDIDATES_SQL,
        {"now": now, "per_endpoint": per_endpoint, "candidates": limit * 4},
    )
    if not candidates:
        return [], until, {}
    rows = driver_execute(
        connection,
        _LEASE_SQL,
        {
            "ids": [row.id for row in candidates],
            "event_at": [row.event_created_at for row in candidates],
            "endpoint": [row.endpoint_id for row in candidates],
            "now": now,
            "until": until,
            "per_endpoint": per_endpoint,
            "limit": limit,
        },
    )
    return rows, until, {row.endpoint_id: row for row in rows}


# the due deliveries of enabled endpoints with free slots, oldest due first (as
# `jobs.lease` reads them, and four times the lease's limit: `_within_slots`), locked,
# of those whose endpoints this transaction could lock (`FOR NO KEY UPDATE SKIP LOCKED`,
# in id order, as `_within_slots`)
_CANDIDATES_SQL = """
WITH candidates AS (
    SELECT d.id, d.endpoint_id, d.event_created_at, d.next_attempt_at
    FROM webhook_deliveries AS d
    WHERE d.status = 'pending' AND d.next_attempt_at <= %(now)s
      AND d.endpoint_id NOT IN (SELECT id FROM webhook_endpoints WHERE status <> 'enabled')
      AND d.endpoint_id NOT IN (
          SELECT endpoint_id FROM webhook_deliveries WHERE leased_until > %(now)s
          GROUP BY endpoint_id HAVING count(*) >= %(per_endpoint)s)
    ORDER BY d.next_attempt_at
    LIMIT %(candidates)s
    FOR UPDATE OF d SKIP LOCKED
), mine AS (
    SELECT e.id FROM webhook_endpoints AS e
    WHERE e.id IN (SELECT endpoint_id FROM candidates)
    ORDER BY e.id
    FOR NO KEY UPDATE SKIP LOCKED
)
SELECT c.id, c.endpoint_id, c.event_created_at FROM candidates AS c
WHERE c.endpoint_id IN (SELECT id FROM mine)
ORDER BY c.next_attempt_at, c.id
"""

# the candidates that fit their endpoints' free slots, counted from the unexpired
# leases (read whole: `_within_slots`), leased; in the candidates' order, with their
# endpoints' columns an attempt needs
_LEASE_SQL = """
WITH given AS (
    SELECT * FROM unnest(%(ids)b::bigint[], %(event_at)b::timestamptz[], %(endpoint)b::uuid[])
        WITH ORDINALITY AS g(id, event_at, endpoint_id, position)
), taken AS (
    SELECT endpoint_id, count(*) AS n FROM webhook_deliveries
    WHERE leased_until > %(now)s GROUP BY endpoint_id
), picked AS (
    SELECT id, event_at, position FROM (
        SELECT g.*, coalesce(t.n, 0)
            + row_number() OVER (PARTITION BY g.endpoint_id ORDER BY g.position) AS slot
        FROM given AS g LEFT JOIN taken AS t USING (endpoint_id)
    ) AS ranked
    WHERE slot <= %(per_endpoint)s
    ORDER BY position
    LIMIT %(limit)s
), leased AS (
    UPDATE webhook_deliveries AS d
    SET next_attempt_at = %(until)s, leased_until = %(until)s
    FROM picked AS p
    WHERE d.id = p.id AND d.event_created_at = p.event_at
    RETURNING d.id, d.company_id, d.endpoint_id, d.event_seq, d.event_created_at,
        d.attempt_count, p.position
)
SELECT l.*, e.url, e.secret, e.previous_secret, e.previous_secret_until
FROM leased AS l JOIN webhook_endpoints AS e ON e.id = l.endpoint_id
ORDER BY l.position
"""


def _endpoints(connection: Connection, ids: set[uuid.UUID]) -> dict[uuid.UUID, Any]:
    """The endpoints' columns an attempt needs (the whole row parsed every endpoint's
    JSON types and took 12% of a claim's time), by id."""
    if not ids:
        return {}
    return {
        row.id: row
        for row in connection.execute(
            select(
                WebhookEndpoint.id,
                WebhookEndpoint.url,
                WebhookEndpoint.secret,
                WebhookEndpoint.previous_secret,
                WebhookEndpoint.previous_secret_until,
            ).where(WebhookEndpoint.id.in_(ids))
        )
    }


def _claimed(
    connection: Connection,
    box: SecretBox,
    picked: Sequence[Any],
    endpoints: dict[uuid.UUID, Any],
    *,
    until: datetime,
    now: datetime,
) -> list[Claimed]:
    """The leased deliveries, each with its event's body and its endpoint's URL and
    secrets (`endpoints`: their rows, by id), read in the lease's transaction."""
    # each endpoint's secrets opened once
    opened = {
        endpoint_id: (row.url, _secrets(box, endpoint_id, row, now))
        for endpoint_id, row in endpoints.items()
    }
    events = connection.execute(
        select(Event.__table__).where(
            Event.seq.in_({row.event_seq for row in picked}),
            # names the events' partitions (PostgreSQL): only theirs are read
            Event.created_at.in_({row.event_created_at for row in picked}),
        )
    ).all()
    bodies = {
        event.seq: orjson.dumps(json)
        for event, json in zip(events, render(connection, events), strict=True)
    }
    ids = {event.seq: str(event.id) for event in events}
    return [
        Claimed(
            delivery_id=row.id,
            company_id=row.company_id,
            endpoint_id=row.endpoint_id,
            event_id=ids[row.event_seq],
            url=opened[row.endpoint_id][0],
            secrets=opened[row.endpoint_id][1],
            body=bodies[row.event_seq],
            attempt_count=row.attempt_count,
            until=until,
            event_created_at=row.event_created_at,
        )
        for row in picked
    ]


def _attempting(now: datetime) -> Select[Any, Any]:
    """Each endpoint's deliveries being attempted at `now`, by any process: (endpoint,
    how many), from their unexpired leases (the entries of a partial index: few)."""
    return (
        select(WebhookDelivery.endpoint_id, func.count())
        .where(WebhookDelivery.leased_until > now)
        .group_by(WebhookDelivery.endpoint_id)
    )


def _within_slots(
    connection: Connection, candidates: Sequence[Any], *, per_endpoint: int, now: datetime
) -> list[Any]:
    """The candidates that fit their endpoints' free slots, oldest due first. Each
    endpoint's row is locked (`FOR NO KEY UPDATE SKIP LOCKED`: a new delivery's foreign
    key check does not wait) while its slots are counted and taken, so two processes
    never fill one endpoint's slots at once; an endpoint another process is leasing for
    now is left to it."""
    wanted = sorted({row.endpoint_id for row in candidates})
    mine = set(
        connection.execute(
            select(WebhookEndpoint.id)
            .where(WebhookEndpoint.id.in_(wanted))
            .order_by(WebhookEndpoint.id)
            .with_for_update(skip_locked=True, key_share=True)
        ).scalars()
    )
    # every endpoint's count, the few unexpired leases read whole: named in the query,
    # each endpoint was looked up in every day's partition's index (5 ms a lease of 128)
    taken: dict[uuid.UUID, int] = {
        endpoint_id: count
        for endpoint_id, count in connection.execute(_attempting(now))
        if endpoint_id in mine
    }
    picked = []
    for row in candidates:
        if row.endpoint_id in mine and taken.get(row.endpoint_id, 0) < per_endpoint:
            taken[row.endpoint_id] = taken.get(row.endpoint_id, 0) + 1
            picked.append(row)
    return picked


@dataclass(frozen=True, slots=True)
class Outcome:
    at: datetime
    duration_ms: int
    status_code: int | None = None
    error: str | None = None

    @property
    def delivered(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def next_delay(schedule: Sequence[float], attempts: int) -> float | None:
    """Seconds until the next attempt after `attempts` failed ones (with jitter); None
    once the schedule is spent."""
    if attempts > len(schedule):
        return None
    delay = schedule[attempts - 1]
    return delay * (1 + random.uniform(0, JITTER))  # noqa: S311 (spreading retries, not security)


@dataclass(frozen=True, slots=True)
class After:
    """A delivery after an attempt: what `record` answers for it (`state`: delivered,
    retry or failed) and its columns (`status`, `attempt_count`, `next_attempt_at`)."""

    state: str
    status: str
    attempt_count: int
    next_attempt_at: datetime | None = None


def _next(claimed: Claimed, outcome: Outcome, schedule: Sequence[float]) -> After:
    """The delivery after this attempt."""
    attempts = claimed.attempt_count + 1
    if outcome.delivered:
        return After("delivered", "delivered", attempts)
    delay = next_delay(schedule, attempts)
    if delay is None:
        return After("failed", "failed", attempts)
    return After("retry", DELIVERIES.pending, attempts, outcome.at + timedelta(seconds=delay))


_MOVE = (
    update(WebhookDelivery)
    .where(
        WebhookDelivery.id == bindparam("delivery"),
        # the partition's key (PostgreSQL): the update reads its day's partition alone
        WebhookDelivery.event_created_at == bindparam("b_event_at"),
    )
    .values(
        status=bindparam("b_status"),
        attempt_count=bindparam("b_count"),
        next_attempt_at=bindparam("b_next"),
        leased_until=None,
    )
)


def record(
    db: Database,
    done: Sequence[tuple[Claimed, Outcome]],
    *,
    schedule: Sequence[float],
    disable_after: timedelta,
) -> list[str]:
    """Store attempts and what follows each, in one database transaction: `delivered`,
    `retry` or `failed` for each; `gone` for a delivery removed meanwhile (its endpoint
    deleted), moved by another hand (a replay) or whose lease ran out (another worker
    may be attempting it)."""
    states = ["gone"] * len(done)
    following = [_next(claimed, outcome, schedule) for claimed, outcome in done]
    with db.begin() as connection:
        # the endpoints first, then their deliveries, as every writer of an endpoint
        # takes them (`lock_endpoints`): a delete, a replay or a status change running
        # now waits for this transaction, or this one for it, never each for the other
        failing = lock_endpoints(connection, {claimed.endpoint_id for claimed, _ in done})
        moved = _move(connection, done, following)
        succeeded: set[uuid.UUID] = set()
        failed: dict[uuid.UUID, datetime] = {}
        for k, ((claimed, outcome), after) in enumerate(zip(done, following, strict=True)):
            if claimed.delivery_id not in moved:
                continue
            states[k] = after.state
            if outcome.delivered:
                succeeded.add(claimed.endpoint_id)
            else:
                failed[claimed.endpoint_id] = min(
                    outcome.at, failed.get(claimed.endpoint_id, outcome.at)
                )
        # a success ends a failing spell (most often none was failing: no statement)
        if succeeded & failing:
            connection.execute(
                update(WebhookEndpoint)
                .where(WebhookEndpoint.id.in_(succeeded & failing))
                .values(failing_since=None)
            )
        for endpoint_id, at in sorted(failed.items()):
            if endpoint_id not in succeeded:
                _note_failure(connection, endpoint_id, at, disable_after)
    for (_, outcome), state in zip(done, states, strict=True):
        if state != "gone":
            metrics.ATTEMPTS.labels(state).inc()
            metrics.ATTEMPT_SECONDS.observe(outcome.duration_ms / 1000)
    return states


def _move(
    connection: Connection,
    done: Sequence[tuple[Claimed, Outcome]],
    following: Sequence[After],
) -> set[int]:
    """The deliveries whose leases still hold (a delete or replay that ran first ended
    the lease) moved to what follows their attempts, with an attempt's row each; their
    ids. The endpoints' rows are locked (`lock_endpoints`)."""
    if connection.dialect.name == "postgresql":
        rows = driver_execute(
            connection,
            _RECORD_SQL,
            {
                "ids": [claimed.delivery_id for claimed, _ in done],
                "event_at": [claimed.event_created_at for claimed, _ in done],
                "until": [claimed.until for claimed, _ in done],
                "status": [after.status for after in following],
                "count": [after.attempt_count for after in following],
                "next": [after.next_attempt_at for after in following],
                "company": [claimed.company_id for claimed, _ in done],
                "at": [outcome.at for _, outcome in done],
                "code": [outcome.status_code for _, outcome in done],
                "error": [_error(outcome) for _, outcome in done],
                "duration": [outcome.duration_ms for _, outcome in done],
                "pending": DELIVERIES.pending,
            },
        )
        return {row.id for row in rows}
    # the rows locked, in id order (`jobs.held`), then moved and their attempts written
    still = jobs.held(
        connection, DELIVERIES, [(claimed.delivery_id, claimed.until) for claimed, _ in done]
    )
    kept = [
        (claimed, outcome, after)
        for (claimed, outcome), after in zip(done, following, strict=True)
        if claimed.delivery_id in still
    ]
    if kept:
        connection.execute(
            _MOVE,
            [
                {
                    "delivery": claimed.delivery_id,
                    "b_event_at": claimed.event_created_at,
                    "b_status": after.status,
                    "b_count": after.attempt_count,
                    "b_next": after.next_attempt_at,
                }
                for claimed, _, after in kept
            ],
        )
        connection.execute(
            insert(WebhookAttempt),
            [
                {
                    "delivery_id": claimed.delivery_id,
                    "company_id": claimed.company_id,
                    "event_created_at": claimed.event_created_at,
                    "at": outcome.at,
                    "status_code": outcome.status_code,
                    "error": _error(outcome),
                    "duration_ms": outcome.duration_ms,
                }
                for claimed, outcome, _ in kept
            ],
        )
    return still


def _error(outcome: Outcome) -> str | None:
    return outcome.error[:500] if outcome.error else None


# PostgreSQL's record of many attempts, through psycopg itself: one statement moves the
# deliveries whose leases still hold (the condition of `jobs.held`) and writes an
# attempt's row for each, the values as binary arrays (as text, psycopg took 4 us to
# write each timestamp, 20 us a delivery). As `_MOVE` and an insert, each an
# execution a row on the partitioned tables, PostgreSQL took about 300 us a delivery.
# The endpoints are locked first, so the rows' order here cannot make two writers wait
# for each other: any two that touch one delivery wait on its endpoint first.
_RECORD_SQL = """
WITH given AS (
    SELECT * FROM unnest(
        %(ids)b::bigint[], %(event_at)b::timestamptz[], %(until)b::timestamptz[],
        %(status)b::text[], %(count)b::int[], %(next)b::timestamptz[],
        %(company)b::uuid[], %(at)b::timestamptz[], %(code)b::int[], %(error)b::text[],
        %(duration)b::int[]
    ) AS g(id, event_at, until, status, count, next, company_id, at, code, error, duration)
), moved AS (
    UPDATE webhook_deliveries AS d
    SET status = g.status, attempt_count = g.count, next_attempt_at = g.next,
        leased_until = NULL
    FROM given AS g
    WHERE d.id = g.id AND d.event_created_at = g.event_at
      AND d.status = %(pending)s AND d.leased_until = g.until
    RETURNING d.id
), tried AS (
    INSERT INTO webhook_attempts
        (delivery_id, company_id, event_created_at, at, status_code, error, duration_ms)
    SELECT g.id, g.company_id, g.event_at, g.at, g.code, g.error, g.duration
    FROM given AS g JOIN moved USING (id)
)
SELECT id FROM moved
"""


def lock_endpoints(connection: Connection, endpoint_ids: set[uuid.UUID]) -> set[uuid.UUID]:
    """Lock endpoints' rows (`FOR NO KEY UPDATE`, in id order) before their deliveries':
    the one order of every transaction that writes both (a record, a replay, a status
    change, a delete), so no two of them wait for each other round a loop. Those of them
    failing (`failing_since` set), as the locks found them."""
    if not endpoint_ids:
        return set()
    return {
        row.id
        for row in connection.execute(
            select(WebhookEndpoint.id, WebhookEndpoint.failing_since)
            .where(WebhookEndpoint.id.in_(sorted(endpoint_ids)))
            .order_by(WebhookEndpoint.id)
            .with_for_update(key_share=True)
        )
        if row.failing_since is not None
    }


# deliveries of an endpoint enabled again that its enabling itself looks at: the newest,
# through its unique index (the rest, if it has more, after it: `reschedule`)
ENABLED_AT_ONCE = 5000


def schedule(connection: Connection, endpoint_id: uuid.UUID, *, enabled: bool) -> None:
    """An endpoint's status changed (its row locked by the caller): its pending
    deliveries follow it a batch a transaction after this one (`reschedule`), so that a
    change holds no large write (as one statement here, 100,000 of them took 2-5 s, in
    the recorder's transaction for every company's outcomes when an endpoint failing for
    days was disabled). Disabled: they leave the schedule (no due time, so a claim
    never walks over them, however many wait); claims pass them by until then (`claim`
    takes enabled endpoints' alone). Enabled again: those among its newest
    `ENABLED_AT_ONCE` deliveries are due now, in this transaction, and the workers told;
    any older ones after it."""
    rest = True
    if enabled:
        oldest = connection.scalar(
            select(WebhookDelivery.event_seq)
            .where(WebhookDelivery.endpoint_id == endpoint_id)
            .order_by(WebhookDelivery.event_seq.desc())
            .offset(ENABLED_AT_ONCE)
            .limit(1)
        )
        rest = oldest is not None
        its = WebhookDelivery.endpoint_id == endpoint_id
        newest = its if oldest is None else and_(its, WebhookDelivery.event_seq > oldest)
        _follow(connection, newest, enabled=True)
    connection.execute(
        update(WebhookEndpoint).where(WebhookEndpoint.id == endpoint_id).values(rescheduling=rest)
    )


def _follow(connection: Connection, chosen: Any, *, enabled: bool) -> int:
    """The pending deliveries among those `chosen` made to follow their endpoint's
    status: enabled, those without a due time due now (and the workers told); disabled,
    those with one out of the schedule. How many moved."""
    due = WebhookDelivery.next_attempt_at
    moved = int(
        connection.execute(
            update(WebhookDelivery)
            .where(
                chosen,
                WebhookDelivery.status == "pending",
                due.is_(None) if enabled else due.is_not(None),
            )
            .values(next_attempt_at=utcnow_ms() if enabled else None)
        ).rowcount
    )
    if enabled and moved:
        wakeups.mark(connection, "events")  # the workers start them at once
    return moved


# deliveries a transaction of `reschedule` looks at
RESCHEDULE_BATCH = 5000


def reschedule(db: Database, *, batch: int = RESCHEDULE_BATCH) -> int:
    """Bring the pending deliveries of endpoints whose status changed (`schedule`) into
    line with it: a disabled one's out of the schedule, an enabled one's due now. Each
    endpoint's deliveries `batch` a short database transaction, in event order through
    its unique index, each transaction with the endpoint's row locked first (as every
    writer of both, `lock_endpoints`) and going on only while its status is the one
    the run began with; then its mark cleared. An endpoint whose status changed again
    meanwhile is left marked for the next run; stopped anywhere, the next run goes on.
    How many deliveries moved."""
    with db.read_connection() as connection:
        marked = connection.execute(
            select(WebhookEndpoint.id, WebhookEndpoint.status)
            .where(
                WebhookEndpoint.rescheduling.is_(True),
                WebhookEndpoint.status.in_(("enabled", "disabled")),
            )
            .order_by(WebhookEndpoint.id)
        ).all()
    moved = 0
    for endpoint_id, status in marked:
        batches = in_batches(
            db,
            WebhookDelivery.endpoint_id,
            endpoint_id,
            order=WebhookDelivery.event_seq,
            batch=batch,
        )
        # closed at once when left early: the step's transaction ends (rolled back)
        with contextlib.closing(batches):
            for connection, step in batches:
                if not _still(connection, endpoint_id, status):
                    break
                moved += _follow(connection, step, enabled=status == "enabled")
            else:
                with db.begin() as connection:
                    if _still(connection, endpoint_id, status):
                        connection.execute(
                            update(WebhookEndpoint)
                            .where(WebhookEndpoint.id == endpoint_id)
                            .values(rescheduling=False)
                        )
    return moved


def _still(connection: Connection, endpoint_id: uuid.UUID, status: str) -> bool:
    """Whether the endpoint has `status` and is marked still, its row locked."""
    return bool(
        connection.scalar(
            select(WebhookEndpoint.rescheduling)
            .where(WebhookEndpoint.id == endpoint_id, WebhookEndpoint.status == status)
            .with_for_update(key_share=True)
        )
    )


def _note_failure(
    connection: Connection, endpoint_id: uuid.UUID, at: datetime, disable_after: timedelta
) -> None:
    """The endpoint fails since its first failure after its last success; past
    `disable_after` of that it is disabled, and a `webhook_endpoint.disabled` event
    says so (in this database transaction)."""
    connection.execute(
        update(WebhookEndpoint)
        .where(WebhookEndpoint.id == endpoint_id, WebhookEndpoint.failing_since.is_(None))
        .values(failing_since=at)
    )
    now = utcnow_ms()
    disabled = connection.execute(
        update(WebhookEndpoint)
        .where(
            WebhookEndpoint.id == endpoint_id,
            WebhookEndpoint.status == "enabled",
            WebhookEndpoint.failing_since <= at - disable_after,
        )
        .values(status="disabled", updated_at=now)
        .returning(*WebhookEndpoint.__table__.c)
    ).one_or_none()
    if disabled is None:
        return
    schedule(connection, endpoint_id, enabled=False)
    days = disable_after.total_seconds() / 86400
    outbox.write(
        connection,
        [
            outbox.event(
                "webhook_endpoint.disabled",
                company_id=disabled.company_id,
                data=disabled_view(disabled, reason=f"every attempt failed for {days:g} days"),
            )
        ],
    )
    metrics.DISABLED.inc()
    log_.warning("webhook endpoint disabled", endpoint=str(endpoint_id))


def disabled_view(row: Any, *, reason: str) -> dict[str, Any]:
    """The `webhook_endpoint.disabled` event's data: the endpoint, never its secret."""
    return {
        "id": str(row.id),
        "url": row.url,
        "event_types": list(row.event_types),
        "description": row.description,
        "status": row.status,
        "created_at": iso_ms(row.created_at),
        "updated_at": iso_ms(row.updated_at),
        "reason": reason,
    }


def next_due_seconds(db: Database) -> float:
    """Seconds until the next pending delivery falls due (0: one is due; infinity: none
    is pending): an index probe."""
    with db.read_connection() as connection:
        due = connection.scalar(
            select(func.min(WebhookDelivery.next_attempt_at)).where(
                WebhookDelivery.status == "pending"
            )
        )
    if due is None:
        return float("inf")
    return max(0.0, (due - utcnow()).total_seconds())


def oldest_pending_seconds(db: Database) -> float:
    """Age of the oldest event whose delivery is pending (0 when none is)."""
    with db.read_connection() as connection:
        oldest = connection.scalar(
            select(func.min(WebhookDelivery.event_created_at)).where(
                WebhookDelivery.status == "pending"
            )
        )
    if oldest is None:
        return 0.0
    return max(0.0, (utcnow() - oldest).total_seconds())
