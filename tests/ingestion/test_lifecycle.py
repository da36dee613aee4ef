"""One transaction lifecycle (contract section 10): every final status, reached once, by
any channel, writes its event (section 13's shape) in the same database transaction."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select
from starlette.testclient import TestClient

from headwater.events.models import Event
from headwater.files import service as files
from headwater.ingestion import lifecycle
from headwater.ingestion.lifecycle import IllegalTransition, Status
from headwater.ingestion.models import Transaction
from headwater.kit.clock import utcnow_ms
from headwater.runtime import Runtime
from tests.files.conftest import CSV_HEADER, FileTenant, csv_rows
from tests.ingestion.conftest import DataTenant, order


@pytest.fixture
def file_tenant(client: TestClient, admin: dict[str, str], company: str) -> FileTenant:
    return FileTenant(client, admin, company)


def _runtime(tenant: DataTenant) -> Runtime:
    return tenant.client.app.state.runtime  # type: ignore[attr-defined,no-any-return]


def events_of(tenant: DataTenant, transaction_id: str) -> list[Any]:
    """The outbox rows that report on one transaction, in the order they were written."""
    with _runtime(tenant).db.read_session() as session:
        rows = session.scalars(select(Event).order_by(Event.seq)).all()
        return [row for row in rows if str(row.transaction_id) == transaction_id]


def _as_answered(tenant: DataTenant, transaction_id: str) -> Any:
    got = tenant.client.get(f"/platform/v1/transactions/{transaction_id}", headers=tenant.headers)
    assert got.status_code == 200, got.text
    return got.json()


def _check_event(tenant: DataTenant, transaction_id: str, status: str) -> Any:
    """Exactly one event for the transaction, of its final status, whose data is the
    transaction as the API answers it."""
    events = events_of(tenant, transaction_id)
    assert [e.type for e in events] == [f"transaction.{status}"]
    event = events[0]
    answered = _as_answered(tenant, transaction_id)
    assert answered["status"] == status
    with _runtime(tenant).db.read_session() as session:
        row = session.execute(
            select(*lifecycle.COLUMNS).where(Transaction.id == uuid.UUID(transaction_id))
        ).one()
    whole = lifecycle.event_json(event, row._asdict())
    assert whole["data"] == answered
    assert whole["type"] == f"transaction.{status}" and whole["id"] == str(event.id)
    assert str(event.company_id) == tenant.company_id
    assert (
        event.created_at.isoformat(timespec="milliseconds")[:23] == (answered["completed_at"][:23])
    )
    return whole


def test_a_completed_push_writes_its_event(data_tenant: DataTenant) -> None:
    pushed = data_tenant.push([order(1), order(2)])
    assert pushed.status_code == 200, pushed.text
    _check_event(data_tenant, pushed.json()["transaction_id"], "completed")


def test_a_rejected_push_writes_its_event_with_the_errors(data_tenant: DataTenant) -> None:
    pushed = data_tenant.push([order(1), {"order_id": "x", "amount": "no"}])
    assert pushed.status_code == 422, pushed.text
    event = _check_event(data_tenant, pushed.json()["transaction_id"], "rejected")
    assert event["data"]["errors"][0]["path"] == "/amount"
    assert event["data"]["errors"][0]["line"] is None


def test_a_keyed_push_replayed_writes_no_second_event(data_tenant: DataTenant) -> None:
    first = data_tenant.push(order(1), key="once")
    again = data_tenant.push(order(1), key="once")
    assert again.headers["Idempotent-Replayed"] == "true"
    _check_event(data_tenant, first.json()["transaction_id"], "completed")


def test_refused_pushes_write_no_event(data_tenant: DataTenant) -> None:
    """403 and 404 make no transaction, so no event."""
    with _runtime(data_tenant).db.read_session() as session:
        before = session.scalar(select(func.count()).select_from(Event))
    assert data_tenant.push(order(1), dataset_id="missing").status_code == 404
    assert data_tenant.push(order(1), client_id="nobody").status_code == 403
    with _runtime(data_tenant).db.read_session() as session:
        assert session.scalar(select(func.count()).select_from(Event)) == before


def test_a_processed_file_writes_its_event(file_tenant: FileTenant) -> None:
    transaction = file_tenant.upload(CSV_HEADER + csv_rows(5))
    assert transaction["status"] == "completed"
    event = _check_event(file_tenant, transaction["transaction_id"], "completed")
    assert event["data"]["channel"] == "upload" and event["data"]["records_processed"] == 5


def test_a_rejected_file_writes_its_event(file_tenant: FileTenant) -> None:
    transaction = file_tenant.upload(CSV_HEADER + "A-1,x@example.com,not a number,1,true,\n")
    assert transaction["status"] == "rejected"
    _check_event(file_tenant, transaction["transaction_id"], "rejected")


def test_an_expired_upload_writes_its_event_once(file_tenant: FileTenant) -> None:
    ticket = file_tenant.upload_url()
    db = _runtime(file_tenant).db
    assert files.expire_uploads(db, grace=timedelta(seconds=-3600)) >= 1
    assert files.expire_uploads(db, grace=timedelta(seconds=-3600)) == 0
    _check_event(file_tenant, ticket["transaction_id"], "expired")


def test_a_file_that_fails_for_good_writes_its_event(file_tenant: FileTenant) -> None:
    ticket = file_tenant.upload_url()
    assert file_tenant.put(ticket, (CSV_HEADER + csv_rows(2)).encode()).status_code == 200
    db = _runtime(file_tenant).db
    with db.begin() as connection:  # as after its last attempt
        assert lifecycle.finish(
            connection,
            uuid.UUID(ticket["transaction_id"]),
            Status.FAILED,
            completed_at=utcnow_ms(),
        )
    _check_event(file_tenant, ticket["transaction_id"], "failed")


def _pending(tenant: FileTenant) -> uuid.UUID:
    return uuid.UUID(tenant.upload_url()["transaction_id"])


def test_a_final_status_is_reached_once(file_tenant: FileTenant) -> None:
    """A second finish, to any final status, changes nothing and writes no event."""
    db = _runtime(file_tenant).db
    transaction_id = _pending(file_tenant)
    with db.begin() as connection:
        assert lifecycle.finish(connection, transaction_id, Status.EXPIRED)
        assert not lifecycle.finish(connection, transaction_id, Status.EXPIRED)
        assert not lifecycle.finish(connection, transaction_id, Status.REJECTED)
        assert not lifecycle.advance(connection, transaction_id, Status.PROCESSING)
    assert _as_answered(file_tenant, str(transaction_id))["status"] == "expired"
    assert len(events_of(file_tenant, str(transaction_id))) == 1


def test_only_legal_moves_happen(file_tenant: FileTenant) -> None:
    """awaiting_upload cannot complete or fail without being processed first."""
    db = _runtime(file_tenant).db
    transaction_id = _pending(file_tenant)
    with db.begin() as connection:
        assert not lifecycle.finish(connection, transaction_id, Status.COMPLETED)
        assert not lifecycle.finish(connection, transaction_id, Status.FAILED)
        assert lifecycle.advance(connection, transaction_id, Status.PROCESSING)
        assert not lifecycle.finish(connection, transaction_id, Status.EXPIRED)
        assert lifecycle.finish(connection, transaction_id, Status.COMPLETED)
    assert [e.type for e in events_of(file_tenant, str(transaction_id))] == [
        "transaction.completed"
    ]


def test_a_change_rolled_back_leaves_no_event(file_tenant: FileTenant) -> None:
    """The status and its event are one database transaction: both, or neither."""
    db = _runtime(file_tenant).db
    transaction_id = _pending(file_tenant)
    with pytest.raises(RuntimeError), db.begin() as connection:
        assert lifecycle.finish(connection, transaction_id, Status.EXPIRED)
        raise RuntimeError("the change fails after its status was written")
    assert _as_answered(file_tenant, str(transaction_id))["status"] == "awaiting_upload"
    assert events_of(file_tenant, str(transaction_id)) == []


def test_misuse_is_refused_before_any_write() -> None:
    """Programming errors, not input: a final status through `advance`, a status that is
    not final through `finish`, a transaction begun final through `begin`."""
    row = lifecycle.new(
        channel="sftp",
        kind="file",
        status=Status.COMPLETED,
        company_id=uuid.uuid4(),
        dataset_pk=uuid.uuid4(),
        client_id="c",
        dataset_id="d",
        author_id=uuid.uuid4(),
        created_at=utcnow_ms(),
    )
    with pytest.raises(IllegalTransition):
        lifecycle.begin(None, row)  # type: ignore[arg-type]
    with pytest.raises(IllegalTransition):
        lifecycle.advance(None, uuid.uuid4(), Status.COMPLETED)  # type: ignore[arg-type]
    with pytest.raises(IllegalTransition):
        lifecycle.finish(None, uuid.uuid4(), Status.PROCESSING)  # type: ignore[arg-type]
    with pytest.raises(IllegalTransition):
        lifecycle.new(**{**_args(), "status": Status.FAILED})
    with pytest.raises(IllegalTransition):
        lifecycle.new(**{**_args(), "channel": "fax"})
    with pytest.raises(IllegalTransition):
        lifecycle.note(None, uuid.uuid4(), status="completed")  # type: ignore[arg-type]


def _args() -> dict[str, Any]:
    return {
        "channel": "api",
        "kind": "json",
        "status": Status.COMPLETED,
        "company_id": uuid.uuid4(),
        "dataset_pk": uuid.uuid4(),
        "client_id": "c",
        "dataset_id": "d",
        "author_id": uuid.uuid4(),
        "created_at": None,
    }


def test_every_status_is_in_the_table_and_final_ones_lead_nowhere() -> None:
    assert set(lifecycle.TRANSITIONS) == set(Status)
    assert all(not lifecycle.TRANSITIONS[status] for status in lifecycle.FINAL)
    # every final status is reachable, and only through a status that is not final
    reachable = set().union(*lifecycle.TRANSITIONS.values()) | lifecycle.BEGINS
    assert reachable == set(Status)


def test_no_transaction_row_is_left_without_its_event(data_tenant: DataTenant) -> None:
    """Across pushes of every outcome, every final transaction has exactly one event."""
    for n in range(3):
        data_tenant.push([order(n)])
    data_tenant.push({"order_id": "x", "amount": "bad"})
    data_tenant.push(order(7), key="k")
    with _runtime(data_tenant).db.read_session() as session:
        ids = session.scalars(
            select(Transaction.id).where(
                Transaction.company_id == uuid.UUID(data_tenant.company_id)
            )
        ).all()
    assert len(ids) == 5
    for transaction_id in ids:
        assert len(events_of(data_tenant, str(transaction_id))) == 1
