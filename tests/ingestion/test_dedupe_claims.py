"""Dedupe claims (`ingestion.dedupe`) in two open database transactions: the second
claim of a digest waits for the first and finds it once the first commits, or takes it
if the first rolls back. SQLite has one writer, so the race exists on PostgreSQL alone."""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from starlette.testclient import TestClient

from headwater.config import Settings
from headwater.db import Database
from headwater.ingestion import dedupe
from headwater.ingestion.sinks import RecordBatch
from headwater.kit.clock import utcnow_ms
from tests.factories import database


@pytest.fixture
def db(settings: Settings, backend: str, client: TestClient) -> Iterator[Database]:
    """The tests' database (`client` migrated it), on PostgreSQL."""
    if backend != "postgresql":
        pytest.skip("two writers at once: PostgreSQL only")
    with database(settings) as own:
        yield own


def batch(company: uuid.UUID, dataset: uuid.UUID, digests: list[bytes]) -> RecordBatch:
    return RecordBatch(
        records=[{"n": i} for i in range(len(digests))],
        company_id=company,
        dataset_pk=dataset,
        transaction_id=uuid.uuid4(),
        schema_version=1,
        ingested_at=utcnow_ms(),
        digests=list(digests),
        window=timedelta(hours=1),
    )


@pytest.mark.parametrize("first_commits", [True, False])
def test_a_second_claim_waits_for_the_first(db: Database, first_commits: bool) -> None:
    company, dataset = uuid.uuid4(), uuid.uuid4()
    shared, own = b"s" * 32, b"o" * 32
    outcome: list[int] = []
    started = threading.Event()

    def second() -> None:
        with db.begin() as connection:
            started.set()
            kept, _ = dedupe.claim(connection, [batch(company, dataset, [shared, own])])
            outcome.append(len(kept[0].records))

    with db.begin() as connection:
        kept, _ = dedupe.claim(connection, [batch(company, dataset, [shared])])
        assert len(kept[0].records) == 1
        thread = threading.Thread(target=second)
        thread.start()
        started.wait()
        thread.join(timeout=0.5)
        assert thread.is_alive(), "the second claim waits for the first transaction"
        if not first_commits:
            connection.rollback()
    thread.join()
    # committed: the shared digest was the first's, the second keeps only its own
    assert outcome == [1 if first_commits else 2]


def test_claims_past_the_longest_window_are_purged_in_batches(
    settings: Settings, client: TestClient
) -> None:
    with database(settings) as db:
        company, dataset = uuid.uuid4(), uuid.uuid4()
        now = utcnow_ms()
        old = [bytes([n]) * 32 for n in range(5)]
        fresh = [b"f" * 32]
        with db.begin() as connection:
            stale = batch(company, dataset, old)
            stale = dataclasses.replace(stale, ingested_at=now - timedelta(hours=721))
            dedupe.claim(connection, [stale])
            dedupe.claim(connection, [batch(company, dataset, fresh)])
        assert dedupe.purge(db, now=now, batch=2) >= 5
        with db.begin() as connection:
            kept, _ = dedupe.claim(connection, [batch(company, dataset, old + fresh)])
        # the purged digests are new again; the fresh one is still claimed
        assert len(kept[0].records) == 5
