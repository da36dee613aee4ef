"""Idempotency-Key on pushes: replay, conflict, concurrency, expiry (contract section 4)."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import update

from headwater.config import Settings
from headwater.ingestion.models import IdempotencyKey
from headwater.kit.clock import utcnow
from tests.factories import assert_problem, database
from tests.ingestion.conftest import DataTenant, order


def test_same_key_same_body_answers_the_first_answer(data_tenant: DataTenant) -> None:
    key = str(uuid.uuid4())
    first = data_tenant.push([order(1), order(2)], key=key)
    again = data_tenant.push([order(1), order(2)], key=key)
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert len(data_tenant.records()) == 2
    assert data_tenant.transactions()["total_entries"] == 1


def test_a_rejected_push_replays_its_422(data_tenant: DataTenant) -> None:
    first = data_tenant.push({"amount": "x"}, key="k-422")
    again = data_tenant.push({"amount": "x"}, key="k-422")
    assert_problem(first, 422)
    assert_problem(again, 422)
    assert again.json()["transaction_id"] == first.json()["transaction_id"]
    assert data_tenant.transactions()["total_entries"] == 1


def test_same_key_other_body_409(data_tenant: DataTenant) -> None:
    assert data_tenant.push(order(1), key="k1").status_code == 200
    assert_problem(data_tenant.push(order(2), key="k1"), 409, "idempotency_key_reused")
    assert len(data_tenant.records()) == 1


def test_keys_are_per_company(data_tenant: DataTenant, other_data_tenant: DataTenant) -> None:
    a = data_tenant.push(order(1), key="shared")
    b = other_data_tenant.push(order(1), key="shared")
    assert a.status_code == b.status_code == 200
    assert a.json()["transaction_id"] != b.json()["transaction_id"]


@pytest.mark.parametrize("key", [b"", b"x" * 256, "naïve".encode(), b"tab\there"])
def test_malformed_keys_400(data_tenant: DataTenant, key: bytes) -> None:
    headers = data_tenant.headers | {"Idempotency-Key": key}
    response = data_tenant.client.post(
        "/platform/v1/data/json",
        content=f'{{"client_id": "{data_tenant.client_id}", "dataset_id": "orders", '
        '"data": {"order_id": "a", "amount": 1}}'.encode(),
        headers=headers | {"Content-Type": "application/json"},
    )
    assert_problem(response, 400)
    assert data_tenant.records() == []


def test_concurrent_requests_with_one_key_store_once(data_tenant: DataTenant) -> None:
    batch = [order(i) for i in range(1000)]
    results: list[Any] = []
    start = threading.Barrier(4)

    def send() -> None:
        start.wait()
        results.append(data_tenant.push(batch, key="race"))

    threads = [threading.Thread(target=send) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.status_code == 200 for r in results), [r.text for r in results]
    assert len({r.json()["transaction_id"] for r in results}) == 1
    assert sum(r.headers.get("Idempotent-Replayed") == "true" for r in results) == 3
    assert data_tenant.transactions()["total_entries"] == 1
    stored = data_tenant.client.get(
        "/platform/v1/data",
        params={"client_id": data_tenant.client_id, "dataset_id": "orders"},
        headers=data_tenant.headers,
    ).json()
    assert stored["total_entries"] == 1000


def test_keys_expire_after_24_hours(data_tenant: DataTenant, settings: Settings) -> None:
    first = data_tenant.push(order(1), key="old")
    with database(settings) as db, db.unit_of_work() as session:
        session.execute(
            update(IdempotencyKey)
            .where(IdempotencyKey.key == "old")
            .values(created_at=utcnow() - timedelta(hours=24, seconds=1))
        )
        session.commit()
    second = data_tenant.push(order(2), key="old")  # another body: no 409 once expired
    assert second.status_code == 200, second.text
    assert second.json()["transaction_id"] != first.json()["transaction_id"]
    assert len(data_tenant.records()) == 2
    third = data_tenant.push(order(2), key="old")
    assert third.json()["transaction_id"] == second.json()["transaction_id"]


def test_worker_purges_expired_keys(data_tenant: DataTenant, settings: Settings) -> None:
    from headwater.ingestion.service import purge_idempotency_keys

    data_tenant.push(order(1), key="purge-me")
    with database(settings) as db, db.unit_of_work() as session:
        session.execute(
            update(IdempotencyKey)
            .where(IdempotencyKey.key == "purge-me")
            .values(created_at=utcnow() - timedelta(days=2))
        )
        session.commit()
        assert purge_idempotency_keys(session, older_than=timedelta(hours=24)) >= 1
        assert session.get(IdempotencyKey, (uuid.UUID(data_tenant.company_id), "purge-me")) is None
