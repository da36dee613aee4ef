"""The record feed: every record once, in commit order, never skipping one that
committed late; cursors, long polling, scopes and tenants (contract section 14)."""

from __future__ import annotations

import base64
import random
import threading
import time
import uuid
from typing import Any

import pytest
from sqlalchemy import select
from starlette.testclient import TestClient

from headwater.db import Database
from headwater.ingestion import feed, lifecycle, sinks
from headwater.ingestion.models import Dataset
from headwater.kit.clock import utcnow
from headwater.runtime import Runtime
from tests.downstream.conftest import FeedTenant
from tests.factories import assert_problem, auth, create_credential, get_token
from tests.files.conftest import CSV_HEADER, csv_rows, run_worker


def test_following_from_the_start_answers_each_record_once_as_data_does(
    feed_tenant: FeedTenant,
) -> None:
    empty = feed_tenant.changes()
    assert empty["data"] == []
    feed_tenant.push_orders(1)
    feed_tenant.push_orders(2, 3, 4)
    feed_tenant.push_orders(5)
    records, cursor = feed_tenant.follow(limit=2)
    assert [r["data"]["order_id"] for r in records] == ["A-1", "A-2", "A-3", "A-4", "A-5"]
    # each record as GET /platform/v1/data answers it
    assert sorted(records, key=lambda r: r["record_id"]) == sorted(
        feed_tenant.records(), key=lambda r: r["record_id"]
    )
    # nothing new: the same cursor comes back, and the first cursor still works
    assert feed_tenant.changes(after=cursor) == {"data": [], "next_cursor": cursor}
    again, _ = feed_tenant.follow(empty["next_cursor"], limit=1000)
    assert again == records


@pytest.mark.parametrize("limit", [1, 3, 7, 1000])
def test_pages_split_and_join_transactions_at_any_size(feed_tenant: FeedTenant, limit: int) -> None:
    numbers = iter(range(100))
    for size in (1, 5, 2, 9, 1, 1, 4):
        feed_tenant.push_orders(*(next(numbers) for _ in range(size)))
    records, _ = feed_tenant.follow(limit=limit)
    assert [r["data"]["order_id"] for r in records] == [f"A-{n}" for n in range(23)]
    pages = feed_tenant.changes(limit=limit)
    assert len(pages["data"]) == min(limit, 23)


def test_a_files_records_follow_in_its_commit_order(feed_tenant: FeedTenant) -> None:
    feed_tenant.push_orders(1)
    ticket = feed_tenant.upload_url()
    # the upload is made before the push below, but its records commit after it
    feed_tenant.push_orders(2)
    assert (
        feed_tenant.put(ticket, (CSV_HEADER + csv_rows(3, start=100)).encode()).status_code == 200
    )
    assert run_worker(feed_tenant.client) >= 1  # other tests' files may wait too
    feed_tenant.push_orders(3)
    records, _ = feed_tenant.follow(limit=2)
    assert [r["data"]["order_id"] for r in records] == [
        "A-1", "A-2", "A-100", "A-101", "A-102", "A-3",
    ]  # fmt: skip
    assert {r["transaction_id"] for r in records[2:5]} == {ticket["transaction_id"]}


def _dataset(db: Database, tenant: FeedTenant) -> Dataset:
    with db.read_session() as session:
        return session.scalars(select(Dataset).where(Dataset.client_id == tenant.client_id)).one()


def _store(db: Database, dataset: Dataset, author: uuid.UUID, size: int, hold: float) -> list[str]:
    """`size` records in one transaction, stored by the sink in a database transaction
    held open `hold` seconds before its commit; their order ids."""
    now = utcnow()
    transaction = lifecycle.new(
        channel="api",
        kind="json",
        status=lifecycle.Status.COMPLETED,
        company_id=dataset.company_id,
        dataset_pk=dataset.id,
        client_id=dataset.client_id,
        dataset_id=dataset.dataset_id,
        author_id=author,
        created_at=now,
        schema_version=1,
        records_received=size,
        records_accepted=size,
    )
    names = [f"W-{uuid.uuid4().hex[:10]}" for _ in range(size)]
    batch = sinks.RecordBatch(
        records=[{"order_id": name, "amount": 1} for name in names],
        company_id=dataset.company_id,
        dataset_pk=dataset.id,
        transaction_id=transaction["id"],
        schema_version=1,
        ingested_at=now,
    )
    with db.begin() as connection:
        sinks.for_dialect(db.engine.dialect.name).store(connection, [transaction], [batch])
        time.sleep(hold)
    return names


