"""kill -9 of the API process during sustained pushes: nothing acknowledged is lost,
nothing is stored twice, no transaction is half-stored.

Clients push batches with an Idempotency-Key and retry on any transport error or 5xx,
as a well-behaved client does; the server is killed (SIGKILL, no shutdown handler runs)
while requests are in flight, then started again on the same port.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.http_server import ServerProcess
from tests.ingestion.conftest import DataTenant, order
from tests.reliability.conftest import operator_headers, server_env

# every test here starts server processes (run in scripts/test's second step)
pytestmark = pytest.mark.http

PUSHERS = 4
BATCHES = 12  # per pusher
BATCH = 50


def _push_until_acknowledged(
    http: httpx.Client,
    tenant: DataTenant,
    key: str,
    records: list[dict[str, object]],
    failures: Counter[str],
) -> str:
    """Retry one batch until it is acknowledged; answers its transaction id."""
    deadline = time.monotonic() + 90
    headers = tenant.headers | {"Idempotency-Key": key}
    while True:
        try:
            response = http.post(
                "/platform/v1/data/json", json=tenant.envelope(records), headers=headers
            )
            if response.status_code == 200:
                return str(response.json()["transaction_id"])
            assert response.status_code >= 500 or response.status_code == 409, response.text
            failures[str(response.status_code)] += 1
        except httpx.TransportError as exc:
            failures[type(exc).__name__] += 1
        assert time.monotonic() < deadline, f"batch {key} never acknowledged"
        time.sleep(0.05)


def test_kill_9_during_pushes_loses_nothing_and_stores_nothing_twice(
    tmp_path: Path, pg_url: str
) -> None:
    server = ServerProcess(
        server_env(tmp_path, pg_url, HEADWATER_RATE_LIMIT_PER_SECOND="100000"),
        log=tmp_path / "server.log",
    ).start()
    try:
        with httpx.Client(base_url=server.url, timeout=10) as http:
            admin = operator_headers(server.url)
            company = http.post("/admin/v1/companies", json={"name": "Crash"}, headers=admin)
            tenant = DataTenant(http, admin, company.json()["id"])  # type: ignore[arg-type]

        acknowledged: dict[str, str] = {}  # idempotency key -> transaction id
        lock = threading.Lock()
        errors: list[BaseException] = []
        failures: Counter[str] = Counter()

        def pusher(n: int) -> None:
            try:
                with httpx.Client(base_url=server.url, timeout=10) as http:
                    for b in range(BATCHES):
                        key = f"p{n}-b{b}"
                        records = [order(i, channel=f"{key}-{i}") for i in range(BATCH)]
                        transaction = _push_until_acknowledged(http, tenant, key, records, failures)
                        with lock:
                            acknowledged[key] = transaction
            except BaseException as exc:  # surfaced by the main thread
                errors.append(exc)

        threads = [threading.Thread(target=pusher, args=(n,)) for n in range(PUSHERS)]
        for thread in threads:
            thread.start()
        while len(acknowledged) < PUSHERS * BATCHES // 3 and not errors:
            time.sleep(0.01)
        server.kill()  # mid-stream: other batches are in flight
        killed_after = len(acknowledged)
        server.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not errors, errors
        assert 0 < killed_after < PUSHERS * BATCHES
        assert len(acknowledged) == PUSHERS * BATCHES
        assert failures, "the kill should have cut requests and refused connections"
    finally:
        server.stop()

    with psycopg.connect(pg_url) as conn:
        tags = Counter(row[0] for row in conn.execute("SELECT data::json->>'channel' FROM records"))
        per_transaction = {
            row[0]: (row[1], row[2])
            for row in conn.execute(
                "SELECT t.id::text, t.records_accepted, "
                "(SELECT count(*) FROM records r WHERE r.transaction_id = t.id) "
                "FROM transactions t"
            )
        }
    expected = {
        f"p{n}-b{b}-{i}" for n in range(PUSHERS) for b in range(BATCHES) for i in range(BATCH)
    }
    # every acknowledged record is stored, exactly once, and nothing else is
    assert set(tags) == expected
    assert set(tags.values()) == {1}
    # each acknowledged batch is its transaction, whole
    for transaction in acknowledged.values():
        assert per_transaction[transaction] == (BATCH, BATCH)
    # no transaction anywhere holds part of its records
    assert all(accepted == stored for accepted, stored in per_transaction.values())
    print(
        f"acknowledged {len(acknowledged) * BATCH} records ({killed_after} batches before "
        f"the kill), stored {sum(tags.values())}; failed tries retried: {dict(failures)}"
    )
