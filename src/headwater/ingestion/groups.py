"""Group commit: small concurrent pushes share one database transaction.

A single-record push costs a database write of its own, most of it fixed cost. Under
concurrency, the pushes that arrive while one group is being written wait and go
together in the next: one read per (client, dataset), then one write of all their
transactions, events, counts and records. The sink writes it: PostgreSQL's from the
event loop (`PostgresSink.write_group`: two round trips a group, no thread); the
portable one, and any group the loop leaves, on a thread (`service.push_group`).
Before it takes a group, a writer lets the event loop turn a few times, so that
requests already read from their sockets join it. Under light load a group is one
push and waits microseconds; the heavier the load, the larger the groups.

Every push still gets its own transaction row and its own answer, and a 200 is still
sent only after the commit that holds its records (`service.push_group`). Pushes with an
Idempotency-Key, and large ones, take the one-by-one path (`service.push`), large ones
at most LARGE_AT_ONCE at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from headwater.db import Database
from headwater.identity.tokens import Principal
from headwater.ingestion import lifecycle, service, sinks

if TYPE_CHECKING:
    import psycopg

# Bodies up to this size go in groups; larger batches already share their fixed costs.
SMALL_BODY = 16 * 1024
MAX_GROUP = 256
# Large pushes checked at once in one process; the others wait their turn. A large push
# is mostly Python work under the GIL: more of them at once only interleave, each
# pushing the others' records out of the CPU's caches. Two keep one checking records
# while the other waits for its write (measured: 8 concurrent 500-record batches, 7%
# more records/s than with no limit, and 4% more than with one).
LARGE_AT_ONCE = 2
# Event-loop turns a writer lets pass before it takes a group, so that requests already
# read from their sockets, and on their way through routing and authentication, join
# it: larger groups cost less CPU a push. Under light load a turn takes microseconds.
TURNS = 4


def _announce(db: Database, outcomes: Sequence[service.Outcome]) -> None:
    """Wake the delivery loops and the feed's readers for a group written on the event
    loop (a thread's write is announced when its connection goes back to the pool)."""
    stored = [o.transaction for o in outcomes if isinstance(o, service.Pushed)]
    for topic, key in lifecycle.stored_wakeups(stored):
        db.announcer.announce(topic, key)


class PushQueue:
    """One per process: pushes wait here while the group before them is written."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._waiting: list[tuple[service.SmallPush, asyncio.Future[service.Pushed]]] = []
        self._writers: set[asyncio.Task[None]] = set()
        # Groups in flight at once, each on a connection of the process's share for them
        # (two in an API process: while one commits, the next is written)
        self._most = max(1, db.shares.push_writers)
        # PostgreSQL: groups are written on the event loop, each writer on an asyncio
        # connection of these (made when first needed).
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        self._closed = False
        self._sink = sinks.for_dialect(db.engine.dialect.name)
        self._on_loop = isinstance(self._sink, sinks.PostgresSink)
        # Groups the loop leaves (SQLite; a schema not compiled yet; a failed write) are
        # written on threads of their own.
        self._threads = ThreadPoolExecutor(max_workers=self._most, thread_name_prefix="push-group")
        self._large = anyio.CapacityLimiter(LARGE_AT_ONCE)

    async def close(self) -> None:
        """Let the groups in flight finish, then close the writers' connections and
        stop their threads."""
        self._closed = True
        for connection in self._idle:
            await connection.close()
        self._idle.clear()
        self._threads.shutdown(wait=True)

    async def push(
        self,
        caller: Principal,
        *,
        body: bytes,
        idempotency_key: str | None,
        limits: service.Limits,
    ) -> service.Pushed:
        """Push as `service.push` does, small unkeyed pushes in groups."""
        large = len(body) > SMALL_BODY
        if idempotency_key is not None or large:
            return await anyio.to_thread.run_sync(
                lambda: service.push(
                    self._db, caller, body=body, idempotency_key=idempotency_key, limits=limits
                ),
                limiter=self._large if large else None,
            )
        client_id, dataset_id, records = service.envelope(body, limits=limits)
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[service.Pushed] = loop.create_future()
        push = service.SmallPush(
            caller, client_id, dataset_id, records, nul=service.may_hold_nul(body)
        )
        self._waiting.append((push, answer))
        if len(self._writers) < self._most:
            self._writers.add(loop.create_task(self._write()))
        return await answer

    async def _write(self) -> None:
        try:
            while True:
                for _ in range(TURNS):
                    await asyncio.sleep(0)
                if not self._waiting:
                    return
                await self._write_group()
        finally:
            # In the same step as the check that found nothing waiting: a push that comes
            # after it sees one writer fewer and starts one (a done-callback would leave a
            # moment where the writer is gone but still counted, and the push would wait
            # for no one).
            self._writers.discard(asyncio.current_task())

    async def _store(self, pushes: list[service.SmallPush]) -> Sequence[service.Outcome]:
        """The group's outcomes: written on the event loop where it can be (no thread
        handoff, no wait for the GIL between its round trips), else on a thread."""
        if self._on_loop:
            connection = self._idle.pop() if self._idle else await self._db.connect_async()
            try:
                outcomes = await self._sink.write_group(
                    connection,
                    service.group_pairs(pushes),
                    lambda rows: service.decide_group(pushes, rows, service.cached_compiled),
                    service.claim_on_loop,
                )
            except BaseException:
                await connection.close()
                raise
            if self._closed:  # a group that finished after shutdown began
                await connection.close()
            else:
                self._idle.append(connection)
            if outcomes is not None:
                _announce(self._db, outcomes)
                return outcomes
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, service.push_group, self._db, pushes)

    async def _write_group(self) -> None:
        """Write the pushes waiting now (up to MAX_GROUP) in one group and answer each."""
        group = self._waiting[:MAX_GROUP]
        del self._waiting[:MAX_GROUP]
        pushes = [push for push, _ in group]
        outcomes: list[service.Outcome | Exception]
        try:
            outcomes = list(await self._store(pushes))
        except Exception as exc:  # the database: every push of the group fails
            outcomes = [exc] * len(group)
        for (_, answer), outcome in zip(group, outcomes, strict=True):
            if answer.done():  # the client went away; its push stands or fails
                continue
            if isinstance(outcome, BaseException):
                answer.set_exception(outcome)
            else:
                answer.set_result(outcome)
