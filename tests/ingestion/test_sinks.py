"""The record sink contract: every sink passes every test here, on every database it can
run on (the portable sink on SQLite and PostgreSQL, PostgreSQL's on PostgreSQL)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
import sqlalchemy.exc
from sqlalchemy import func, select

from headwater.db import Database
from headwater.events.models import Event
from headwater.ingestion import lifecycle, sinks
from headwater.ingestion.lifecycle import IllegalTransition, Status
from headwater.ingestion.models import Transaction
from headwater.kit.clock import utcnow_ms
from tests.ingestion.conftest import DataTenant, order


@pytest.fixture(params=["portable", "postgresql"])
def sink(request: pytest.FixtureRequest, backend: str) -> sinks.RecordSink:
    if request.param == "postgresql" and backend != "postgresql":
        pytest.skip("PostgreSQL's sink runs on PostgreSQL only")
    return sinks.POSTGRES if request.param == "postgresql" else sinks.PORTABLE


def _db(tenant: DataTenant) -> Database:
    return tenant.client.app.state.runtime.db  # type: ignore[attr-defined,no-any-return]


def _dataset_pk(tenant: DataTenant) -> uuid.UUID:
    with _db(tenant).read_connection() as connection:
        return uuid.UUID(
            str(
                connection.scalar(
                    select(Transaction.dataset_pk).where(
                        Transaction.id == _first_transaction(tenant)
                    )
                )
            )
        )


def _first_transaction(tenant: DataTenant) -> uuid.UUID:
    pushed = tenant.push(order(0))
    assert pushed.status_code == 200, pushed.text
    return uuid.UUID(pushed.json()["transaction_id"])


def _transaction(
    tenant: DataTenant, dataset_pk: uuid.UUID, status: Status, **columns: Any
) -> dict[str, Any]:
    return lifecycle.new(
        channel="api" if status in lifecycle.FINAL else "upload",
        kind="json" if status in lifecycle.FINAL else "file",
        status=status,
        company_id=uuid.UUID(tenant.company_id),
        dataset_pk=dataset_pk,
        client_id=tenant.client_id,
        dataset_id="orders",
        author_id=uuid.uuid4(),
        created_at=utcnow_ms(),
        schema_version=1,
        **columns,
    )


def _batch(transaction: dict[str, Any], records: list[dict[str, Any]], **extra: Any) -> Any:
    return sinks.RecordBatch(
        records=records,
        company_id=transaction["company_id"],
        dataset_pk=transaction["dataset_pk"],
        transaction_id=transaction["id"],
        schema_version=1,
        ingested_at=transaction["created_at"],
        **extra,
    )


def _events(tenant: DataTenant, transaction_id: uuid.UUID) -> list[str]:
    with _db(tenant).read_session() as session:
        rows = session.scalars(select(Event).order_by(Event.seq)).all()
    return [e.type for e in rows if e.transaction_id == transaction_id]


def _event_as_written(tenant: DataTenant, transaction_id: uuid.UUID) -> dict[str, Any]:
    """The columns of the transaction's one event, as `lifecycle.finished` names them."""
    with _db(tenant).read_session() as session:
        [row] = session.scalars(select(Event).where(Event.transaction_id == transaction_id))
        return {key: getattr(row, key) for key in ("type", "company_id", "created_at", "data")}


def _write(tenant: DataTenant, sink: sinks.RecordSink, *args: Any) -> None:
    with _db(tenant).begin() as connection:
        sink.store(connection, *args)


