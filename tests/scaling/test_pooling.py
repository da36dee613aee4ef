"""The database through PgBouncer in transaction pooling mode (contract 19): with
HEADWATER_DATABASE_POOLING=transaction nothing relies on session state, so every path
works while each transaction may run on another server connection."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError
from starlette.testclient import TestClient

from headwater.config import Settings
from headwater.db import Database
from tests import pgbouncer
from tests.downstream.conftest import FeedTenant
from tests.downstream.test_exports import ask, fetch, read, run_exports
from tests.factories import create_company
from tests.files.conftest import CSV_HEADER, csv_rows
from tests.tenants import Tenant


@pytest.fixture(scope="module")
def bouncer(backend: str) -> Iterator[int]:
    if backend != "postgresql":
        pytest.skip("a pooler in front of PostgreSQL")
    if not pgbouncer.available():
        pytest.fail("PgBouncer is missing: scripts/test installs it (apt-get install pgbouncer)")
    # two server connections for every client this module opens: transactions of one
    # client run on different server connections, and session state would be lost
    with pgbouncer.pgbouncer(server_connections=2) as port:
        yield port


@pytest.fixture
def pooled(
    make_client: Callable[..., TestClient], base_settings: dict[str, Any], bouncer: int
) -> TestClient:
    """An app on the same database, through the pooler."""
    url = pgbouncer.through(base_settings["database_url"], bouncer)
    return make_client(database_url=url, database_pooling="transaction")


@pytest.fixture
def tenant(pooled: TestClient, admin: dict[str, str]) -> FeedTenant:
    return FeedTenant(pooled, admin, create_company(pooled, admin, "Pooled"))


def test_session_options_are_refused_by_the_pooler(
    base_settings: dict[str, Any], bouncer: int
) -> None:
    """Without the setting, reads ask for session options at connect, which a pooler in
    transaction mode refuses: the setting is what makes the service work behind one."""
    url = pgbouncer.through(base_settings["database_url"], bouncer)
    database = Database(Settings(**(base_settings | {"database_url": url})))
    try:
        with (
            pytest.raises(OperationalError, match="unsupported startup parameter"),
            database.read_connection() as connection,
        ):
            connection.exec_driver_sql("SELECT 1")
    finally:
        database.dispose()


def test_pushes_reads_and_the_feed_work_through_the_pooler(tenant: FeedTenant) -> None:
    # more runs of each statement than psycopg's threshold for preparing it (5): a
    # prepared statement would be missing on the next server connection
    for n in range(12):
        tenant.push_orders(n)
    for n in range(6):
        tenant.push_orders(100 + 2 * n, 101 + 2 * n)
    records, _cursor = tenant.follow(limit=5)
    assert sorted(r["data"]["order_id"] for r in records) == sorted(
        [f"A-{n}" for n in range(12)] + [f"A-{n}" for n in range(100, 112)]
    )
    listed = tenant.client.get(
        "/platform/v1/transactions",
        params={"client_id": tenant.client_id, "page_size": 100},
        headers=tenant.headers,
    )
    assert listed.status_code == 200, listed.text
    assert len(listed.json()["data"]) == 18


def test_files_and_exports_work_through_the_pooler(tenant: FeedTenant) -> None:
    transaction = tenant.upload(CSV_HEADER + csv_rows(300))
    assert (transaction["status"], transaction["records_accepted"]) == ("completed", 300)
    run_exports(tenant.client)  # exports other tests of this database left queued
    export = ask(tenant, format="ndjson")
    assert run_exports(tenant.client) == 1
    done = read(tenant, export["export_id"])
    assert done["status"] == "completed"
    assert fetch(tenant.client, done["download_url"]).count(b"\n") == 300


def test_the_activity_search_works_through_the_pooler(
    pooled: TestClient, admin: dict[str, str]
) -> None:
    searcher = Tenant(pooled, admin, create_company(pooled, admin, "Searched"))
    workflows = [searcher.workflow()["id"] for _ in range(3)]
    for _ in range(7):  # past the threshold for preparing the search's statements
        page = searcher.search({"page_size": 2, "filter": {"resource_type": "workflow"}})
        assert page["total_entries"] == 3
    found = searcher.search({"filter": {"resource_type": "workflow", "resource_id": workflows[1]}})
    assert [e["resource_id"] for e in found["data"]] == [workflows[1]]
