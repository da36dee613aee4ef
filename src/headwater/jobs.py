"""The one durable job queue: claim, lease, renew, hand back.

Two kinds of job share it. A long job (a file, an export: `Queue`) is claimed by one
worker and renews its lease at every step. A short job that falls due (a webhook
delivery, an email reply: `Due`) is leased for a fixed time, the longest its attempt can
take, as SQS's visibility timeout does.

Long jobs. A queue is a table of jobs with the same claim columns (`Queue`). A job is
`queued`, or `running` under a claim (`claimed_by`, and `claimed_at`, which is its
lease: the claimant renews it at each step, and a claim not renewed for `stale` is
taken over). `claim` takes the oldest job that is queued or whose claim went stale, in
a short database transaction (`FOR UPDATE SKIP LOCKED` on PostgreSQL, so two claimers
never hold one job and never wait for each other; SQLite's one writer on SQLite),
counts the attempt, and answers the row. A job past its attempts is handed to the
queue's `exhausted` instead (it fails for good). `renew` renews the claim in the
claimant's own transaction, answering whether it still holds it: a claimant that lost
its job to a takeover stops there. `release` queues a job again after a failed attempt,
or, handed back at shutdown, without counting the attempt.

Jobs that fall due. A job is `pending` and due at a time (`due`; None: not scheduled).
`lease` takes due jobs, oldest due first (`FOR UPDATE SKIP LOCKED`, or SQLite's
writer), and moves their due time to the lease's end, which `leased` keeps: no claimer
sees them due until then, and a claimant that dies leaves them due again when it ends.
The claimant writes the outcome (the next due time, or a final state) only if its lease
`holds`, clearing `leased`; `hand_back` makes a job due again at once. The attempt runs
with no database transaction open; a crash between the attempt and its record runs the
attempt once more (at least once).

Upkeep (PostgreSQL): the index a claim or a lease scans keeps the entries of finished,
leased or deleted jobs until a vacuum; `vacuum` runs one on a queue's table (or its
partition) once many rows died in it, as the scheduler asks (`worker.vacuum_queues`).

Every user runs the same contract (`tests/reliability/test_job_queue.py`). The seam for
a broker (Redis streams, RabbitMQ, SQS) is these three functions: a broker would
deliver the job's id with its own lease and redelivery, and the table would keep the
job's state and outcome, written with the job's change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, or_, select, text, update

from headwater import wakeups
from headwater.db import Database
from headwater.kit.clock import utcnow_ms


@dataclass(frozen=True, slots=True)
class Queue:
    """A table of jobs, as the queue sees it: its model (with the columns `id`,
    `claimed_by`, `claimed_at`, `attempts` and `created_at`, the order: oldest first),
    and its state column with the values it takes while queued and running; `wakeup`,
    the topic that wakes its workers when a job is queued again (`wakeups`)."""

    model: Any
    state: Any
    queued: str
    running: str
    wakeup: wakeups.Topic | None = None

    @property
    def id(self) -> Any:
        return self.model.id

    @property
    def claimed_by(self) -> Any:
        return self.model.claimed_by

    @property
    def claimed_at(self) -> Any:
        return self.model.claimed_at

    @property
    def attempts(self) -> Any:
        return self.model.attempts

    @property
    def order(self) -> Any:
        return self.model.created_at


# What to do with a job past its attempts: (connection, its row, now), in the claim's
# transaction.
Exhausted = Callable[[Connection, Any, datetime], None]


def claim(
    db: Database,
    queue: Queue,
    *,
    worker: str,
    stale: timedelta,
    max_attempts: int,
    exhausted: Exhausted,
    where: Callable[[datetime], Sequence[Any]] | None = None,
    columns: Sequence[Any] = (),
    join: tuple[Any, Any] | None = None,
    values: dict[str, Callable[[datetime], Any]] | None = None,
    claimed: Callable[[Connection, Any, datetime], None] | None = None,
) -> Any | None:
    """Claim the oldest job that is queued, or running under a claim gone stale, among
        those `where(now)` selects: its row (`id`, `attempts` and `columns`), or None when there
        is none. The claim sets each of `values`' columns too (to its function of the claim's
    time), and `claimed` runs in its transaction."""
    while True:
        now = utcnow_ms()
        with db.begin() as connection:
            statement = select(queue.id, queue.attempts, *columns)
            if join is not None:
                statement = statement.join(*join)
            row = connection.execute(
                statement.where(
                    or_(
                        queue.state == queue.queued,
                        and_(queue.state == queue.running, queue.claimed_at < now - stale),
                    ),
                    *(where(now) if where is not None else ()),
                )
                .order_by(queue.order)
                .limit(1)
                .with_for_update(skip_locked=True, of=queue.model)
            ).one_or_none()
            if row is None:
                return None
            if row.attempts >= max_attempts:
                exhausted(connection, row, now)
                continue
            connection.execute(
                update(queue.model)
                .where(queue.id == row.id)
                .values(
                    {
                        queue.state: queue.running,
                        queue.claimed_by: worker,
                        queue.claimed_at: now,
                        queue.attempts: row.attempts + 1,
                    }
                    | {getattr(queue.model, k): v(now) for k, v in (values or {}).items()}
                )
            )
            if claimed is not None:
                claimed(connection, row, now)
            return row


def renew(connection: Connection, queue: Queue, job_id: Any, *, worker: str) -> bool:
    """Whether the job is still `worker`'s, renewing its claim and locking its row until
    the caller's commit (a claimer taking it over waits for that commit, then finds the
    claim renewed)."""
    renewed = connection.execute(
        update(queue.model)
        .where(queue.id == job_id, queue.claimed_by == worker, queue.state == queue.running)
        .values({queue.claimed_at: utcnow_ms()})
    )
    return bool(renewed.rowcount)


def release(
    db: Database, queue: Queue, job_id: Any, *, worker: str, handed_back: bool = False
) -> None:
    """After a failed attempt: queue the job again at once (the attempt counted).
    `handed_back`: the process is stopping, and this attempt does not count."""
    values: dict[Any, Any] = {queue.state: queue.queued, queue.claimed_by: None}
    if handed_back:
        values[queue.attempts] = queue.attempts - 1
    with db.begin() as connection:
        connection.execute(
            update(queue.model)
            .where(queue.id == job_id, queue.claimed_by == worker, queue.state == queue.running)
            .values(values)
        )
        if queue.wakeup is not None:
            wakeups.mark(connection, queue.wakeup)


@dataclass(frozen=True, slots=True)
class Due:
    """A table of jobs that fall due, as the queue sees it: its model (with an `id`), its
    state column and the value of a job still to do (`pending`), the column of its due
    time (`due`) and of the end of the lease its attempt runs under (`leased`, else
    None); `wakeup`, the topic that wakes its workers when jobs are due again at once;
    `partition`, the column PostgreSQL partitions the table by, if it does (a lease's
    update names its jobs' range of it, so that only their partitions are read: without
    it, each id was looked up in every day's partition, 90 us a webhook delivery)."""

    model: Any
    state: Any
    pending: str
    due: Any
    leased: Any
    wakeup: wakeups.Topic | None = None
    partition: Any = None


# The jobs a lease takes from the due candidates (connection, the candidates: at most
# four times the limit, locked), in the lease's transaction.
Pick = Callable[[Connection, Sequence[Any]], Sequence[Any]]


def lease(
    connection: Connection,
    queue: Due,
    *,
    now: datetime,
    duration: timedelta,
    limit: int,
    columns: Sequence[Any] = (),
    where: Sequence[Any] = (),
    pick: Pick | None = None,
) -> tuple[Sequence[Any], datetime]:
    """Lease up to `limit` jobs due at `now` among those `where` selects (oldest due
    first; `pick` chooses among them, when given): their rows (`id` and `columns`), and
    the lease's end, in the caller's short database transaction."""
    if queue.partition is not None and queue.partition not in columns:
        columns = (*columns, queue.partition)
    statement = select(queue.model.id, *columns)
    rows: Sequence[Any] = connection.execute(
        statement.where(queue.state == queue.pending, queue.due <= now, *where)
        .order_by(queue.due)
        .limit(limit if pick is None else limit * 4)
        .with_for_update(skip_locked=True, of=queue.model)
    ).all()
    if pick is not None:
        rows = pick(connection, rows)[:limit]
    until = now + duration
    if rows:
        chosen = queue.model.id.in_([row.id for row in rows])
        if queue.partition is not None:
            keys = [getattr(row, queue.partition.key) for row in rows]
            chosen = and_(chosen, queue.partition.between(min(keys), max(keys)))
        connection.execute(
            update(queue.model).where(chosen).values({queue.due: until, queue.leased: until})
        )
    return rows, until


def _still_leased(queue: Due, ids: Sequence[Any], until: datetime) -> Any:
    """The condition the jobs `ids`, leased until `until`, are still under that lease."""
    return and_(queue.model.id.in_(ids), queue.state == queue.pending, queue.leased == until)


def _by_lease(leases: Sequence[tuple[Any, datetime]]) -> list[tuple[datetime, list[Any]]]:
    """(job, lease's end) pairs grouped by the lease's end, in order."""
    grouped: dict[datetime, list[Any]] = {}
    for job_id, until in leases:
        grouped.setdefault(until, []).append(job_id)
    return sorted(grouped.items())


def held(connection: Connection, queue: Due, leases: Sequence[tuple[Any, datetime]]) -> set[Any]:
    """Which of the jobs (each with its lease's end) are still under that lease, their
    rows locked until the caller's commit (the caller then writes each outcome, clearing
    `leased`); in id order, so two callers never wait for each other round a loop."""
    found: set[Any] = set()
    for until, ids in _by_lease(leases):
        found.update(
            connection.execute(
                select(queue.model.id)
                .where(_still_leased(queue, ids, until))
                .order_by(queue.model.id)
                .with_for_update()
            ).scalars()
        )
    return found


def holds(connection: Connection, queue: Due, job_id: Any, until: datetime) -> bool:
    """Whether the lease ending `until` on the job still holds (`held`, for one job)."""
    return job_id in held(connection, queue, [(job_id, until)])


def hand_back(db: Database, queue: Due, leases: Sequence[tuple[Any, datetime]]) -> None:
    """Jobs (with their leases' ends) this process will not attempt after all, as it
    stops: due again at once, for any worker."""
    if not leases:
        return
    now = utcnow_ms()
    with db.begin() as connection:
        for until, ids in _by_lease(leases):
            connection.execute(
                update(queue.model)
                .where(_still_leased(queue, ids, until))
                .values({queue.due: now, queue.leased: None})
            )
        if queue.wakeup is not None:
            wakeups.mark(connection, queue.wakeup)


# --- upkeep -----------------------------------------------------------------------------------

# rows dead since a queue table's last vacuum (in it, or in one of its partitions) that
# make it due for one: so many, and a fiftieth of its live rows (a vacuum reads every
# index of the table whole). A claim or a lease scans its state or due-time index from
# the oldest end, where the entries of jobs done, leased again or deleted lie until a
# vacuum removes them; autovacuum's own trigger, a fifth of the table, lets millions lie.
VACUUM_DEAD_ROWS = 10_000
VACUUM_DEAD_SHARE = 0.02

_DEAD = text(
    "SELECT format('%I.%I', s.schemaname, s.relname) AS name, s.n_dead_tup AS dead"
    " FROM pg_stat_user_tables s"
    " WHERE s.n_dead_tup >= greatest(:dead, s.n_live_tup * :share)"
    " AND (s.relname = ANY(:tables) OR s.relid IN ("
    "  SELECT i.inhrelid FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent"
    "  WHERE p.relname = ANY(:tables)))"
    " ORDER BY s.n_dead_tup DESC"
)


def vacuum(
    db: Database,
    queues: Sequence[Queue | Due],
    *,
    dead: int = VACUUM_DEAD_ROWS,
    share: float = VACUUM_DEAD_SHARE,
) -> list[tuple[str, int]]:
    """PostgreSQL: VACUUM each queue's table, or partition of one, holding `dead` rows
    and `share` of its live rows or more that died since its last vacuum (as the
    server's statistics count them), one at a time, its indexes cleaned whatever the
    count, and ANALYZE it (a server without autovacuum never would: a record of 128
    deliveries was planned for a table never analysed, as a hash join over every
    pending delivery); the tables vacuumed, with their dead rows. Without the vacuum,
    after one company's endpoints were deleted with 850,000 deliveries, another
    company's deliveries arrived 4.6 s (p99) after their events instead of 0.25 s on a
    server running without autovacuum, as they would until autovacuum's next round on
    one running it. A vacuum takes no lock that stops reads or writes; one the service
    may not run (another role owns the table) is skipped with the server's warning.
    SQLite reuses a deleted row's space at once: nothing to do."""
    if db.engine.dialect.name != "postgresql":
        return []
    tables = sorted({queue.model.__tablename__ for queue in queues})
    with db.begin() as connection:  # the primary's statistics, not a replica's
        due = connection.execute(_DEAD, {"dead": dead, "share": share, "tables": tables}).all()
    for name, _ in due:
        with db.atomic() as connection:  # autocommit: VACUUM runs outside a transaction
            connection.exec_driver_sql(f"VACUUM (INDEX_CLEANUP ON, ANALYZE) {name}")
    return [(name, int(count)) for name, count in due]