def test_store_writes_transactions_events_records_and_counts(
    data_tenant: DataTenant, sink: sinks.RecordSink
) -> None:
    dataset_pk = _dataset_pk(data_tenant)
    done = [
        _transaction(data_tenant, dataset_pk, Status.COMPLETED, records_received=n) for n in (3, 2)
    ]
    rejected = _transaction(data_tenant, dataset_pk, Status.REJECTED, records_received=1)
    batches = [
        _batch(done[0], [order(1), order(2), order(3)]),
        _batch(done[1], [order(4), order(5)]),
    ]
    _write(data_tenant, sink, [*done, rejected], batches)
    for transaction, numbers in zip(done, ([1, 2, 3], [4, 5]), strict=True):
        stored = data_tenant.records(transaction_id=str(transaction["id"]))
        assert [r["data"]["order_id"] for r in stored] == [f"A-{n}" for n in numbers]
        assert _events(data_tenant, transaction["id"]) == ["transaction.completed"]
    assert data_tenant.records(transaction_id=str(rejected["id"])) == []
    assert _events(data_tenant, rejected["id"]) == ["transaction.rejected"]
    # one event maker: whatever the sink writes (SQL on PostgreSQL's), `finished` would
    for transaction in [*done, rejected]:
        made = lifecycle.finished(transaction)
        expected = {key: made[key] for key in ("type", "company_id", "created_at", "data")}
        assert _event_as_written(data_tenant, transaction["id"]) == expected
    # the kept count (the records page's total without a filter) counts all of them
    page = data_tenant.client.get(
        "/platform/v1/data",
        params={"client_id": data_tenant.client_id, "dataset_id": "orders"},
        headers=data_tenant.headers,
    ).json()
    assert page["total_entries"] == 6


def test_store_keeps_the_json_text_it_is_given(
    data_tenant: DataTenant, sink: sinks.RecordSink
) -> None:
    """A record's known JSON text is stored as it is: member order and all."""
    dataset_pk = _dataset_pk(data_tenant)
    transaction = _transaction(data_tenant, dataset_pk, Status.COMPLETED, records_received=2)
    records = [{"amount": 1, "order_id": "B-1"}, {"order_id": "B-2", "amount": 2}]
    texts = ['{"amount":1,"order_id":"B-1"}', None]
    _write(data_tenant, sink, [transaction], [_batch(transaction, records, texts=texts)])
    stored = data_tenant.records(transaction_id=str(transaction["id"]))
    assert [list(r["data"]) for r in stored] == [["amount", "order_id"], ["order_id", "amount"]]


def test_store_refuses_a_transaction_that_is_not_final(
    data_tenant: DataTenant, sink: sinks.RecordSink
) -> None:
    dataset_pk = _dataset_pk(data_tenant)
    pending = _transaction(data_tenant, dataset_pk, Status.PROCESSING)
    with pytest.raises(IllegalTransition):
        _write(data_tenant, sink, [pending], [])
    with _db(data_tenant).read_connection() as connection:
        assert (
            connection.scalar(select(Transaction.id).where(Transaction.id == pending["id"])) is None
        )


def test_store_is_all_or_nothing(data_tenant: DataTenant, sink: sinks.RecordSink) -> None:
    """A transaction whose id is taken fails the store: no other transaction, record,
    count or event of it stays."""
    taken = _first_transaction(data_tenant)
    dataset_pk = _dataset_pk(data_tenant)
    fresh = _transaction(data_tenant, dataset_pk, Status.COMPLETED, records_received=1)
    clash = _transaction(data_tenant, dataset_pk, Status.COMPLETED, records_received=1)
    clash["id"] = taken
    with _db(data_tenant).read_session() as session:
        events_before = session.scalar(select(func.count()).select_from(Event))
    with pytest.raises(sqlalchemy.exc.IntegrityError):
        _write(data_tenant, sink, [fresh, clash], [_batch(fresh, [order(8)])])
    assert data_tenant.records(transaction_id=str(fresh["id"])) == []
    with _db(data_tenant).read_session() as session:
        assert session.scalar(select(func.count()).select_from(Event)) == events_before
    assert data_tenant.transactions()["total_entries"] == 2  # the two pushes of the set-up
    assert len(data_tenant.records()) == 2


