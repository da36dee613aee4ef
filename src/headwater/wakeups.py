"""Wake-ups across processes: work left by one process starts at once in another.

A change that leaves work for someone (a file to process, an export, an erasure, events
to deliver, records for the feed's readers) marks its database transaction with a topic
(`mark`). Once the transaction has committed and its connection is back in its pool, the
process announces the marks (`Announcer`): at once to its own loops, and to every other
process through PostgreSQL's NOTIFY on one channel, a few announcements a statement and
at most one statement every `COALESCE` seconds. Every process that runs loops listens
(`listen`, LISTEN on a connection of its own) and wakes them.

So an idle loop need not look at the database every second to learn of new work: it
waits for a wake-up, looking only every HEADWATER_IDLE_POLL_SECONDS, for what no change
announces (a job whose claim went stale, a retry that falls due, a mark lost with a
process that died between its commit and its announcement). A wake-up is a hint: a woken
loop looks at the database as it would at its poll, so a spurious one costs a look and a
lost one the time until the next.

Why after the commit and not NOTIFY inside the transaction: PostgreSQL makes every
committing transaction that notified wait for the others' commits (one lock for the
whole server), which the pushes, thousands of small transactions a second, would feel.

Where PostgreSQL cannot listen (a pooler in transaction mode between, with no
HEADWATER_DATABASE_LISTEN_URL; SQLite), loops poll as before, every few tenths of a
second to a second; announcements still wake the process's own loops.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import Engine, event, text
from sqlalchemy.exc import SQLAlchemyError

if TYPE_CHECKING:
    import psycopg


def _warn(message: str, exc: Exception) -> None:
    """Log a warning with the error's first line. structlog is imported here, when one
    is logged: every process that opens the database imports this module, and an
    operator command would spend 40 ms of its start importing structlog."""
    import structlog

    structlog.get_logger("headwater.wakeups").warning(message, error=str(exc).splitlines()[0])


CHANNEL = "headwater_wakeups"
Topic = Literal["files", "exports", "erasures", "events", "feed"]
TOPICS: tuple[str, ...] = Topic.__args__  # type: ignore[attr-defined]
# Announcements gathered before one NOTIFY statement sends them, at most this often:
# each statement is a database transaction of the sender's and a wake-up of every
# listening process (every 5 ms, under a stream of single pushes, cost them about 20%)
COALESCE = 0.05
# Pause before listening again after the listening connection failed
RELISTEN_PAUSE = 2.0
# How often the listener looks whether it should stop
STOP_CHECK = 0.5

_MARKED = "headwater.wakeups.marked"  # in the connection's `info`: this transaction's
_COMMITTED = "headwater.wakeups.committed"  # and those of its committed transactions

Handler = Callable[[str, str], None]  # (topic, key), from any thread


def mark(connection: Any, topic: Topic, key: str = "") -> None:
    """Say, in the caller's database transaction, that its commit leaves work of `topic`
    (with `key`: the dataset of records for the feed): announced after the commit, and
    never for a transaction rolled back."""
    connection.info.setdefault(_MARKED, set()).add((topic, key))


def payload(topic: str, key: str = "") -> str:
    return f"{topic}:{key}" if key else topic


def parse(text_: str) -> tuple[str, str] | None:
    """A payload's (topic, key); None for one this version does not know."""
    topic, _, key = text_.partition(":")
    return (topic, key) if topic in TOPICS else None