def test_concurrent_writers_out_of_order_commits_every_record_exactly_once(
    db: Database, feed_tenant: FeedTenant
) -> None:
    """Writers insert in one order and commit in another (some hold their transaction
    open), pushes go through the API and a file is processed meanwhile; a reader follows
    the cursor all the while and finds each record once."""
    dataset = _dataset(db, feed_tenant)
    author = uuid.UUID(feed_tenant.credential["author_id"])
    written: list[str] = []
    lock = threading.Lock()
    rng = random.Random(11)
    # SQLite has one writer at a time: short holds, within its busy timeout
    scale = 0.1 if db.engine.dialect.name == "sqlite" else 1.0
    plan = [
        (rng.choice([1, 1, 3, 40]), scale * rng.choice([0, 0, 0.01, 0.05, 0.2])) for _ in range(96)
    ]

    def writer(k: int) -> None:
        for size, hold in plan[k * 12 : (k + 1) * 12]:
            names = _store(db, dataset, author, size, hold)
            with lock:
                written.extend(names)

    def pusher() -> None:
        for n in range(20):
            feed_tenant.push_orders(1000 + 2 * n, 1001 + 2 * n)
            with lock:
                written.extend([f"A-{1000 + 2 * n}", f"A-{1001 + 2 * n}"])

    seen: list[str] = []
    cursor = feed_tenant.changes()["next_cursor"]
    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    threads.append(threading.Thread(target=pusher))
    for thread in threads:
        thread.start()
    uploaded = False
    try:
        while any(t.is_alive() for t in threads):
            page = feed_tenant.changes(after=cursor, limit=rng.choice([1, 7, 50]))
            seen.extend(r["data"]["order_id"] for r in page["data"])
            cursor = page["next_cursor"]
            if not uploaded:
                transaction = feed_tenant.upload(CSV_HEADER + csv_rows(25, start=500))
                assert transaction["status"] == "completed", transaction
                written.extend(f"A-{n}" for n in range(500, 525))
                uploaded = True
    finally:
        for thread in threads:
            thread.join()
    rest, _ = feed_tenant.follow(cursor, limit=100)
    seen.extend(r["data"]["order_id"] for r in rest)
    assert len(seen) == len(set(seen)), "a record came twice"
    assert sorted(seen) == sorted(written), "a record was skipped"


def test_wait_answers_when_this_process_commits(feed_tenant: FeedTenant, make_client: Any) -> None:
    """With the poll at 30 s, only the in-process wake can answer a 20 s wait with the
    record pushed once the request waits."""
    client: TestClient = make_client(feed_poll_seconds=30)
    tenant = feed_tenant.via(client)
    cursor = tenant.changes()["next_cursor"]
    runtime: Runtime = client.app.state.runtime  # type: ignore[attr-defined]

    def push_when_waiting() -> None:
        for _ in range(2000):
            if runtime.commits.waiting():
                break
            time.sleep(0.01)
        tenant.push_orders(7)

    thread = threading.Thread(target=push_when_waiting)
    thread.start()
    page = tenant.changes(after=cursor, wait=20)
    thread.join()
    assert [r["data"]["order_id"] for r in page["data"]] == ["A-7"]
    assert runtime.commits.waiting() == 0


def test_wait_sees_another_process_commit_by_polling(
    db: Database, feed_tenant: FeedTenant, make_client: Any
) -> None:
    client: TestClient = make_client(feed_poll_seconds=0.2)
    tenant = feed_tenant.via(client)
    cursor = tenant.changes()["next_cursor"]
    dataset = _dataset(db, feed_tenant)
    author = uuid.UUID(feed_tenant.credential["author_id"])
    names: list[str] = []

    def write_when_waiting() -> None:
        runtime: Runtime = client.app.state.runtime  # type: ignore[attr-defined]
        for _ in range(2000):
            if runtime.commits.waiting():
                break
            time.sleep(0.01)
        names.extend(_store(db, dataset, author, 2, 0))

    thread = threading.Thread(target=write_when_waiting)
    thread.start()
    try:
        page = tenant.changes(after=cursor, wait=20)
    finally:
        thread.join()
    assert [r["data"]["order_id"] for r in page["data"]] == names


