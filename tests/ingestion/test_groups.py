"""Group commit of small pushes: concurrent pushes share a database transaction, and
each still gets its own transaction, its own answer and only its own records."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
import uuid
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import orjson
import psycopg
import pytest
import sqlalchemy.exc

from headwater.db import Database
from headwater.errors import DomainError
from headwater.identity.tokens import Principal
from headwater.ingestion import groups, service, sinks
from headwater.ingestion.router import push_response
from headwater.ingestion.schemas import PushResult
from tests.ingestion.conftest import DataTenant, order


def _concurrently(calls: list[Any]) -> list[Any]:
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        results[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_concurrent_small_pushes_each_get_their_own_transaction(data_tenant: DataTenant) -> None:
    calls = [
        (lambda n=n: data_tenant.push([order(n, channel=f"c{n}-{i}") for i in range(3)]))
        for n in range(24)
    ]
    answers = _concurrently(calls)
    assert {a.status_code for a in answers} == {200}
    transactions = {a.json()["transaction_id"] for a in answers}
    assert len(transactions) == 24
    for answer in answers:
        stored = data_tenant.records(transaction_id=answer.json()["transaction_id"])
        channels = {r["data"]["channel"] for r in stored}
        assert len(stored) == 3 and len({c.split("-")[0] for c in channels}) == 1
    assert data_tenant.transactions(page_size=100)["total_entries"] == 24


def test_refused_pushes_do_not_disturb_their_group(
    data_tenant: DataTenant, other_data_tenant: DataTenant
) -> None:
    good = [(lambda n=n: data_tenant.push([order(n)])) for n in range(12)]
    bad = [
        lambda: data_tenant.push([order(0)], dataset_id="missing"),  # 404
        lambda: data_tenant.push([{"order_id": "X", "amount": "no"}]),  # 422
        lambda: data_tenant.push([order(0)], client_id=other_data_tenant.client_id),  # 403
    ]
    answers = _concurrently([*good, *bad] * 2)
    statuses = [a.status_code for a in answers]
    assert statuses == ([200] * 12 + [404, 422, 403]) * 2
    assert len(data_tenant.records(page_size=100)) == 24
    rejected = data_tenant.transactions(status="rejected")["total_entries"]
    assert rejected == 2


def _caller(data_tenant: DataTenant) -> Principal:
    return Principal(
        subject=data_tenant.credential["client_id"],
        author_id=uuid.UUID(data_tenant.credential["author_id"]),
        company_id=uuid.UUID(data_tenant.company_id),
        client_ids=(),
        scopes=frozenset({"data:read", "data:write"}),
    )


def test_a_group_stores_each_transaction_as_its_answer_says(data_tenant: DataTenant) -> None:
    """One group, several transaction rows written together (one statement on
    PostgreSQL): each reads back with its own counts, status, errors and times."""
    database: Database = data_tenant.client.app.state.runtime.db  # type: ignore[attr-defined]
    caller = _caller(data_tenant)
    batches = [
        [order(1)],
        [order(2), order(3)],
        [order(4), {"order_id": "X-5", "amount": "no"}],  # rejected: one bad record
        [order(6)],
    ]
    pushes = [service.SmallPush(caller, data_tenant.client_id, "orders", b) for b in batches]
    outcomes = service.push_group(database, pushes)
    assert all(isinstance(o, service.Pushed) for o in outcomes)
    responses = [push_response(o) for o in outcomes if isinstance(o, service.Pushed)]
    answers = [orjson.loads(r.body) for r in responses]
    assert [r.status_code for r in responses] == [200, 200, 422, 200]
    for batch, answer in zip(batches, answers, strict=True):
        got = data_tenant.client.get(
            f"/platform/v1/transactions/{answer['transaction_id']}",
            headers=data_tenant.headers,
        )
        assert got.status_code == 200, got.text
        row = got.json()
        assert row["records_received"] == len(batch)
        assert row["schema_version"] == 1
        assert row["client_id"] == data_tenant.client_id and row["dataset_id"] == "orders"
        assert row["created_at"].endswith("Z") and row["completed_at"] == row["created_at"]
        if "errors" in answer:  # the rejected push
            assert row["status"] == "rejected" and row["records_accepted"] == 0
            assert row["records_rejected"] == 1 and row["error_count"] == answer["error_count"]
            # the transaction's errors add `line` (null for a push: files name their lines)
            assert [{**e, "line": None} for e in answer["errors"]] == row["errors"]
            assert row["errors"][0]["record"] == 1 and row["errors"][0]["path"] == "/amount"
        else:
            assert row["status"] == "completed" and row["records_accepted"] == len(batch)
            assert row["errors"] == [] and row["error_count"] == 0
            # the answer is PushResult exactly, member for member and in its order
            assert list(answer) == list(PushResult.model_fields)
            assert PushResult.model_validate(answer).model_dump(mode="json") == answer
            assert answer["received_at"] == row["created_at"]
            # its records, in order, and only its own (written with several batches'
            # records in one statement, each to its transaction)
            stored = data_tenant.records(transaction_id=answer["transaction_id"])
            assert [r["data"]["order_id"] for r in stored] == [r["order_id"] for r in batch]
            assert {r["ingested_at"] for r in stored} == {row["created_at"]}
    assert len(data_tenant.records(page_size=100)) == 4


def test_a_group_that_fails_as_a_whole_is_stored_one_push_at_a_time(
    data_tenant: DataTenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever fails a group's transaction, each push is tried again on its own."""
    store = service._store

    def failing_for_groups(connection: Any, transactions: list[Any], batches: list[Any]) -> None:
        if len(transactions) > 1:
            raise sqlalchemy.exc.IntegrityError("INSERT", {}, Exception("as if"))
        store(connection, transactions, batches)

    monkeypatch.setattr(service, "_store", failing_for_groups)
    database: Database = data_tenant.client.app.state.runtime.db  # type: ignore[attr-defined]
    caller = _caller(data_tenant)
    pushes = [
        service.SmallPush(caller, data_tenant.client_id, "orders", [order(n)]) for n in range(5)
    ]
    pushes.append(service.SmallPush(caller, data_tenant.client_id, "missing", [order(9)]))
    outcomes = service.push_group(database, pushes)
    assert [getattr(o, "accepted", None) for o in outcomes[:5]] == [True] * 5
    assert isinstance(outcomes[5], DomainError) and outcomes[5].status == 404
    assert len(data_tenant.records(page_size=100)) == 5


