"""Time partitions of the event log and its deliveries (PostgreSQL, contract 19).

`events`, `webhook_deliveries` and `webhook_attempts` are partitioned by range of their
event's time (`events.created_at`, and the `event_created_at` a delivery and an attempt
copy from it), a partition a UTC day, so that one day's events, their deliveries and
their attempts lie in partitions of the same day. Retention drops a day whole: attempts,
deliveries, then events (their foreign keys point that way), after moving each
company's feed horizon past the events it drops (`events.log.forget`). A periodic job
(`worker.make_partitions`) makes the partitions `DAYS_AHEAD` days ahead; a row whose day
has none lands in the table's default partition, which retention empties row by row.

SQLite keeps plain tables: nothing here runs there.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

from headwater.events import log

# children first: the order a day is dropped in (each one's foreign key points to the next)
TABLES = ("webhook_attempts", "webhook_deliveries", "events")
DAYS_AHEAD = 7
_PREFIX = "_p"


def name(table: str, day: date) -> str:
    return f"{table}{_PREFIX}{day:%Y%m%d}"


def _bound(day: date) -> str:
    return f"{day:%Y-%m-%d} 00:00:00+00"


def partitioned(connection: Connection) -> bool:
    """Whether this database partitions the event log (PostgreSQL)."""
    if connection.dialect.name != "postgresql":
        return False
    return bool(
        connection.scalar(
            text(
                "SELECT EXISTS (SELECT FROM pg_partitioned_table"
                " WHERE partrelid = 'events'::regclass)"
            )
        )
    )


def days(connection: Connection, table: str = "events") -> list[date]:
    """The days `table` has a partition of, in order (not its default partition)."""
    names = connection.scalars(
        text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = CAST(:table AS regclass)"
        ),
        {"table": table},
    )
    prefix = table + _PREFIX
    return sorted(
        datetime.strptime(found[len(prefix) :], "%Y%m%d").date()
        for found in names
        if found.startswith(prefix)
    )


def make(connection: Connection, through: date) -> tuple[list[date], list[date]]:
    """The partitions of every day after the last one made through `through` (from
    today, `DAYS_AHEAD` before `through`, if there is none), for each table: (the days
    made, the days left to the default partition because rows of theirs reached it
    first, where they stay)."""
    made, left = [], []
    existing = days(connection)
    day = existing[-1] + timedelta(days=1) if existing else through - timedelta(days=DAYS_AHEAD)
    while day <= through:
        try:
            with connection.begin_nested():
                make_day(connection, day)
            made.append(day)
        except DBAPIError:
            left.append(day)
        day += timedelta(days=1)
    return made, left


def make_day(connection: Connection, day: date) -> None:
    """The day's partition of each table, parents first (each child's foreign key finds
    its parent's)."""
    bounds = f"FROM ('{_bound(day)}') TO ('{_bound(day + timedelta(days=1))}')"
    for table in reversed(TABLES):
        connection.exec_driver_sql(
            f"CREATE TABLE IF NOT EXISTS {name(table, day)} PARTITION OF {table}"
            f" FOR VALUES {bounds}"
        )


def drop_before(connection: Connection, cutoff: datetime) -> tuple[list[date], int]:
    """Drop every day that ends at or before `cutoff`, each whole (its events,
    deliveries and attempts): (the days dropped, how many events they held). The
    caller's transaction holds the tables' locks until it commits: keep it short."""
    dropped, events = [], 0
    for day in days(connection):
        if datetime.combine(day + timedelta(days=1), time(), tzinfo=cutoff.tzinfo) > cutoff:
            break
        events += log.forget(connection, name("events", day))
        drop_day(connection, day)
        dropped.append(day)
    return dropped, events


def drop_day(connection: Connection, day: date) -> None:
    """The day's partition of each table, children first; detached before it is dropped
    (a foreign key to a partitioned table holds on to each partition until then)."""
    for table in TABLES:
        partition = name(table, day)
        connection.exec_driver_sql(f"ALTER TABLE {table} DETACH PARTITION {partition}")
        connection.exec_driver_sql(f"DROP TABLE {partition}")
