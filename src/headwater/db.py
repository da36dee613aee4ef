"""Declarative base, portable column types, engine and session factories."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import orjson
from sqlalchemy import (
    JSON,
    ColumnElement,
    Connection,
    DateTime,
    Engine,
    MetaData,
    and_,
    bindparam,
    create_engine,
    delete,
    event,
    select,
    text,
    update,
)
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Dialect, make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker
from sqlalchemy.types import TypeDecorator, TypeEngine

from headwater.config import Settings
from headwater.kit import sealing
from headwater.kit.turns import Turns
from headwater.wakeups import Announcer

if TYPE_CHECKING:
    import psycopg

# psycopg is imported where it is used: SQLite processes (and CLI commands) never load it.

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class JSONDocument(TypeDecorator[Any]):
    """JSON on SQLite, JSONB on PostgreSQL. PostgreSQL's dialect is imported where it is
    used: SQLite processes (an operator command's 0.5 s) skip its 35 ms."""

    impl = JSON
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import JSONB

            return dialect.type_descriptor(JSONB())
        return dialect.type_descriptor(JSON())


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend (SQLite stores it naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def core_connection(connection: Connection | Session) -> Connection:
    """The Core connection of a caller's database transaction, given it or a session:
    for use cases shared by a Core path and a unit of work."""
    return connection.connection() if isinstance(connection, Session) else connection


def dialect_insert(dialect: Dialect | str) -> Callable[..., Any]:
    """The dialect's (or the dialect named's) own INSERT, with ON CONFLICT (PostgreSQL's
    or SQLite's)."""
    if (dialect if isinstance(dialect, str) else dialect.name) == "postgresql":
        from sqlalchemy.dialects.postgresql import insert

        return insert
    return sqlite.insert


@contextmanager
def unless_writer_busy() -> Iterator[None]:
    """A write that may wait for a later call: skipped, not failed, when SQLite's one
    writer is busy (a file's long transaction holds it). The feeds number what has
    committed this way: what is not numbered now is numbered on a later page, and a
    cursor never passes it."""
    try:
        yield
    except OperationalError as exc:
        if "locked" not in str(exc):
            raise


def locked_head(connection: Connection, column: Any, key: Any, *, company_id: Any = None) -> int:
    """The counter row of `column`'s table for `key` (the row is made at 0 if missing,
    with `company_id`, a value or SQL, where the key is not the company itself), locked
    until the caller's commit: its `pos`. Whoever holds the lock is the one process
    numbering that key's log (`events.log`, `ingestion.feed`)."""
    table = column.class_
    row = {column.key: key, "pos": 0}
    if company_id is not None:
        row["company_id"] = company_id
    connection.execute(
        dialect_insert(connection.dialect)(table)
        .values(row)
        .on_conflict_do_nothing(index_elements=[c.name for c in table.__table__.primary_key])
    )
    return int(
        connection.execute(select(table.pos).where(column == key).with_for_update()).scalar_one()
    )


def transaction_lock(session: Session, lock: int) -> None:
    """Run the rest of the caller's transaction in one process at a time, across every
    process on this database. PostgreSQL: a transaction-level advisory lock named by
    `lock`, released at commit or rollback (a session lock would outlive the
    transaction on a pooler's shared connection, contract 19). SQLite: nothing to do,
    as its write transactions already run one at a time (BEGIN IMMEDIATE)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text(f"SELECT pg_advisory_xact_lock({int(lock)})"))


class Numbering:
    """Positions given after commit, the one way both logs number their rows (the event
    log by company, the record feed by dataset): the key's oldest committed rows without
    a position get the next ones, in one statement, while the key's head row is locked
    (`locked_head`), so one numbering of a key runs at a time. Every position a
    numbering gives becomes visible at its commit, and any later one is given by a later
    numbering: a reader that sees position n sees every position below it.

    `head_key`: the head table's key column; `table`, `id`, `position`: the numbered
    table, its key's column (or columns: a partitioned table's partition key too, so
    each row's update reads one partition) and its position column; `scope`: its column holding the
    key; `unnumbered`: SQL of the rows waiting (committed, without a position); `order`:
    the order they are given positions in; `company_of`: the company of a key that is
    not one (SQL), for a head row made new. All are constants of ours, never input.
    """

    def __init__(
        self,
        *,
        head_key: Any,
        table: str,
        id: str | tuple[str, ...],
        position: str,
        scope: str,
        unnumbered: str,
        order: str,
        key_type: Any,
        company_of: Callable[[Any], Any] | None = None,
    ) -> None:
        self.head_key = head_key
        self.company_of = company_of
        ids = (id,) if isinstance(id, str) else id
        self.statement = text(
            f"""
            UPDATE {table} SET {position} = :head + todo.n
            FROM (
                SELECT {", ".join(ids)}, row_number() OVER (ORDER BY {order}) AS n
                FROM {table} WHERE {scope} = :key AND {unnumbered}
                ORDER BY {order} LIMIT :limit
            ) AS todo
            WHERE {" AND ".join(f"{table}.{column} = todo.{column}" for column in ids)}
            """  # noqa: S608 (constants of ours)
        ).bindparams(bindparam("key", type_=key_type))

    def give(self, connection: Connection, key: Any, *, limit: int) -> tuple[int, int]:
        """Number the key's oldest waiting rows (at most `limit`): (the head before,
        how many were given), in the caller's transaction."""
        company = self.company_of(key) if self.company_of else None
        head = locked_head(connection, self.head_key, key, company_id=company)
        given = int(
            connection.execute(self.statement, {"head": head, "key": key, "limit": limit}).rowcount
        )
        if given:
            table = self.head_key.class_
            connection.execute(update(table).where(self.head_key == key).values(pos=head + given))
        return head, given


def in_batches(
    db: Database, key: Any, value: Any, *, order: Any, batch: int
) -> Generator[tuple[Connection, ColumnElement[bool]], None, None]:
    """The rows whose `key` column holds `value`, `batch` rows (the first by the `order`
    column) a short transaction of its own: each step yields its connection, in that
    transaction, and the condition that picks the step's rows, for the caller's write.
    Needs an index on (`key`, `order`). Close it (`contextlib.closing`) where the
    caller's write may fail: the step's transaction ends then, not when it is collected.

    Each step is a range, from where the last ended to the `batch`-th row's `order`:
    two index range scans whatever the planner believes, over no dead entries. (A
    `seq IN (SELECT ... LIMIT n)` form, planned from stale statistics, scanned every
    row of the key at each step: a 300,000-row discard outlasted a test's 120 s.)"""
    left = key == value  # and, after the first step, `order` past the last range
    while True:
        with db.begin() as connection:
            last = connection.execute(
                select(order).where(left).order_by(order).offset(batch - 1).limit(1)
            ).scalar()
            yield connection, left if last is None else and_(left, order <= last)
        if last is None:
            return
        left = and_(key == value, order > last)


def delete_in_batches(db: Database, key: Any, value: Any, *, order: Any, batch: int) -> int:
    """Delete the rows whose `key` column holds `value`, `batch` rows a short transaction
    of its own (`in_batches`), so that no transaction holds a large delete; how many."""
    batches = in_batches(db, key, value, order=order, batch=batch)
    with contextlib.closing(batches):  # a delete that fails ends its step's transaction now
        return sum(
            int(connection.execute(delete(key.class_).where(step)).rowcount)
            for connection, step in batches
        )


def driver_execute(connection: Connection, statement: str, params: Mapping[str, Any]) -> list[Any]:
    """Run `statement` (psycopg's `%(name)s` parameters) on the PostgreSQL connection's
    psycopg connection itself; its rows, as named tuples.

    For the hottest write path only: SQLAlchemy's statement layer costs about 0.08 ms a
    statement, more than PostgreSQL takes to run these. It runs in the connection's
    transaction (or in autocommit, `Database.atomic`). psycopg's errors are raised as
    SQLAlchemy's, as for any statement: a lost database is told apart (503), and a
    connection that broke is dropped from the pool.
    """
    driver = connection.connection.driver_connection
    import psycopg
    from psycopg.rows import namedtuple_row

    assert isinstance(driver, psycopg.Connection)
    try:
        with driver.cursor(row_factory=namedtuple_row) as cursor:
            cursor.execute(statement, params)
            return cursor.fetchall() if cursor.description else []
    except psycopg.Error as exc:
        if driver.closed:
            connection.invalidate()
        raise as_sqlalchemy_error(exc, broken=driver.closed, statement=statement) from exc


def pg_text(statement: Any) -> str:
    """A SQLAlchemy statement as text for psycopg itself (PostgreSQL, `%(name)s`
    parameters), compiled once by the caller: for `driver_execute` and `loop_read`."""
    from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

    return str(statement.compile(dialect=PGDialect_psycopg()))  # type: ignore[no-untyped-call]


def as_sqlalchemy_error(
    exc: psycopg.Error, *, broken: bool, statement: str | None = None
) -> BaseException:
    """psycopg's error as SQLAlchemy would have raised it (IntegrityError,
    OperationalError, ...), for code that talks to psycopg itself: `is_unreachable` and
    the 503 answer then see it as any other. `broken`: the connection is lost. Parameters
    are never kept (records' contents stay out of logs)."""
    import psycopg

    return DBAPIError.instance(
        statement, None, exc, psycopg.Error, hide_parameters=True, connection_invalidated=broken
    )


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


# SQLite copies the write-ahead log into the database (a checkpoint) once the log holds
# this many pages (its default: 1,000, 4 MB). A batch of records with a subject digest
# dirties a leaf of that random-key index for nearly every record, so at the default
# nearly every commit checkpointed, writing each of those pages again: 63-74 us a record
# against 19-22 us at 10,000 pages (a 500,000-row table, 500-row commits). The log is
# cut back to `_SQLITE_WAL_LIMIT` bytes after each checkpoint.
_SQLITE_CHECKPOINT_PAGES = 10_000
_SQLITE_WAL_LIMIT = 64 * 1024 * 1024


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # We emit BEGIN ourselves (below), so the driver must not.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute(f"PRAGMA wal_autocheckpoint={_SQLITE_CHECKPOINT_PAGES}")
    cursor.execute(f"PRAGMA journal_size_limit={_SQLITE_WAL_LIMIT}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.close()


def _sqlite_begin_immediate(turns: Turns) -> Callable[[Connection], None]:
    """Take SQLite's write lock when a transaction starts, not at its first write.

    A deferred transaction that reads and then writes fails at once with "database is
    locked" when another writer got in between; an immediate one waits (busy_timeout).
    SQLite has one writer at a time in any case. While it waits, it says so (`turns`),
    so that a writer committing batch after batch lets it in (`Database.give_way`).
    """

    def begin(connection: Connection) -> None:
        with turns.waiting():
            connection.exec_driver_sql("BEGIN IMMEDIATE")

    return begin


def sqlite_turns(engine: Engine) -> Turns | None:
    """The turns at an SQLite database file's write lock (None for PostgreSQL, or an
    SQLite database in memory)."""
    path = engine.url.database
    if engine.dialect.name != "sqlite" or not path or path == ":memory:":
        return None
    return Turns(Path(path + "-turns"))


def _sqlite_begin_deferred(connection: Connection) -> None:
    """Reads take no lock: in WAL mode they see the last commit while a writer works."""
    connection.exec_driver_sql("BEGIN")


# The connections a process may hold to PostgreSQL at most, by role, unless
# HEADWATER_DB_CONNECTIONS says otherwise: an API process (`serve`, each of its
# `--workers`, with the background jobs it runs) and any other (`worker`, `sftp`,
# `smtp`, a CLI command). Ten API processes and ten others stay within 300.
Role = Literal["api", "other"]
ROLE_CONNECTIONS: dict[Role, int] = {"api": 20, "other": 10}


@dataclass(frozen=True)
class Shares:
    """How a process's connections to PostgreSQL are shared out: `writes` and `reads` for
    its two engines, `loop_reads` for `Database.loop_read`, and `push_writers` for the
    push groups' writers on the event loop (`ingestion.groups`). Only an API process
    reads on the loop and writes push groups."""

    writes: int
    reads: int
    loop_reads: int
    push_writers: int

    @classmethod
    def of(cls, total: int, *, api: bool) -> Shares:
        """`total` connections shared out; at 20 for an API process: 9 for writes, 5 for
        reads, 4 for loop reads and 2 for push groups; at 10 for any other: 7 and 3."""
        loop_reads, push_writers = (max(1, total // 5), 2) if api else (0, 0)
        left = total - loop_reads - push_writers
        reads = max(1, round(left / 3))
        return cls(left - reads, reads, loop_reads, push_writers)

    @property
    def total(self) -> int:
        return self.writes + self.reads + self.loop_reads + self.push_writers


def make_engine(
    settings: Settings,
    *,
    for_reads: bool = False,
    connections: int = 10,
    name: str = "headwater",
    url: str | None = None,
) -> Engine:
    """The engine; `for_reads` gives one of its own to reads that change nothing.
    `connections`: PostgreSQL connections it holds at most, each opened when first
    needed and then kept for the next use (under load, a connection closed when
    returned was only opened again at once, at a few milliseconds each);
    `name`: their `application_name` (with the process id), as `pg_stat_activity` shows;
    `url`: another database than the settings' (a replica).

    SQLite: its read transactions do not take the write lock, so reads never wait for
    its one writer (a long file, say). PostgreSQL: autocommit (no BEGIN and ROLLBACK round
    trips) and every query planned for its values. psycopg prepares a statement run 5
    times on a connection, and PostgreSQL may then plan it once for any values; a search's
    best index depends on its values (a filter that matches a few rows, or most), and such
    a generic plan chose a slow one. Planning costs about 0.1 ms, which the few simple
    statements of writes need not pay, so only reads do.
    """
    url = url or settings.sqlalchemy_url
    if url.startswith("sqlite"):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False}, pool_size=8)
        event.listen(engine, "connect", _sqlite_pragmas)
        turns = sqlite_turns(engine)
        if for_reads:
            event.listen(engine, "begin", _sqlite_begin_deferred)
        elif turns is None:
            event.listen(engine, "begin", lambda c: c.exec_driver_sql("BEGIN IMMEDIATE"))
        else:
            event.listen(engine, "begin", _sqlite_begin_immediate(turns))
        return engine
    connect_args: dict[str, Any] = {"connect_timeout": settings.db_connect_timeout_seconds}
    connect_args |= pooled_params(settings.database_pooling, for_reads=for_reads)
    reads: dict[str, Any] = {}
    if for_reads:
        reads["isolation_level"] = "AUTOCOMMIT"
    engine = create_engine(
        url,
        # Off by default: a ping per checkout is one more round trip on every request. Without
        # it, the first query on a connection the server dropped fails (503, Retry-After)
        # and SQLAlchemy then discards the whole pool; connections are also recycled.
        pool_pre_ping=settings.db_pre_ping,
        pool_recycle=1800,
        pool_size=connections,
        max_overflow=0,
        pool_timeout=settings.db_connect_timeout_seconds,
        connect_args=connect_args,
        **reads,
        # JSONB read back (activity states, dataset options) parsed at C speed
        json_deserializer=orjson.loads,
    )
    timeout = settings.db_connect_timeout_seconds

    def connect(dialect: Dialect, _record: Any, cargs: Any, cparams: Any) -> Any:
        cparams["application_name"] = application_name(name)
        return patient(lambda: dialect.connect(*cargs, **cparams), timeout)

    event.listen(engine, "do_connect", connect)
    return engine


# The server refuses a connection while its slots are taken (`max_connections`, or a
# role's or a database's limit; PgBouncer's `max_client_conn`); libpq gives no SQLSTATE
# for it, only its message.
_SLOTS_TAKEN = (
    "too many clients",
    "too many connections",
    "remaining connection slots are reserved",
    "no more connections allowed",
)
# The first pause before connecting again, and the longest
_PAUSE, _MAX_PAUSE = 0.05, 0.5


def application_name(name: str) -> str:
    """A connection's `application_name`: what holds it, and the process (its id), so
    that `pg_stat_activity` tells an operator which process holds how many."""
    return f"{name} {os.getpid()}"


def _slots_taken(exc: Exception) -> bool:
    return any(message in str(exc) for message in _SLOTS_TAKEN)


def _pauses(deadline: float) -> Iterator[float]:
    """The pauses between tries to connect while the server's slots are all taken: from
    `_PAUSE`, doubling up to `_MAX_PAUSE`, while one ends before `deadline` (a
    `time.monotonic()`)."""
    pause = _PAUSE
    while time.monotonic() + pause <= deadline:
        yield pause
        pause = min(pause * 2, _MAX_PAUSE)


def patient(connect: Callable[[], T], timeout: float) -> T:
    """`connect()`, tried again while the server's connection slots are all taken, for up
    to `timeout` seconds in all: a request waits for a slot (as it waits for one of the
    pool's) rather than fail at once; past that, the server's refusal is raised."""
    pauses = _pauses(time.monotonic() + timeout)
    while True:
        try:
            return connect()
        except Exception as exc:
            pause = next(pauses, None) if _slots_taken(exc) else None
            if pause is None:
                raise
        time.sleep(pause)


T = TypeVar("T")
# How often a read that waits for the replica to catch up looks again (`caught_up`),
# and for how long, before it reads the database instead
REPLICA_LOOK = 0.005
REPLICA_WAIT = 1.0
# How long, once the replica failed to catch up within REPLICA_WAIT, such reads go to the
# database without waiting for it
REPLICA_BEHIND = 5.0
# How long a feed's reader waits for the numbering it asked for (`Numbering`); past it,
# its page holds what has a place, and the rest comes on a later page
NUMBERING_WAIT = 10.0

# Reads: every run planned for its values (see make_engine)
CUSTOM_READS = "-c plan_cache_mode=force_custom_plan"
# Reads whose best plan is a range of one index, whatever the values (`loop_read`'s
# `generic`): planned once, as an index range scan and lookups by key. The plan made once
# knows no values, its page size included, and the planner then guesses that a tenth of
# the matching rows are wanted. So (issue 24, 200,000 entries a company):
# - where a filter matched a few rows on average, it chose to read all of a value's rows
#   and sort them (a bitmap scan), which a value with many rows makes slow: bitmap and
#   sequential scans are off, and merge and hash joins, which would also read every
#   matching row, are off too;
# - the guessed cost passed jit_above_cost, and PostgreSQL compiled the page's plan to
#   machine code on every run (JIT code is not kept with a plan): 5.3 ms of CPU for a page
#   of 20 rows that takes 0.1 ms without: JIT is off.
GENERIC_READS = (
    "-c plan_cache_mode=force_generic_plan -c jit=off -c enable_bitmapscan=off "
    "-c enable_seqscan=off -c enable_mergejoin=off -c enable_hashjoin=off"
)


def pooled_params(pooling: str, *, for_reads: bool, generic: bool = False) -> dict[str, Any]:
    """psycopg's connection parameters for the way the database is reached (`pooling`,
    HEADWATER_DATABASE_POOLING). "session": reads planned as `CUSTOM_READS` or
    `GENERIC_READS` say, options the server keeps for the session. "transaction" (a
    pooler such as PgBouncer between, in transaction mode, contract 19): a server
    connection serves another client after each transaction, so nothing may live in
    the session: no options (PgBouncer refuses the startup parameter) and no server-side
    prepared statements (another client's connection would not hold them). Every query
    is then planned for its values, as `CUSTOM_READS` asks; `generic` reads lose their
    one plan for any values."""
    if pooling == "transaction":
        return {"prepare_threshold": None}
    if for_reads:
        return {"options": GENERIC_READS if generic else CUSTOM_READS}
    return {}


def sealing_material(settings: Settings) -> bytes:
    """The material secrets at rest are sealed with (`kit.sealing`)."""
    key = settings.webhook_secret_key
    return sealing.material(
        secret_key=None if key is None else key.get_secret_value(),
        passphrase=settings.signing_key_passphrase,
        data_dir=Path(settings.data_dir),
    )


class Database:
    """One engine and its session factory, owned by the app or the CLI."""

    def __init__(self, settings: Settings, *, role: Role = "other") -> None:
        """`role`: "api" for an API process, else "other" (see ROLE_CONNECTIONS)."""
        self._connect_timeout = settings.db_connect_timeout_seconds
        self.pooling = settings.database_pooling
        self.role = role
        self.shares = Shares.of(
            settings.db_connections or ROLE_CONNECTIONS[role], api=role == "api"
        )
        self.engine = make_engine(
            settings, connections=self.shares.writes, name=f"headwater {role} write"
        )
        self._turns = sqlite_turns(self.engine)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        # wakes loops here and in other processes once marked work commits (`wakeups`)
        self.announcer = Announcer(self.engine, notify=settings.wakeups)
        self._listen_url = settings.listen_url
        # Reads that change nothing have an engine of their own (see make_engine).
        self.reader = make_engine(
            settings,
            for_reads=True,
            connections=self.shares.reads,
            name=f"headwater {role} read",
        )
        self.read_sessions = sessionmaker(self.reader, expire_on_commit=False)
        # Reads that may lag (lists, the activity search, exports) go to a replica, if
        # one is set (HEADWATER_DATABASE_READ_URL), with a share of their own.
        self._replica_url = settings.database_read_url
        self.replica = self.reader
        if settings.sqlalchemy_read_url is not None:
            self.replica = make_engine(
                settings,
                for_reads=True,
                connections=self.shares.reads,
                name=f"headwater {role} replica",
                url=settings.sqlalchemy_read_url,
            )
        self.replica_sessions = sessionmaker(self.replica, expire_on_commit=False)
        # until when reads that must see the database's latest skip the replica (`caught_up`)
        self._replica_behind_until = 0.0
        # `loop_read`'s idle connections (PostgreSQL) by plan (generic or not), how many it
        # has open, and the gate that bounds how many it uses at once, made for the event
        # loop that uses it
        # (keyed by (generic, on the replica))
        self._loop_idle: dict[tuple[bool, bool], list[psycopg.AsyncConnection[Any]]] = {}
        self._loop_open = 0
        self._loop_gate: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None
        # secrets kept in this database are sealed with this material (read when needed)
        sealing.provide(lambda: sealing_material(settings))

    @property
    def reads_on_loop(self) -> bool:
        """Whether `loop_read` can be used: PostgreSQL, through psycopg's asyncio driver,
        in a process with a share of connections for it (an API process)."""
        return self.engine.dialect.name == "postgresql" and self.shares.loop_reads > 0

    def give_way(self) -> None:
        """SQLite: let writers waiting for the write lock go first (`kit.turns`); a
        writer that commits batch after batch calls it between them. PostgreSQL: its
        writers do not wait for one another's tables, and nothing is done."""
        if self._turns is not None:
            self._turns.give_way()

    @contextmanager
    def unit_of_work(self) -> Iterator[Session]:
        """One use case's database work: a session committed when the block ends without
        an error, rolled back when it raises. Services and their helpers flush (to see
        constraint errors where they happen) but never commit: the unit of work does,
        once, so a use case that calls several helpers stores all of it or nothing."""
        with self.sessions() as session:
            yield session
            session.commit()

    @contextmanager
    def read_session(self) -> Iterator[Session]:
        """A session for reads only: it must not be used to write."""
        with self.read_sessions() as session:
            yield session

    @contextmanager
    def replica_session(self) -> Iterator[Session]:
        """A session for reads that may lag: on the replica if one is set."""
        with self.replica_sessions() as session:
            yield session

    @contextmanager
    def replica_connection(self) -> Iterator[Connection]:
        """`read_connection` for reads that may lag: on the replica if one is set."""
        with self.replica.connect() as connection:
            yield connection

    async def read_on_thread(self, call: Callable[[Session], T], *, replica: bool = False) -> T:
        """`call(session)` in a read session on a worker thread, for code on the event
        loop: the session opens, runs and closes in one thread hop; `replica`: a read
        that may lag."""
        import anyio.to_thread  # the API's: CLI commands never load it

        def run() -> T:
            with self.replica_session() if replica else self.read_session() as session:
                return call(session)

        return await anyio.to_thread.run_sync(run)

    @property
    def has_replica(self) -> bool:
        return self.replica is not self.reader

    @contextmanager
    def caught_up(
        self, head: Callable[[Connection], int], *, wait: float = REPLICA_WAIT
    ) -> Iterator[Connection]:
        """A connection for a read that must see everything the database holds of a log
        whose last position `head` reads (the feeds, after numbering what a reader asked
        for): on the replica once it has replayed as far as the database is now (asked
        every `REPLICA_LOOK` seconds for at most `wait`), else on the database. Where no
        replica is set, or it failed to catch up in the last `REPLICA_BEHIND` seconds, the
        database's at once."""
        if self.has_replica and time.monotonic() >= self._replica_behind_until:
            with self.reader.connect() as connection:
                target = head(connection)
            deadline = time.monotonic() + wait
            while True:
                with self.replica.connect() as connection:
                    if head(connection) >= target:
                        yield connection
                        return
                if time.monotonic() >= deadline:
                    self._replica_behind_until = time.monotonic() + REPLICA_BEHIND
                    break
                time.sleep(REPLICA_LOOK)
        with self.reader.connect() as connection:
            yield connection

    @contextmanager
    def read_connection(self) -> Iterator[Connection]:
        """A Core connection for reads only, without the ORM: for the hottest paths."""
        with self.reader.connect() as connection:
            yield connection

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """A Core connection in a transaction, committed when the block ends without error."""
        with self.engine.begin() as connection:
            yield connection

    @contextmanager
    def atomic(self) -> Iterator[Connection]:
        """A Core connection for one atomic write, committed when the block ends without
        error: `repository.store`'s, which is one statement on PostgreSQL.

        PostgreSQL: autocommit, as one statement is atomic by itself; the BEGIN and
        COMMIT round trips of a transaction are saved. The block must therefore send
        exactly one statement there. SQLite: a transaction, like `begin`.

        The block is SQLAlchemy's transaction even on PostgreSQL (it sends no BEGIN in
        autocommit): its end is the commit that announces the block's `wakeups` marks,
        also when its statement went to the driver itself (`driver_execute`), where
        SQLAlchemy would otherwise see no transaction and the marks went unannounced.
        """
        if self.engine.dialect.name != "postgresql":
            with self.engine.begin() as connection:
                yield connection
            return
        with self.engine.connect() as connection:
            connection.execution_options(isolation_level="AUTOCOMMIT")
            with connection.begin():
                yield connection

    @property
    def can_listen(self) -> bool:
        """Whether this process can hear other processes' wake-ups (`connect_listener`)."""
        return self._listen_url is not None

    async def connect_listener(self) -> psycopg.AsyncConnection[Any]:
        """A connection of its own for LISTEN, straight to the server (a pooler in
        transaction mode would hand its session to others)."""
        assert self._listen_url is not None
        return await self.connect_async(name="listen", url=self._listen_url, for_reads=True)

    async def connect_async(
        self,
        *,
        for_reads: bool = False,
        generic: bool = False,
        name: str = "push",
        url: str | None = None,
    ) -> psycopg.AsyncConnection[Any]:
        """A psycopg connection of its own for code on the event loop (PostgreSQL only;
        the push groups' writers, `loop_read`): autocommit, rows as named tuples;
        `for_reads` plans every query for its values, as the read engine does, or, with
        `generic`, a prepared statement once for any values; `name`, what it is for, in its
        `application_name`; `url`, another than the engine's (a replica, the listener's). The caller
        closes it. A failure to connect is raised as SQLAlchemy's, like the engine's."""
        import psycopg
        from psycopg.rows import namedtuple_row

        target = (
            self.engine.url if url is None else make_url(url).set(drivername="postgresql+psycopg")
        )
        _args, params = self.engine.dialect.create_connect_args(target)
        params.pop("context", None)  # SQLAlchemy's adapters, for its own connections
        params["application_name"] = application_name(f"headwater {self.role} {name}")
        params.update(pooled_params(self.pooling, for_reads=for_reads, generic=generic))
        pauses = _pauses(time.monotonic() + self._connect_timeout)
        while True:
            try:
                return await psycopg.AsyncConnection.connect(
                    **params,
                    connect_timeout=self._connect_timeout,
                    autocommit=True,
                    row_factory=namedtuple_row,
                )
            except psycopg.OperationalError as exc:
                # the server's slots all taken: wait for one, as `patient` does
                pause = next(pauses, None) if _slots_taken(exc) else None
                if pause is None:
                    raise as_sqlalchemy_error(exc, broken=True) from exc
            await asyncio.sleep(pause)

    def ping(self) -> None:
        """Raise if the database cannot answer a trivial query."""
        with self.engine.connect() as connection:
            connection.execute(text("SELECT 1"))

    @asynccontextmanager
    async def loop_read(
        self, *, generic: bool = False, replica: bool = False
    ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A connection for reads on the event loop (PostgreSQL only), kept for the next.

        For the hottest reads: a read on a thread costs two thread handoffs and the wait
        for the GIL between them, more than the query (the activity search: p99 17 ms
        against 9 ms on the loop, issue 24). psycopg's errors are raised as SQLAlchemy's,
        as `driver_execute` does; a connection that failed is closed, not kept.

        `generic`: a connection whose prepared statements are planned once, for any
        values (psycopg prepares a statement on its fifth run). Only for statements whose
        best plan does not depend on their values: planning was most of PostgreSQL's
        work for a page of the activity search (issue 24). Otherwise every run is
        planned for its values, since a plan made for a filter that matches a few rows
        can be slow for one that matches most. At most `shares.loop_reads` connections of
        every kind are open. `replica`: a read that may lag, on the replica if one is set.
        """
        import psycopg

        loop = asyncio.get_running_loop()
        if self._loop_gate is None or self._loop_gate[0] is not loop:
            self._loop_gate = (loop, asyncio.Semaphore(self.shares.loop_reads))
        async with self._loop_gate[1]:  # more reads at once wait for a connection
            kind = (generic, replica and self._replica_url is not None)
            idle = self._loop_idle.setdefault(kind, [])
            connection = idle.pop() if idle else None
            if connection is None:
                other = next((c for k, c in self._loop_idle.items() if k != kind and c), None)
                if other and self._loop_open >= self.shares.loop_reads:  # make room: close one
                    await self._loop_close(other.pop(0))
                self._loop_open += 1  # counted before the wait, as other reads go on
                try:
                    connection = await self.connect_async(
                        for_reads=True,
                        generic=generic,
                        name="loop read",
                        url=self._replica_url if kind[1] else None,
                    )
                except BaseException:
                    self._loop_open -= 1
                    raise
            try:
                yield connection
            except psycopg.Error as exc:
                broken = connection.broken or connection.closed
                await self._loop_close(connection)
                raise as_sqlalchemy_error(exc, broken=broken) from exc
            except BaseException:
                await self._loop_close(connection)
                raise
            if connection.closed:
                self._loop_open -= 1
                return
            idle.append(connection)

    async def _loop_close(self, connection: psycopg.AsyncConnection[Any]) -> None:
        self._loop_open -= 1
        await connection.close()

    async def close_loop_reads(self) -> None:
        idle = [c for kind in self._loop_idle.values() for c in kind]
        self._loop_idle = {}
        self._loop_open -= len(idle)
        for connection in idle:
            await connection.close()

    def dispose(self) -> None:
        self.announcer.close()
        self.engine.dispose()
        self.reader.dispose()
        if self.replica is not self.reader:
            self.replica.dispose()