def test_a_group_write_is_all_or_nothing(data_tenant: DataTenant) -> None:
    """A group's write (one statement on PostgreSQL, in autocommit) stores every
    transaction, record and count of it, or nothing: here its last transaction row clashes
    with a stored one, and neither the other row nor any record nor count is left."""
    database: Database = data_tenant.client.app.state.runtime.db  # type: ignore[attr-defined]
    caller = _caller(data_tenant)
    first = data_tenant.push([order(1)])
    assert first.status_code == 200, first.text
    taken = uuid.UUID(first.json()["transaction_id"])
    with database.read_connection() as connection:
        target = service._target(connection, caller, data_tenant.client_id, "orders")
    checked = [
        service._check(
            caller, data_tenant.client_id, "orders", [order(n), order(n + 10)], target, nul=False
        )
        for n in (2, 3)
    ]
    clash = dataclasses.replace(checked[1], transaction={**checked[1].transaction, "id": taken})
    with pytest.raises(sqlalchemy.exc.IntegrityError), database.atomic() as connection:
        service._store(connection, *service._rows([checked[0], clash]))

    stored = data_tenant.client.get(
        "/platform/v1/data",
        params={"client_id": data_tenant.client_id, "dataset_id": "orders"},
        headers=data_tenant.headers,
    ).json()
    assert [r["data"]["order_id"] for r in stored["data"]] == ["A-1"]
    assert stored["total_entries"] == 1  # the kept count, not a scan: unchanged
    assert data_tenant.transactions()["total_entries"] == 1


_LIMITS = service.Limits(max_records=10, max_depth=32, idempotency_ttl=timedelta(hours=1))


def _anyone() -> Principal:
    return Principal(
        subject="c",
        author_id=uuid.uuid4(),
        company_id=uuid.uuid4(),
        client_ids=(),
        scopes=frozenset(),
    )