class Announcer:
    """One process's announcements, for one database's write engine: marks of committed
    transactions are taken when their connection goes back to the pool; `announce` may
    also be called directly (from any thread). Local handlers run at once, on the caller's
    thread; NOTIFY goes from a thread of its own (PostgreSQL only)."""

    def __init__(self, engine: Engine, *, notify: bool = True) -> None:
        """`notify`: send to other processes (PostgreSQL only; HEADWATER_WAKEUPS)."""
        self._engine = engine
        self._notify = notify and engine.dialect.name == "postgresql"
        self._handlers: list[Handler] = []
        self._lock = threading.Lock()
        self._pending: set[tuple[str, str]] = set()
        self._ready = threading.Event()
        self._sender: threading.Thread | None = None
        self._closed = False
        event.listen(engine, "commit", _committed)
        event.listen(engine, "rollback", _rolled_back)
        event.listen(engine, "checkin", self._checked_in)

    def handle(self, handler: Handler) -> None:
        """Call `handler(topic, key)` for every announcement of this process."""
        self._handlers.append(handler)

    def announce(self, topic: Topic, key: str = "") -> None:
        self._announce({(topic, key)})

    def _announce(self, marks: set[tuple[str, str]]) -> None:
        for topic, key in marks:
            for handler in self._handlers:
                handler(topic, key)
        if not self._notify or self._closed:
            return
        with self._lock:
            self._pending |= marks
            if self._sender is None:
                self._sender = threading.Thread(
                    target=self._send_forever, name="wakeups", daemon=True
                )
                self._sender.start()
        self._ready.set()

    def _checked_in(self, _dbapi: Any, record: Any) -> None:
        record.info.pop(_MARKED, None)
        committed = record.info.pop(_COMMITTED, None)
        if committed:
            self._announce(committed)

    def _send_forever(self) -> None:
        # (`close` may come during the sleep: its wake-up is then cleared below, so the
        # loop looks at `_closed` again before it waits)
        while not self._closed:
            self._ready.wait()
            if self._closed:
                return
            time.sleep(COALESCE)
            self._ready.clear()
            self.flush()

    def flush(self) -> None:
        """Send what waits now (NOTIFY), on this thread."""
        with self._lock:
            sending, self._pending = self._pending, set()
        if not sending:
            return
        try:
            with self._engine.connect() as connection:
                connection.execute(
                    text("SELECT pg_notify(:channel, p) FROM unnest(CAST(:ps AS text[])) AS p"),
                    {"channel": CHANNEL, "ps": sorted(payload(*mark) for mark in sending)},
                )
                connection.commit()
        except Exception as exc:  # lost: the listeners find the work at their next look
            _warn("wake-ups not sent", exc)

    def close(self) -> None:
        """Stop sending (the sender's statement in flight done), then send what waits."""
        self._closed = True
        self._ready.set()
        if self._sender is not None:
            self._sender.join(timeout=10)
        self.flush()


def _committed(connection: Any) -> None:
    info = _info(connection)
    marked = None if info is None else info.pop(_MARKED, None)
    if marked:
        info.setdefault(_COMMITTED, set()).update(marked)  # type: ignore[union-attr]


def _rolled_back(connection: Any) -> None:
    if connection.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
        _committed(connection)  # each statement committed by itself (`Database.atomic`)
        return
    info = _info(connection)
    if info is not None:
        info.pop(_MARKED, None)


def _info(connection: Any) -> dict[Any, Any] | None:
    """The connection's `info`; None for one that broke (its marks go with it)."""
    try:
        return connection.info  # type: ignore[no-any-return]
    except SQLAlchemyError:
        return None


Connect = Callable[[], Awaitable["psycopg.AsyncConnection[Any]"]]


class Listener:
    """A process's listening connection: every announcement of every process (its own
    included) is handed to `on_wakeup(topic, key)` on the event loop. `listening` says
    whether it is connected; when it connects (again), `on_wakeup` is called once with
    every topic and no key, for what was announced while it was not."""

    def __init__(self, connect: Connect, on_wakeup: Handler) -> None:
        self._connect = connect
        self._on_wakeup = on_wakeup
        self.listening = False

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self._listen(stop)
            except Exception as exc:
                _warn("not listening for wake-ups", exc)
            finally:
                self.listening = False
            try:
                await asyncio.wait_for(stop.wait(), timeout=RELISTEN_PAUSE)
            except TimeoutError:
                continue

    async def _listen(self, stop: asyncio.Event) -> None:
        connection = await self._connect()
        try:
            await connection.execute(f"LISTEN {CHANNEL}")
            self.listening = True
            for topic in TOPICS:
                self._on_wakeup(topic, "")
            while not stop.is_set():
                # (a timeout only to look at `stop`: waiting asks nothing of the server)
                async for notify in connection.notifies(timeout=STOP_CHECK):
                    parsed = parse(notify.payload)
                    if parsed is not None:
                        self._on_wakeup(*parsed)
        finally:
            await connection.close()
