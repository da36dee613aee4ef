"""Where checked records go: one interface, a portable sink and a PostgreSQL one.

A sink stores (`store`) transactions that are final with their records, their record
counts and their events, or adds records (`add`) to a transaction stored already (a
file's batches, staged by `ingestion.staging` and counted when it publishes them). Both
write in the caller's database transaction and never commit. The sink is chosen once
per database (`for_dialect`); `tests/ingestion/test_sinks.py` is the contract every
sink passes.

PostgreSQL's does it in one statement (one round trip, atomic by itself, so it may run
in autocommit), and writes groups of pushes from the event loop (`write_group`). The
portable one uses plain statements that the caller's transaction makes atomic.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

import orjson
from sqlalchemy import Connection, Uuid, bindparam, insert, text

from headwater.db import as_sqlalchemy_error, driver_execute
from headwater.events import outbox
from headwater.ingestion import lifecycle
from headwater.ingestion.models import Record, RecordCount, Transaction
from headwater.ingestion.repository import TARGET_SQL

if TYPE_CHECKING:
    import psycopg  # PostgreSQL's sink imports it when it runs: SQLite never loads it


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """Records of one transaction, to be stored together; `texts` may give the JSON text
    of some of them (None where it is not known)."""

    records: Sequence[dict[str, Any]]
    company_id: uuid.UUID
    dataset_pk: uuid.UUID
    transaction_id: uuid.UUID
    schema_version: int
    ingested_at: datetime
    texts: Sequence[str | None] | None = None
    transform_version: int | None = None
    # each record's dedupe digest and the step's window (`ingestion.dedupe`), if any
    digests: Sequence[bytes | None] | None = None
    window: timedelta | None = None
    # each record's subject digest (`ingestion.subjects`), if the dataset has a subject key
    subjects: Sequence[bytes | None] | None = None

    @property
    def claims(self) -> bool:
        """Whether its write claims dedupe digests (`ingestion.dedupe`) first."""
        return self.digests is not None and self.window is not None

    def json_texts(self) -> list[str]:
        """Each record's JSON text, in order."""
        if self.texts is None:
            return [_json(record) for record in self.records]
        return [
            _json(record) if text is None else text
            for record, text in zip(self.records, self.texts, strict=True)
        ]

    @property
    def shard(self) -> int:
        return self.transaction_id.int % RecordCount.SHARDS


# A group's outcome as the service decides it from the targets it read: what to answer
# each push, and the final transactions and record batches to store; None leaves the
# group to the thread path.
Decision = tuple[list[Any], Sequence[dict[str, Any]], Sequence[RecordBatch]]
Decide = Callable[[dict[tuple[str, str], Any]], Decision | None]
# Dedupe claims made in the write's transaction on the event loop: the batches left to
# store (the transactions' counts changed to match).
ClaimAsync = Callable[
    [Any, Sequence[dict[str, Any]], Sequence[RecordBatch]], Awaitable[Sequence[RecordBatch]]
]


class Staged(Protocol):
    """A transaction whose records are stored in batches (a file's): where they go."""

    @property
    def transaction_id(self) -> uuid.UUID: ...
    @property
    def company_id(self) -> uuid.UUID: ...
    @property
    def dataset_pk(self) -> uuid.UUID: ...


class RecordSink(Protocol):
    def store(
        self,
        connection: Connection,
        transactions: Sequence[dict[str, Any]],
        batches: Sequence[RecordBatch],
    ) -> None:
        """Store final transactions (`lifecycle.new` rows) with their events, and the
        records of their batches, counted. Each batch's `transaction_id` names one of
        the transactions."""

    def add(
        self, connection: Connection, batches: Sequence[RecordBatch], *, counted: bool = True
    ) -> None:
        """Add records to transactions stored already, in order, and count them (unless
        not `counted`: a file's staged batches are counted when they are published)."""

    async def write_group(
        self,
        connection: psycopg.AsyncConnection[Any],
        pairs: Sequence[tuple[str, str]],
        decide: Decide,
        claim: ClaimAsync | None = None,
    ) -> list[Any] | None:
        """Group commit on the event loop: read each (client, dataset) pair's target
        (`repository.target`), let `decide` check the group, store what it accepts
        (after `claim`, in one database transaction, where its batches carry dedupe
        digests); the outcomes, or None to leave the group to `store` on a thread."""


