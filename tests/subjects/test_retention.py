"""Retention (contract section 17): a dataset's `retention_days` and raw file retention,
run as the scheduler runs them, on both databases."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy import update

from headwater import worker
from headwater.ingestion.models import Record, Transaction
from headwater.kit.clock import utcnow
from headwater.runtime import Runtime
from tests.factories import assert_problem
from tests.files.conftest import CSV_HEADER
from tests.subjects.conftest import SubjectTenant, customer
from tests.subjects.test_erasures import _object_key

ADA, BOB = "ada@example.com", "bob@example.com"


def _runtime(tenant: SubjectTenant) -> Runtime:
    return tenant.client.app.state.runtime  # type: ignore[attr-defined,no-any-return]


def _age(tenant: SubjectTenant, transaction_id: str, days: float) -> None:
    """Make a transaction and its records look `days` old."""
    then = utcnow() - timedelta(days=days)
    tid = uuid.UUID(transaction_id)
    with _runtime(tenant).db.begin() as connection:
        connection.execute(
            update(Transaction)
            .where(Transaction.id == tid)
            .values(created_at=then, completed_at=then)
        )
        connection.execute(
            update(Record).where(Record.transaction_id == tid).values(ingested_at=then)
        )


def _set_options(tenant: SubjectTenant, **options: Any) -> Any:
    current = tenant.client.get(
        f"/admin/v1/clients/{tenant.client_id}/datasets/orders", headers=tenant.admin
    ).json()["options"]
    return tenant.client.put(
        f"/admin/v1/clients/{tenant.client_id}/datasets/orders/options",
        json={"options": current | options},
        headers=tenant.admin,
    )


def _retain(tenant: SubjectTenant) -> None:
    asyncio.run(worker.apply_retention(_runtime(tenant)))


def test_records_past_the_datasets_retention_go_with_their_rows_and_files(
    subject_tenant: SubjectTenant,
) -> None:
    assert _set_options(subject_tenant, retention_days=7).status_code == 200
    old_push = subject_tenant.push([customer(1, ADA), customer(2, BOB)]).json()
    csv = CSV_HEADER + f"A-3,{ADA},3.5,3,true,2026-11-22T10:00:00Z\n"
    csv += f"A-4,{ADA},oops,4,true,2026-11-22T10:00:00Z\n"
    old_file = subject_tenant.upload(csv)
    new_push = subject_tenant.push(customer(5, BOB)).json()
    old_ids = {r["record_id"] for r in subject_tenant.all_records()} - {
        r["record_id"] for r in subject_tenant.records(transaction_id=new_push["transaction_id"])
    }
    for transaction in (old_push, old_file):
        _age(subject_tenant, transaction["transaction_id"], days=8)
    key = _object_key(subject_tenant, old_file["transaction_id"])
    cursor_before = subject_tenant.follow()[1]

    _retain(subject_tenant)

    remaining = subject_tenant.all_records()
    assert [r["data"]["order_id"] for r in remaining] == ["A-5"]
    assert _runtime(subject_tenant).store.head(key) is None
    assert subject_tenant.transaction(old_file["transaction_id"])["file_erased"] is True
    rows = subject_tenant.client.get(
        f"/platform/v1/transactions/{old_file['transaction_id']}/quarantine",
        headers=subject_tenant.headers,
    ).json()
    assert rows["data"] == []
    # followers are told, as for an erasure
    told, _ = subject_tenant.follow(cursor_before)
    assert {e["record_id"] for e in told if e.get("erased")} == old_ids
    _retain(subject_tenant)  # a second pass finds nothing more
    assert len(subject_tenant.all_records()) == 1


def test_raw_files_go_after_their_days_whatever_the_dataset(
    subject_tenant: SubjectTenant,
) -> None:
    old = subject_tenant.upload(CSV_HEADER + f"A-1,{BOB},1.5,1,true,2026-11-22T10:00:00Z\n")
    new = subject_tenant.upload(CSV_HEADER + f"A-2,{BOB},2.5,2,true,2026-11-22T10:00:00Z\n")
    old_key = _object_key(subject_tenant, old["transaction_id"])
    new_key = _object_key(subject_tenant, new["transaction_id"])
    _age(subject_tenant, old["transaction_id"], days=31)  # the default is 30
    _retain(subject_tenant)
    store = _runtime(subject_tenant).store
    assert store.head(old_key) is None and store.head(new_key) is not None
    assert subject_tenant.transaction(old["transaction_id"])["file_erased"] is True
    assert subject_tenant.transaction(new["transaction_id"])["file_erased"] is False
    assert len(subject_tenant.all_records()) == 2  # records stay: no retention_days


def test_retention_days_are_checked(subject_tenant: SubjectTenant) -> None:
    for bad in (0, 3651, "7", 1.5):
        assert_problem(_set_options(subject_tenant, retention_days=bad), 400)
    assert _set_options(subject_tenant, retention_days=3650).status_code == 200
