"""Reads that may lag go to a replica (HEADWATER_DATABASE_READ_URL, contract 19); every
other read, and every write, to the database.

The replica here is a copy of the database taken at one moment (`CREATE DATABASE ...
TEMPLATE`), which then never catches up: a replica lagging for good. What the service
answers from it shows which reads go where."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import event
from starlette.testclient import TestClient

from headwater import db as db_module
from headwater.config import Settings
from headwater.main import create_app
from tests.factories import (
    OPERATOR_ID,
    OPERATOR_SECRET,
    SEALING_KEY,
    auth,
    create_credential,
    fresh_pg_database,
    get_token,
    pg_admin,
)
from tests.ingestion.conftest import DataTenant, order


def _settings(tmp_path: Path, url: str, **more: Any) -> Settings:
    return Settings(
        data_dir=tmp_path,
        database_url=url,
        bootstrap_client_id=OPERATOR_ID,
        bootstrap_client_secret=OPERATOR_SECRET,
        public_url="http://testserver",
        worker_enabled=False,
        webhook_secret_key=SEALING_KEY,
        db_connections=6,
        log_level="WARNING",
        **more,
    )


@pytest.fixture
def lagging(backend: str, tmp_path: Path) -> Iterator[tuple[TestClient, DataTenant, str]]:
    """An app whose replica stopped after the tenant's first push: the app, the tenant,
    the id of the transaction pushed since."""
    if backend != "postgresql":
        pytest.skip("a replica is PostgreSQL's")
    with (
        fresh_pg_database("hw_primary") as (primary, url),
        fresh_pg_database("hw_replica") as (replica, replica_url),
    ):
        with TestClient(create_app(_settings(tmp_path, url))) as client:
            admin = auth(get_token(client, OPERATOR_ID, OPERATOR_SECRET))
            company = client.post("/admin/v1/companies", json={"name": "R"}, headers=admin)
            tenant = DataTenant(client, admin, company.json()["id"])
            assert tenant.push(order(1)).status_code == 200
        pg_admin(f'DROP DATABASE "{replica}"')
        pg_admin(
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{primary}'"
        )
        pg_admin(f'CREATE DATABASE "{replica}" TEMPLATE "{primary}"')
        settings = _settings(tmp_path, url, database_read_url=replica_url)
        with TestClient(create_app(settings)) as client:
            tenant.client = client
            pushed = tenant.push(order(2))
            assert pushed.status_code == 200, pushed.text
            yield client, tenant, pushed.json()["transaction_id"]


def _ids(page: dict[str, Any], key: str = "order_id") -> list[Any]:
    return sorted(item["data"][key] for item in page["data"])


def test_lists_read_the_replica(lagging: tuple[TestClient, DataTenant, str]) -> None:
    client, tenant, _second = lagging
    assert [r["data"]["order_id"] for r in tenant.records()] == [order(1)["order_id"]]
    assert len(tenant.transactions()["data"]) == 1
    streamed = client.get(
        "/platform/v1/data",
        params={"client_id": tenant.client_id, "dataset_id": "orders"},
        headers=tenant.headers | {"accept": "application/x-ndjson"},
    )
    assert streamed.text.count("\n") == 1, streamed.text
    asked = client.post(
        "/platform/v1/exports",
        json={"client_id": tenant.client_id, "dataset_id": "orders", "format": "ndjson"},
        headers=tenant.headers,
    )
    assert asked.status_code == 202, asked.text
    export = f"/platform/v1/exports/{asked.json()['export_id']}"
    assert client.get(export, headers=tenant.headers).status_code == 200  # the database's
    listed = client.get("/platform/v1/exports", headers=tenant.headers)
    assert listed.json()["data"] == []  # the replica's


def test_a_read_after_a_write_and_the_feed_past_a_lagging_replica_read_the_database(
    lagging: tuple[TestClient, DataTenant, str],
) -> None:
    client, tenant, second = lagging
    one = client.get(f"/platform/v1/transactions/{second}", headers=tenant.headers)
    assert one.status_code == 200, one.text  # not on the replica: read where it was written
    changes = client.get(
        "/platform/v1/data/changes",
        params={"client_id": tenant.client_id, "dataset_id": "orders"},
        headers=tenant.headers,
    )
    assert _ids(changes.json()) == sorted([order(1)["order_id"], order(2)["order_id"]])


def test_a_replica_found_behind_is_skipped_for_a_while(
    lagging: tuple[TestClient, DataTenant, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a page at the end waited for the replica in vain, the next ones read the
    database at once (for `REPLICA_BEHIND`, made long here): the pools' checkouts show
    the first page looked at the replica again and again, the second only once (its
    first read, which a full page would have ended)."""
    monkeypatch.setattr(db_module, "REPLICA_BEHIND", 3600.0)
    client, tenant, _second = lagging
    db = client.app.state.runtime.db  # type: ignore[attr-defined]
    where: list[str] = []
    event.listen(db.replica.pool, "checkout", lambda *_: where.append("replica"))
    event.listen(db.reader.pool, "checkout", lambda *_: where.append("database"))
    params = {"client_id": tenant.client_id, "dataset_id": "orders"}
    pages = []
    for _ in range(2):
        where.clear()
        page = client.get("/platform/v1/data/changes", params=params, headers=tenant.headers)
        pages.append((page.json(), where.count("replica"), where[-1]))
    both = sorted([order(1)["order_id"], order(2)["order_id"]])
    (first, looks, last), (second, looks_again, last_again) = pages
    assert _ids(first) == _ids(second) == both
    assert looks > 2 and last == "database", (looks, last)
    assert looks_again == 1 and last_again == "database", (looks_again, last_again)