def _json(record: dict[str, Any]) -> str:
    return orjson.dumps(record).decode()


def _counts(batches: Sequence[RecordBatch]) -> list[dict[str, Any]]:
    """What the batches add to their datasets' record counts, datasets in sorted order.

    All of it goes to one shard (the first batch's), so one database transaction locks
    one count row per dataset: a file's many batches the same row each time, and a group
    of pushes one row rather than many. Datasets are locked in one order (sorted), so two
    transactions never wait on each other's rows in opposite order.
    """
    shard = batches[0].shard
    added: dict[tuple[uuid.UUID, uuid.UUID], int] = {}
    for batch in batches:
        key = (batch.dataset_pk, batch.company_id)
        added[key] = added.get(key, 0) + len(batch.records)
    return [
        {"dataset_pk": dataset_pk, "company_id": company_id, "shard": shard, "records": count}
        for (dataset_pk, company_id), count in sorted(added.items())
    ]


def _final(transactions: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of final transactions (`lifecycle.finished` refuses any other)."""
    return [lifecycle.finished(transaction) for transaction in transactions]


# --- portable ---------------------------------------------------------------------------------

# PostgreSQL and SQLite both take ON CONFLICT ... DO UPDATE.
_ADD_TO_COUNT = text(
    "INSERT INTO dataset_record_counts (dataset_pk, shard, company_id, records) "
    "VALUES (:dataset_pk, :shard, :company_id, :records) "
    "ON CONFLICT (dataset_pk, shard, company_id) "
    "DO UPDATE SET records = dataset_record_counts.records + excluded.records"
).bindparams(bindparam("dataset_pk", type_=Uuid()), bindparam("company_id", type_=Uuid()))
_INSERT_RECORDS = insert(Record)


def _add_counts(connection: Connection, batches: Sequence[RecordBatch]) -> None:
    """Add to the datasets' record counts, in the same database transaction as the rows."""
    for count in _counts(batches):
        connection.execute(_ADD_TO_COUNT, count)


def add_count(connection: Connection, target: Staged, records: int) -> None:
    """Add a transaction's `records` to its dataset's count (a staged file's, when its
    records are published), on the transaction's shard as `add` counts them."""
    if records:
        shard = target.transaction_id.int % RecordCount.SHARDS
        connection.execute(
            _ADD_TO_COUNT,
            {
                "dataset_pk": target.dataset_pk,
                "company_id": target.company_id,
                "shard": shard,
                "records": records,
            },
        )


def subtract_count(
    connection: Connection, company_id: uuid.UUID, dataset_pk: uuid.UUID, shard: int, records: int
) -> None:
    """Take `records` removed (an erasure, retention) off a shard of the dataset's count."""
    connection.execute(
        _ADD_TO_COUNT,
        {"dataset_pk": dataset_pk, "company_id": company_id, "shard": shard, "records": -records},
    )


_INSERT_TRANSACTIONS = insert(Transaction)


class PortableSink:
    """Plain statements, made atomic by the caller's database transaction."""

    def store(
        self,
        connection: Connection,
        transactions: Sequence[dict[str, Any]],
        batches: Sequence[RecordBatch],
    ) -> None:
        events = _final(transactions)
        connection.execute(_INSERT_TRANSACTIONS, list(transactions))
        outbox.write(connection, events)
        lifecycle.mark_stored(connection, transactions)
        self.add(connection, batches)

    def add(
        self, connection: Connection, batches: Sequence[RecordBatch], *, counted: bool = True
    ) -> None:
        batches = [batch for batch in batches if batch.records]
        if not batches:
            return
        if counted:
            _add_counts(connection, batches)
        connection.execute(
            _INSERT_RECORDS,
            [
                {
                    "record_id": uuid.uuid4(),
                    "company_id": batch.company_id,
                    "dataset_pk": batch.dataset_pk,
                    "transaction_id": batch.transaction_id,
                    "schema_version": batch.schema_version,
                    "transform_version": batch.transform_version,
                    "ingested_at": batch.ingested_at,
                    "data": data,
                    "subject": subject,
                }
                for batch in batches
                for data, subject in zip(
                    batch.records, batch.subjects or [None] * len(batch.records), strict=True
                )
            ],
        )

    async def write_group(
        self,
        connection: psycopg.AsyncConnection[Any],
        pairs: Sequence[tuple[str, str]],
        decide: Decide,
        claim: ClaimAsync | None = None,
    ) -> list[Any] | None:
        return None  # no event-loop driver: groups are written on a thread


# --- PostgreSQL -------------------------------------------------------------------------------

# The batch travels as one array of JSON texts in binary form, so the server reads each
# record's JSON once (the cast to json) and makes the rows and their ids. As one JSON
# array, it was read twice: by json's input function and by json_array_elements. The
# planner knows that WITH ORDINALITY numbers rows in order: no sort.
_RECORDS_INTO = """
INSERT INTO records
    (record_id, company_id, dataset_pk, transaction_id, schema_version, transform_version,
     ingested_at, data, subject)
"""
_UNNEST = (
    _RECORDS_INTO
    + """
SELECT gen_random_uuid(), %(company_id)s, %(dataset_pk)s, %(transaction_id)s,
       %(schema_version)s, %(transform_version)s, %(ingested_at)s, data::json, subject
FROM unnest(%(data)b::text[], %(subjects)b::bytea[]) WITH ORDINALITY AS batch(data, subject, n)
ORDER BY n
"""
)
# Transaction rows, their events, the records of their batches and the record counts,
# in one statement: one round trip, where BEGIN, five statements and COMMIT took seven.
# The transactions and counts travel as one JSON text each; each event is made from its
# transaction's row (`lifecycle.finished` says the same in Python). The records of one
# batch are `_UNNEST`'s; those of several come with the id of the transaction each
# belongs to (a binary uuid[]), whose row gives their other columns (a join, and a sort
# to keep their order).
_WITH_COUNTED = """
WITH counted AS (
    INSERT INTO dataset_record_counts (dataset_pk, shard, company_id, records)
    SELECT dataset_pk, shard, company_id, records
    FROM json_to_recordset(%(counts)s::json)
        AS c(dataset_pk uuid, shard smallint, company_id uuid, records bigint)
    ORDER BY dataset_pk
    ON CONFLICT (dataset_pk, shard, company_id)
    DO UPDATE SET records = dataset_record_counts.records + excluded.records
)"""
_NEW_TRANSACTIONS = """, new_transactions AS (
    INSERT INTO transactions
    SELECT * FROM json_populate_recordset(NULL::transactions, %(transactions)s::json)
    RETURNING id, company_id, dataset_pk, schema_version, transform_version, created_at, status,
              completed_at
), new_events AS (
    INSERT INTO events (id, type, company_id, created_at, transaction_id)
    SELECT gen_random_uuid(), 'transaction.' || status, company_id, completed_at, id
    FROM new_transactions
)
"""
_STORE_HEAD = _WITH_COUNTED + _NEW_TRANSACTIONS
# A file's batch and what it adds to the counts, in one statement (`add`).
_ADD_COUNTED = _WITH_COUNTED + _UNNEST
_STORE_ONE = _STORE_HEAD + _UNNEST
_STORE = (
    _STORE_HEAD
    + _RECORDS_INTO
    + """
SELECT gen_random_uuid(), t.company_id, t.dataset_pk, t.id, t.schema_version,
       t.transform_version, t.created_at, r.data::json, r.subject
FROM unnest(%(records)b::text[], %(owners)b::uuid[], %(subjects)b::bytea[])
    WITH ORDINALITY AS r(data, owner, subject, n)
JOIN new_transactions AS t ON t.id = r.owner
ORDER BY r.n
"""
)


def _batch_params(batch: RecordBatch) -> dict[str, Any]:
    """`_UNNEST`'s parameters for the batch."""
    return {
        "company_id": batch.company_id,
        "dataset_pk": batch.dataset_pk,
        "transaction_id": batch.transaction_id,
        "schema_version": batch.schema_version,
        "transform_version": batch.transform_version,
        "ingested_at": batch.ingested_at,
        "data": batch.json_texts(),
        "subjects": _subject_array(batch.subjects),
    }


def _subject_array(subjects: Sequence[bytes | None] | None) -> list[bytes | None] | None:
    """The subjects as a bytea[] parameter: None (NULL, every record without one) unless
    some record has one (a list of None alone has no type psycopg can send)."""
    if subjects is None or not any(subjects):
        return None
    return list(subjects)


def _store_statement(
    transactions: Sequence[dict[str, Any]], batches: Sequence[RecordBatch]
) -> tuple[str, dict[str, Any]]:
    """`PostgresSink.store`'s statement and its parameters."""
    if any(transaction["status"] not in lifecycle.FINAL for transaction in transactions):
        raise lifecycle.IllegalTransition("a sink stores final transactions only")
    batches = [batch for batch in batches if batch.records]
    params: dict[str, Any] = {
        "transactions": orjson.dumps(transactions).decode(),
        "counts": orjson.dumps(_counts(batches) if batches else []).decode(),
    }
    if len(batches) == 1:
        return _STORE_ONE, params | _batch_params(batches[0])
    params["records"] = [text for batch in batches for text in batch.json_texts()]
    params["owners"] = [batch.transaction_id for batch in batches for _ in batch.records]
    params["subjects"] = _subject_array(
        [
            subject
            for batch in batches
            for subject in (batch.subjects or [None] * len(batch.records))
        ]
    )
    return _STORE, params


class PostgresSink:
    """One statement a store, through psycopg itself (SQLAlchemy's statement layer costs
    more than PostgreSQL takes to run these)."""

    def store(
        self,
        connection: Connection,
        transactions: Sequence[dict[str, Any]],
        batches: Sequence[RecordBatch],
    ) -> None:
        driver_execute(connection, *_store_statement(transactions, batches))
        lifecycle.mark_stored(connection, transactions)

    def add(
        self, connection: Connection, batches: Sequence[RecordBatch], *, counted: bool = True
    ) -> None:
        """One statement a batch, the first adding to the counts too (one round trip
        a batch: a file's are added one after another)."""
        batches = [batch for batch in batches if batch.records]
        if not batches:
            return
        if counted:
            counts = {"counts": orjson.dumps(_counts(batches)).decode()}
            driver_execute(connection, _ADD_COUNTED, counts | _batch_params(batches[0]))
        else:
            driver_execute(connection, _UNNEST, _batch_params(batches[0]))
        for batch in batches[1:]:
            driver_execute(connection, _UNNEST, _batch_params(batch))

    async def store_async(
        self,
        connection: psycopg.AsyncConnection[Any],
        transactions: Sequence[dict[str, Any]],
        batches: Sequence[RecordBatch],
    ) -> None:
        """`store` on an asyncio psycopg connection: in autocommit, committed when it
        returns."""
        await connection.execute(*_store_statement(transactions, batches))

    async def write_group(
        self,
        connection: psycopg.AsyncConnection[Any],
        pairs: Sequence[tuple[str, str]],
        decide: Decide,
        claim: ClaimAsync | None = None,
    ) -> list[Any] | None:
        """On an asyncio psycopg connection in autocommit: one read a pair, then one
        statement (a transaction of two, the claims and the store, where batches carry
        dedupe digests and `claim` is given). None when `decide` leaves the group (a
        schema version not compiled yet: compiling reads) or the write failed (nothing
        of it was stored). A connection that broke raises SQLAlchemy's error, as a
        thread's write would (503): whether a write sent before it broke was committed
        is unknown."""
        import psycopg

        try:
            rows: dict[tuple[str, str], Any] = {}
            for client_id, dataset_id in pairs:
                cursor = await connection.execute(
                    TARGET_SQL, {"client_id": client_id, "dataset_id": dataset_id}
                )
                rows[(client_id, dataset_id)] = await cursor.fetchone()
            decision = decide(rows)
            if decision is None:
                return None
            outcomes, transactions, batches = decision
            if not transactions:
                return outcomes
            if any(batch.claims for batch in batches):
                if claim is None:
                    return None
                async with connection.transaction():
                    stored = await claim(connection, transactions, batches)
                    await self.store_async(connection, transactions, stored)
                return outcomes
            await self.store_async(connection, transactions, batches)
            return outcomes
        except psycopg.Error as exc:
            broken = connection.broken or connection.closed
            if broken:
                raise as_sqlalchemy_error(exc, broken=broken) from exc
            return None


PORTABLE = PortableSink()
POSTGRES = PostgresSink()


def for_dialect(name: str) -> RecordSink:
    """The sink for a database of this dialect."""
    return POSTGRES if name == "postgresql" else PORTABLE
