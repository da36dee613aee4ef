"""The `dedupe` step's claims (contract section 16): a record is stored only if its
digest (`transforms.Steps.run`) is claimed by its write, in the database transaction
that stores it.

A claim is one primary-key probe a record: `INSERT ... ON CONFLICT DO UPDATE ... WHERE
the claim there is older than the window RETURNING digest`. A digest that comes back is
new (or its last record is out of the window), and the record is stored; one that does
not is a duplicate. On PostgreSQL the statement answers the duplicates instead (the
digests it was given less those it claimed): most records are new, and reading back
each one's digest cost more than its claim. Two transactions claiming one digest at
once: on PostgreSQL the second waits for the first's row and finds it when the first
commits (or takes it if the first rolls back); SQLite has one writer. Claims are made
in dataset and digest order, so two writes seldom wait on each other's rows in opposite
order (PostgreSQL ends such a deadlock; a group is then written again push by push, a
single push answers 503 `database_busy`).

A file's claims are made as its batches are staged, and released with its records if
the file is discarded (`release`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, delete, select
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from headwater.db import Database, delete_in_batches, driver_execute
from headwater.ingestion.models import DedupeKey
from headwater.ingestion.sinks import RecordBatch

if TYPE_CHECKING:
    import psycopg

# rows a statement: within SQLite's bound parameters
CHUNK = 1000


Group = tuple[uuid.UUID, uuid.UUID, timedelta, uuid.UUID | None]


@dataclass(frozen=True, slots=True)
class Claims:
    """What a write of some batches claims: for each (company, dataset, window, staging
    transaction) its digests in order, each once (the first record of the write holding
    it claims it; the others are its duplicates), and the time they are claimed at (the
    first batch's: the pushes of a group are a few milliseconds apart)."""

    groups: dict[Group, tuple[list[bytes], datetime]]

    @classmethod
    def of(cls, batches: Sequence[RecordBatch], *, staged: bool = False) -> Claims:
        groups: dict[Group, tuple[set[bytes], datetime]] = {}
        for batch in batches:
            if not batch.claims:
                continue
            assert batch.digests is not None and batch.window is not None
            key = (
                batch.company_id,
                batch.dataset_pk,
                batch.window,
                batch.transaction_id if staged else None,
            )
            digests, _ = groups.setdefault(key, (set(), batch.ingested_at))
            digests.update(digest for digest in batch.digests if digest is not None)
        # datasets, then digests, in one order: two writes seldom wait on each other's
        # rows in opposite order (PostgreSQL ends a deadlock; the group is tried again)
        return cls(
            {
                key: (sorted(groups[key][0]), groups[key][1])
                for key in sorted(groups, key=lambda k: (k[1], k[2]))
            }
        )

    def statements(
        self, dialect: str
    ) -> Iterator[tuple[uuid.UUID, list[bytes], Any, dict[str, Any] | None]]:
        """The claiming statements, each with its dataset and digests: psycopg's SQL
        and its parameters on PostgreSQL, which answers the digests it did not claim;
        elsewhere a SQLAlchemy statement (and None), which answers those it claimed."""
        for (company_id, dataset_pk, window, staged_by), (digests, at) in self.groups.items():
            if dialect == "postgresql":
                yield (
                    dataset_pk,
                    digests,
                    _CLAIM_SQL,
                    {
                        "company_id": company_id,
                        "dataset_pk": dataset_pk,
                        "at": at,
                        "cutoff": at - window,
                        "staged_by": staged_by,
                        "digests": digests,
                    },
                )
                continue
            for start in range(0, len(digests), CHUNK):
                chunk = digests[start : start + CHUNK]
                statement = sqlite_insert(DedupeKey).values(
                    [
                        {
                            "company_id": company_id,
                            "dataset_pk": dataset_pk,
                            "digest": digest,
                            "seen_at": at,
                            "staged_by": staged_by,
                        }
                        for digest in chunk
                    ]
                )
                yield (
                    dataset_pk,
                    chunk,
                    statement.on_conflict_do_update(
                        index_elements=["company_id", "dataset_pk", "digest"],
                        set_={
                            "seen_at": statement.excluded.seen_at,
                            "staged_by": statement.excluded.staged_by,
                        },
                        where=DedupeKey.seen_at < at - window,
                    ).returning(DedupeKey.digest),
                    None,
                )

    @staticmethod
    def apply(
        batches: Sequence[RecordBatch], claimed: set[tuple[uuid.UUID, bytes]]
    ) -> tuple[list[RecordBatch], dict[uuid.UUID, int]]:
        """The batches with their duplicates left out, and how many each transaction
        lost, from the (dataset, digest) pairs the write claimed."""
        out: list[RecordBatch] = []
        lost: dict[uuid.UUID, int] = {}
        for batch in batches:
            if not batch.claims:
                out.append(batch)
                continue
            assert batch.digests is not None
            records, subjects = [], []
            owners = batch.subjects or [None] * len(batch.records)
            for record, digest, subject in zip(batch.records, batch.digests, owners, strict=True):
                if digest is None:
                    pass
                elif (batch.dataset_pk, digest) in claimed:
                    claimed.discard((batch.dataset_pk, digest))  # its first record only
                else:
                    continue
                records.append(record)
                subjects.append(subject)
            count = len(batch.records) - len(records)
            lost[batch.transaction_id] = lost.get(batch.transaction_id, 0) + count
            if count:
                kept = subjects if batch.subjects is not None else None
                batch = replace(batch, records=records, digests=None, texts=None, subjects=kept)
            out.append(batch)
        return out, lost


def claim(
    connection: Connection, batches: Sequence[RecordBatch], *, staged: bool = False
) -> tuple[list[RecordBatch], dict[uuid.UUID, int]]:
    """Claim the batches' digests in the caller's database transaction: the batches with
    their duplicates left out, and how many each transaction lost. Of two records of one
    dataset holding one digest, the first (in the batches' order) may be stored.
    `staged`: a file's batch, whose claims go if the file is discarded (`release`)."""
    claimed: set[tuple[uuid.UUID, bytes]] = set()
    claims = Claims.of(batches, staged=staged)
    for dataset_pk, digests, statement, params in claims.statements(connection.dialect.name):
        if params is None:
            rows = connection.execute(statement)
            claimed.update((dataset_pk, bytes(row.digest)) for row in rows)
        else:
            answered = driver_execute(connection, statement, params)
            duplicates = {bytes(row.digest) for row in answered}
            claimed.update((dataset_pk, d) for d in digests if d not in duplicates)
    return Claims.apply(batches, claimed)


async def claim_async(
    connection: psycopg.AsyncConnection[Any], batches: Sequence[RecordBatch]
) -> tuple[list[RecordBatch], dict[uuid.UUID, int]]:
    """`claim` on an asyncio psycopg connection (PostgreSQL), in its open transaction."""
    claimed: set[tuple[uuid.UUID, bytes]] = set()
    for dataset_pk, digests, statement, params in Claims.of(batches).statements("postgresql"):
        cursor = await connection.execute(statement, params)
        duplicates = {bytes(row[0]) for row in await cursor.fetchall()}
        claimed.update((dataset_pk, d) for d in digests if d not in duplicates)
    return Claims.apply(batches, claimed)


# PostgreSQL's claim of a dataset's digests, through psycopg itself: they travel as one
# binary bytea[] (SQLAlchemy compiling a 500-row VALUES list cost more than the insert;
# as text, psycopg's escaping of each digest cost 5 us), in order; it answers the
# digests not claimed, the duplicates (the materialised CTE keeps the order).
_CLAIM_SQL = """
WITH given AS (
    SELECT digest FROM unnest(%(digests)b::bytea[]) AS digest
), claimed AS (
    INSERT INTO dedupe_keys (company_id, dataset_pk, digest, seen_at, staged_by)
    SELECT %(company_id)s, %(dataset_pk)s, digest, %(at)s, %(staged_by)s FROM given
    ON CONFLICT (company_id, dataset_pk, digest) DO UPDATE
    SET seen_at = excluded.seen_at, staged_by = excluded.staged_by
    WHERE dedupe_keys.seen_at < %(cutoff)s
    RETURNING digest
)
SELECT digest FROM given EXCEPT ALL SELECT digest FROM claimed
"""


def release(db: Database, transaction_id: uuid.UUID) -> int:
    """Forget a discarded transaction's claims (its records were never shown), in short
    database transactions; how many."""
    return delete_in_batches(
        db, DedupeKey.staged_by, transaction_id, order=DedupeKey.digest, batch=CHUNK * 5
    )


# The longest window a dedupe step may have: a claim older than this is of no use.
LONGEST_WINDOW = timedelta(hours=720)


def purge(db: Database, *, now: datetime, batch: int = CHUNK * 5) -> int:
    """Forget claims older than the longest window, `batch` a short database
    transaction (a range of `seen_at`, through its index); how many went."""
    removed = 0
    cutoff = now - LONGEST_WINDOW
    while True:
        with db.begin() as connection:
            last = connection.scalar(
                select(DedupeKey.seen_at)
                .where(DedupeKey.seen_at < cutoff)
                .order_by(DedupeKey.seen_at)
                .offset(batch - 1)
                .limit(1)
            )
            bound = DedupeKey.seen_at < cutoff if last is None else DedupeKey.seen_at <= last
            removed += int(connection.execute(delete(DedupeKey).where(bound)).rowcount)
        if last is None:
            return removed