def test_add_appends_records_to_an_open_transaction(
    data_tenant: DataTenant, sink: sinks.RecordSink
) -> None:
    """A file's batches, added one after another in its database transaction: in order,
    counted, and no event (the file is not final yet)."""
    dataset_pk = _dataset_pk(data_tenant)
    transaction = _transaction(data_tenant, dataset_pk, Status.PROCESSING)
    with _db(data_tenant).begin() as connection:
        lifecycle.begin(connection, transaction)
        sink.add(connection, [_batch(transaction, [order(10), order(11)])])
        sink.add(connection, [_batch(transaction, [])])  # an empty batch: nothing
        sink.add(connection, [_batch(transaction, [order(12)])])
    stored = data_tenant.records(transaction_id=str(transaction["id"]))
    assert [r["data"]["order_id"] for r in stored] == ["A-10", "A-11", "A-12"]
    assert _events(data_tenant, transaction["id"]) == []
    page = data_tenant.client.get(
        "/platform/v1/data",
        params={"client_id": data_tenant.client_id, "dataset_id": "orders"},
        headers=data_tenant.headers,
    ).json()
    assert page["total_entries"] == 4  # the set-up's push and three added


AWKWARD_TEXTS = [
    "back\\slash",
    "\\.",
    "\\N",
    "tab\tnew\nline\rreturn",
    'quote " and \\" escaped',
    "\u00e9\u4e2d\U0001f600",
    "",
]


def test_add_stores_every_text_as_it_is_given(
    data_tenant: DataTenant, sink: sinks.RecordSink
) -> None:
    """Backslashes, `\\.` and `\\N`, control characters, quotes and characters outside
    ASCII come back as they went in, with each record's own id, from several batches
    of one call."""
    dataset_pk = _dataset_pk(data_tenant)
    transaction = _transaction(data_tenant, dataset_pk, Status.PROCESSING)
    records = [{"order_id": f"C-{i}", "note": text} for i, text in enumerate(AWKWARD_TEXTS)]
    with _db(data_tenant).begin() as connection:
        lifecycle.begin(connection, transaction)
        sink.add(connection, [_batch(transaction, records[:3]), _batch(transaction, records[3:])])
    stored = data_tenant.records(transaction_id=str(transaction["id"]))
    assert [r["data"] for r in stored] == records
    ids = [r["record_id"] for r in stored]
    assert len(set(ids)) == len(records)
    assert all(uuid.UUID(record_id).version == 4 for record_id in ids)
    assert {r["ingested_at"] for r in stored} == {
        transaction["created_at"].isoformat(timespec="milliseconds").replace("+00:00", "Z")
    }


def test_write_group_on_the_event_loop(data_tenant: DataTenant, sink: sinks.RecordSink) -> None:
    """PostgreSQL's sink reads the targets and stores a group on an asyncio connection;
    the portable sink leaves every group to the thread path (None)."""
    dataset_pk = _dataset_pk(data_tenant)
    transaction = _transaction(data_tenant, dataset_pk, Status.COMPLETED, records_received=1)
    seen: dict[tuple[str, str], Any] = {}

    def decide(rows: dict[tuple[str, str], Any]) -> Any:
        seen.update(rows)
        return (["answered"], [transaction], [_batch(transaction, [order(20)])])

    async def run() -> Any:
        if sink is sinks.PORTABLE:
            return await sink.write_group(None, [(data_tenant.client_id, "orders")], decide)  # type: ignore[arg-type]
        connection = await _db(data_tenant).connect_async()
        try:
            return await sink.write_group(
                connection, [(data_tenant.client_id, "orders"), ("nobody", "orders")], decide
            )
        finally:
            await connection.close()

    outcome = asyncio.run(run())
    if sink is sinks.PORTABLE:
        assert outcome is None and not seen
        return
    assert outcome == ["answered"]
    assert seen[(data_tenant.client_id, "orders")].id == dataset_pk
    assert seen[("nobody", "orders")] is None  # no such client
    assert [
        r["data"]["order_id"] for r in data_tenant.records(transaction_id=str(transaction["id"]))
    ] == ["A-20"]
    assert _events(data_tenant, transaction["id"]) == ["transaction.completed"]