def test_no_push_waits_for_a_writer_that_has_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Waves of pushes, with writers finishing and starting between them: every push is
    answered (a writer counted after it had gone would leave a push waiting for ever)."""
    written: list[int] = []

    def fake_group(_db: Any, pushes: list[Any]) -> list[Any]:
        written.extend(len(p.records) for p in pushes)
        return [service.Pushed({"status": "completed"}) for _ in pushes]

    monkeypatch.setattr(service, "push_group", fake_group)
    sqlite = SimpleNamespace(
        engine=SimpleNamespace(dialect=SimpleNamespace(name="sqlite")),
        shares=SimpleNamespace(push_writers=1),
    )
    queue = groups.PushQueue(sqlite)  # type: ignore[arg-type]
    caller, limits = _anyone(), _LIMITS
    body = orjson.dumps({"client_id": "crm", "dataset_id": "orders", "data": {"a": 1}})

    async def waves() -> None:
        for wave in range(200):
            pushes = [
                queue.push(caller, body=body, idempotency_key=None, limits=limits)
                for _ in range(wave % 7 + 1)
            ]
            answers = await asyncio.wait_for(asyncio.gather(*pushes), timeout=10)
            assert [a.accepted for a in answers] == [True] * len(pushes)
            for _ in range(wave % 23):  # the next wave comes at every moment of the writer's
                await asyncio.sleep(0)  # wind-down: its turns, its check, its end

    asyncio.run(waves())
    asyncio.run(queue.close())
    assert sum(written) == sum(w % 7 + 1 for w in range(200))


@pytest.fixture
def pg_tenant(backend: str, data_tenant: DataTenant) -> DataTenant:
    if backend != "postgresql":
        pytest.skip("groups are written on the event loop on PostgreSQL only")
    first = data_tenant.push([order(0)])  # compiles the schema in this process
    assert first.status_code == 200, first.text
    return data_tenant


def test_on_postgresql_groups_are_written_on_the_event_loop(
    pg_tenant: DataTenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once its schema is compiled, a group is read, checked and stored on the loop:
    the thread path is not taken, and every push is stored as answered."""

    def no_thread(*_args: Any) -> Any:
        raise AssertionError("the thread path was taken")

    monkeypatch.setattr(service, "push_group", no_thread)
    answers = _concurrently([(lambda n=n: pg_tenant.push([order(n)])) for n in range(1, 13)])
    assert [a.status_code for a in answers] == [200] * 12
    refused = pg_tenant.push([order(99)], dataset_id="missing")
    assert refused.status_code == 404
    stored = pg_tenant.records(page_size=100)
    assert sorted(r["data"]["order_id"] for r in stored) == sorted(f"A-{n}" for n in range(13))


def test_a_group_whose_write_fails_on_the_loop_is_written_again_on_a_thread(
    pg_tenant: DataTenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A statement that fails stores nothing; the group goes to `push_group`, which
    stores each push once."""
    calls: list[int] = []

    async def failing(*_args: Any) -> None:
        calls.append(1)
        raise psycopg.errors.SerializationFailure("as if")

    monkeypatch.setattr(sinks.PostgresSink, "store_async", failing)
    answers = _concurrently([(lambda n=n: pg_tenant.push([order(n)])) for n in range(1, 7)])
    assert [a.status_code for a in answers] == [200] * 6
    assert calls, "the loop's write was tried first"
    assert len(pg_tenant.records(page_size=100)) == 7
    assert pg_tenant.transactions()["total_entries"] == 7


def test_a_database_lost_under_a_group_on_the_loop_answers_503(
    pg_tenant: DataTenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection that breaks under a group's write: 503 (with Retry-After), and the
    group is not tried again (whether the write committed is unknown)."""

    async def lost(_sink: Any, connection: psycopg.AsyncConnection[Any], *_args: Any) -> None:
        await connection.close()  # as when the server goes away mid-statement
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(sinks.PostgresSink, "store_async", lost)
    answer = pg_tenant.push([order(1)])
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert "retry-after" in answer.headers
    assert len(pg_tenant.records(page_size=100)) == 1  # the fixture's push only


def test_large_pushes_are_checked_two_at_a_time_and_keyed_small_ones_are_not_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    running = {"large": 0, "small": 0}
    most = {"large": 0, "small": 0}
    gate = threading.Barrier(4, timeout=10)  # four keyed small pushes must meet at once

    def fake_push(_db: Any, _caller: Any, *, body: bytes, **_: Any) -> service.Pushed:
        kind = "large" if len(body) > groups.SMALL_BODY else "small"
        with lock:
            running[kind] += 1
            most[kind] = max(most[kind], running[kind])
        if kind == "small":
            gate.wait()
        else:
            time.sleep(0.02)
        with lock:
            running[kind] -= 1
        return service.Pushed({"status": "completed"})

    lock = threading.Lock()
    monkeypatch.setattr(service, "push", fake_push)
    sqlite = SimpleNamespace(
        engine=SimpleNamespace(dialect=SimpleNamespace(name="sqlite")),
        shares=SimpleNamespace(push_writers=2),
    )
    queue = groups.PushQueue(sqlite)  # type: ignore[arg-type]
    caller, limits = _anyone(), _LIMITS
    large = b" " * (groups.SMALL_BODY + 1)

    async def pushes() -> list[service.Pushed]:
        return await asyncio.gather(
            *[
                queue.push(caller, body=large, idempotency_key=None, limits=limits)
                for _ in range(6)
            ],
            *[
                queue.push(caller, body=b"{}", idempotency_key=f"k{i}", limits=limits)
                for i in range(4)
            ],
        )

    answers = asyncio.run(asyncio.wait_for(pushes(), timeout=20))
    asyncio.run(queue.close())
    assert [a.accepted for a in answers] == [True] * 10
    assert most["large"] == groups.LARGE_AT_ONCE
    assert most["small"] == 4
