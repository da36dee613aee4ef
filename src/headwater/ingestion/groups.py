"""Group commit: small concurrent pushes share one database transaction.

A single-record push costs a database transaction of its own: a read, two inserts and a
commit, most of it fixed cost. Under concurrency, the pushes that arrive while one group
is being written wait and go together in the next: one read per (client, dataset), one
insert of their transactions, their records, one commit. Under light load a group is one
push and nothing waits; the heavier the load, the larger the groups.

Every push still gets its own transaction row and its own answer, and a 200 is still
sent only after the commit that holds its records (`service.push_group`). Pushes with an
Idempotency-Key, and large ones, take the one-by-one path (`service.push`).
"""

from __future__ import annotations

import asyncio

import anyio.to_thread

from headwater.db import Database
from headwater.identity.tokens import Principal
from headwater.ingestion import service

# Bodies up to this size go in groups; larger batches already share their fixed costs.
SMALL_BODY = 16 * 1024
MAX_GROUP = 256
# Groups in flight at once in one process: while one commits, the next is written.
WRITERS = 2


class PushQueue:
    """One per process: pushes wait here while the group before them is written."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._waiting: list[tuple[service.SmallPush, asyncio.Future[service.Answer]]] = []
        self._writers: set[asyncio.Task[None]] = set()

    async def push(
        self,
        caller: Principal,
        *,
        body: bytes,
        idempotency_key: str | None,
        limits: service.Limits,
    ) -> service.Answer:
        """Push as `service.push` does, small unkeyed pushes in groups."""
        if idempotency_key is not None or len(body) > SMALL_BODY:
            return await anyio.to_thread.run_sync(
                lambda: service.push(
                    self._db, caller, body=body, idempotency_key=idempotency_key, limits=limits
                )
            )
        client_id, dataset_id, records = service.envelope(body, limits=limits)
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[service.Answer] = loop.create_future()
        self._waiting.append((service.SmallPush(caller, client_id, dataset_id, records), answer))
        if len(self._writers) < WRITERS:
            writer = loop.create_task(self._write())
            self._writers.add(writer)
            writer.add_done_callback(self._writers.discard)
        return await answer

    async def _write(self) -> None:
        while self._waiting:
            group = self._waiting[:MAX_GROUP]
            del self._waiting[:MAX_GROUP]
            pushes = [push for push, _ in group]
            outcomes: list[service.Answer | Exception]
            try:
                outcomes = list(
                    await anyio.to_thread.run_sync(service.push_group, self._db, pushes)
                )
            except Exception as exc:  # the database: every push of the group fails
                outcomes = [exc] * len(group)
            for (_, answer), outcome in zip(group, outcomes, strict=True):
                if answer.done():  # the client went away; its push stands or fails
                    continue
                if isinstance(outcome, BaseException):
                    answer.set_exception(outcome)
                else:
                    answer.set_result(outcome)