class PageSpy:
    """`feed.page` as the read-ahead and the requests call it: each call's cursor,
    whether a read-ahead thread made it, and an event set when a read-ahead ends."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[feed.Cursor, bool]] = []
        self.ahead_done = threading.Event()
        self.ahead_ended = 0
        counting = threading.Lock()  # two read-ahead threads may end at once
        real = feed.page

        def page(db: Database, dataset_pk: uuid.UUID, cursor: feed.Cursor, **kw: Any) -> Any:
            ahead = threading.current_thread().name.startswith("feed-ahead")
            self.calls.append((cursor, ahead))
            try:
                return real(db, dataset_pk, cursor, **kw)
            finally:
                if ahead:
                    with counting:
                        self.ahead_ended += 1
                    self.ahead_done.set()

        monkeypatch.setattr(feed, "page", page)


def test_the_page_after_a_full_page_is_read_ahead_and_taken_once(
    feed_tenant: FeedTenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    feed_tenant.push_orders(1, 2, 3, 4)
    spy = PageSpy(monkeypatch)
    records, _ = feed_tenant.follow(limit=2)
    assert [r["data"]["order_id"] for r in records] == ["A-1", "A-2", "A-3", "A-4"]
    read = [(ahead, cursor != feed.START) for cursor, ahead in spy.calls]
    # the first page by its request; the second read ahead and taken; the third read
    # ahead, came back empty, so read again by its request (and not read ahead after)
    assert read.count((False, False)) == 1
    assert read.count((True, True)) == 2
    assert read.count((False, True)) == 1
    assert len(read) == 4


def test_a_reader_finds_the_next_two_pages_read_ahead(
    feed_tenant: FeedTenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    feed_tenant.push_orders(1, 2, 3, 4, 5, 6)
    spy = PageSpy(monkeypatch)
    first = feed_tenant.changes(limit=2)
    deadline = time.monotonic() + 30
    while spy.ahead_ended < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    # before the reader asks again, the pages after A-2 and after A-4 were read ahead
    assert [ahead for _, ahead in spy.calls] == [False, True, True]
    assert len({cursor for cursor, _ in spy.calls}) == 3
    second = feed_tenant.changes(limit=2, after=first["next_cursor"])
    third = feed_tenant.changes(limit=2, after=second["next_cursor"])
    pages = [first, second, third]
    assert [r["data"]["order_id"] for p in pages for r in p["data"]] == [
        f"A-{n}" for n in range(1, 7)
    ]
    while spy.ahead_ended < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    # both requests took their pages ready and kept two ahead (the page after A-6,
    # empty, ends the chain): no request read its page itself
    assert [ahead for _, ahead in spy.calls] == [False, True, True, True]
    assert feed_tenant.changes(limit=2, after=third["next_cursor"])["data"] == []
    assert [ahead for _, ahead in spy.calls][4:] == [False]


def test_a_page_read_ahead_never_hides_a_readers_own_write(
    feed_tenant: FeedTenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    feed_tenant.push_orders(1, 2)
    spy = PageSpy(monkeypatch)
    first = feed_tenant.changes(limit=2)
    assert spy.ahead_done.wait(30), "the page after a full page was not read ahead"
    feed_tenant.push_orders(3)
    page = feed_tenant.changes(limit=2, after=first["next_cursor"])
    assert [r["data"]["order_id"] for r in page["data"]] == ["A-3"]


def test_an_empty_wait_answers_the_same_cursor(feed_tenant: FeedTenant) -> None:
    feed_tenant.push_orders(1)
    _, cursor = feed_tenant.follow()
    assert feed_tenant.changes(after=cursor, wait=0.3) == {"data": [], "next_cursor": cursor}


def test_bad_parameters_answer_400_naming_them(
    feed_tenant: FeedTenant, other_feed_tenant: FeedTenant
) -> None:
    feed_tenant.push_orders(1)
    other_feed_tenant.push_orders(1)
    _, theirs = other_feed_tenant.follow()
    _, mine = feed_tenant.follow()
    tag = _unb64(mine).split(":")[3]
    past_end = f"r1:999999:1:{tag}"
    for params, field in (
        ({"after": "not-a-cursor"}, "after"),
        ({"after": "cjE6eDp5Onp6"}, "after"),  # "r1:x:y:zz"
        ({"after": theirs}, "after"),  # another dataset's
        ({"after": _b64(past_end)}, "after"),
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"wait": "31"}, "wait"),
        ({"wait": "-1"}, "wait"),
        ({"wait": "nan"}, "wait"),
        ({"dataset_id": "no such id!"}, "dataset_id"),
        ({"since": "x"}, "since"),
    ):
        response = feed_tenant.client.get(
            "/platform/v1/data/changes",
            params={"client_id": feed_tenant.client_id, "dataset_id": "orders"} | params,
            headers=feed_tenant.headers,
        )
        assert_problem(response, 400)
        assert field in response.text, (params, response.text)
    missing = feed_tenant.client.get(
        "/platform/v1/data/changes", params={"dataset_id": "orders"}, headers=feed_tenant.headers
    )
    assert_problem(missing, 400)
    assert "client_id" in missing.text


def _b64(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _unb64(cursor: str) -> str:
    return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()


def test_the_feed_answers_only_the_callers_datasets(
    client: TestClient,
    admin: dict[str, str],
    feed_tenant: FeedTenant,
    other_feed_tenant: FeedTenant,
) -> None:
    other_feed_tenant.push_orders(9)
    # another company's client: 403; an unknown dataset: 404
    response = feed_tenant.client.get(
        "/platform/v1/data/changes",
        params={"client_id": other_feed_tenant.client_id, "dataset_id": "orders"},
        headers=feed_tenant.headers,
    )
    assert_problem(response, 403)
    response = feed_tenant.client.get(
        "/platform/v1/data/changes",
        params={"client_id": feed_tenant.client_id, "dataset_id": "nope"},
        headers=feed_tenant.headers,
    )
    assert_problem(response, 404)
    assert (
        client.get(
            "/platform/v1/data/changes", params={"client_id": "x", "dataset_id": "y"}
        ).status_code
        == 401
    )
    writer = create_credential(client, admin, feed_tenant.company_id, scopes=["data:write"])
    token = get_token(client, writer["client_id"], writer["client_secret"])
    response = client.get(
        "/platform/v1/data/changes",
        params={"client_id": feed_tenant.client_id, "dataset_id": "orders"},
        headers=auth(token),
    )
    assert_problem(response, 403)