def test_a_replica_url_needs_postgresql(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="HEADWATER_DATABASE_READ_URL"):
        Settings(data_dir=tmp_path, database_read_url="postgresql://127.0.0.1/replica")


def test_the_openapi_description_says_what_may_lag(client: TestClient) -> None:
    """The rule as a client reads it: every list served by the replica is named as one
    that may lag, and the feeds and reads by id as ones that never do."""
    description = client.get("/openapi.json").json()["info"]["description"]
    said = description.split("**What may lag.**")[1].split("**Pages.**")[0]
    lagging, current = said.split("A read by id")
    for path in (
        "GET /platform/v1/data`",
        "GET /platform/v1/transactions`",
        "GET /platform/v1/exports`",
        "GET /platform/v1/erasures`",
        "POST /app/v1/activities/search`",
    ):
        assert path in lagging, path
    for path in ("GET /platform/v1/data/changes`", "GET /platform/v1/events`"):
        assert path in current, path


def test_the_feeds_read_a_replica_that_keeps_up(backend: str, tmp_path: Path) -> None:
    """A replica with no lag (the database itself, as a second URL): the feeds' pages
    are read there, with the reader's own writes, numbered on the database. The pools'
    checkouts show where: the page is the replica's last."""
    if backend != "postgresql":
        pytest.skip("a replica is PostgreSQL's")
    with fresh_pg_database("hw_same") as (_name, url):
        app = create_app(_settings(tmp_path, url, database_read_url=url))
        where: list[str] = []
        with TestClient(app) as client:
            db = app.state.runtime.db
            assert db.has_replica
            event.listen(db.replica.pool, "checkout", lambda *_: where.append("replica"))
            event.listen(db.reader.pool, "checkout", lambda *_: where.append("database"))
            admin = auth(get_token(client, OPERATOR_ID, OPERATOR_SECRET))
            company = client.post("/admin/v1/companies", json={"name": "S"}, headers=admin)
            tenant = DataTenant(client, admin, company.json()["id"])
            reader = create_credential(client, admin, company.json()["id"], scopes=["events:read"])
            events_headers = auth(get_token(client, reader["client_id"], reader["client_secret"]))
            for n in (1, 2):
                assert tenant.push(order(n)).status_code == 200
            where.clear()
            changes = client.get(
                "/platform/v1/data/changes",
                params={"client_id": tenant.client_id, "dataset_id": "orders"},
                headers=tenant.headers,
            )
            assert _ids(changes.json()) == sorted([order(1)["order_id"], order(2)["order_id"]])
            # the first read and the page on the replica; the dataset, and what waits for
            # a place, on the database (where it is numbered)
            assert where[-1] == "replica" and where.count("replica") == 2, where
            assert "database" in where, where
            where.clear()
            events = client.get("/platform/v1/events", headers=events_headers)
            assert len(events.json()["data"]) >= 2, events.text
            assert where[-1] == "replica", where
