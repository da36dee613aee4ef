"""Wake-ups across processes (contract 19, `headwater.wakeups`): work left by one node
starts at once on another, with every idle loop's poll far longer than the wait."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy import text

from headwater import wakeups
from headwater.config import Settings
from headwater.db import Database
from tests.factories import (
    OPERATOR_ID,
    OPERATOR_SECRET,
    auth,
    database,
    fresh_pg_database,
    get_token,
)
from tests.http_server import ServerProcess
from tests.ingestion.conftest import DataTenant, order

# every loop's look at the database without a wake-up, far beyond the tests' waits
LONG = "300"


@pytest.fixture
def announced(settings: Settings) -> Iterator[tuple[Database, list[tuple[str, str]]]]:
    heard: list[tuple[str, str]] = []
    with database(settings) as db:
        db.announcer.handle(lambda topic, key: heard.append((topic, key)))
        yield db, heard


def test_a_mark_is_announced_once_its_transaction_commits(
    announced: tuple[Database, list[tuple[str, str]]],
) -> None:
    db, heard = announced
    with db.begin() as connection:
        wakeups.mark(connection, "files")
        wakeups.mark(connection, "feed", "ab12")
        assert heard == []  # not before the commit
    assert sorted(heard) == [("feed", "ab12"), ("files", "")]


def test_a_rolled_back_transaction_announces_nothing(
    announced: tuple[Database, list[tuple[str, str]]],
) -> None:
    db, heard = announced
    with pytest.raises(RuntimeError), db.begin() as connection:
        wakeups.mark(connection, "exports")
        raise RuntimeError("rolled back")
    with db.begin() as connection:  # the same pooled connection, a new transaction
        connection.execute(text("SELECT 1"))
    assert heard == []


def test_a_unit_of_work_and_a_statement_in_autocommit_announce_after_they_commit(
    announced: tuple[Database, list[tuple[str, str]]],
) -> None:
    db, heard = announced
    with db.unit_of_work() as session:
        wakeups.mark(session.connection(), "erasures")
    with db.atomic() as connection:
        connection.execute(text("SELECT 1"))
        wakeups.mark(connection, "events")
    assert heard == [("erasures", ""), ("events", "")]


def test_a_statement_in_autocommit_sent_to_the_driver_itself_is_announced(
    announced: tuple[Database, list[tuple[str, str]]],
) -> None:
    """`Database.atomic` whose one statement goes to the driver past SQLAlchemy (the
    PostgreSQL sink's `driver_execute`): SQLAlchemy saw no transaction begin, and the
    marks went with the connection to its pool unannounced."""
    db, heard = announced
    with db.atomic() as connection:
        cursor = connection.connection.cursor()
        cursor.execute("SELECT 1")
        cursor.close()
        driver = connection.connection.driver_connection
        if isinstance(driver, psycopg.Connection):  # in autocommit still: no BEGIN sent
            assert driver.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        wakeups.mark(connection, "feed", "cd34")
    assert heard == [("feed", "cd34")]


def test_closing_while_the_sender_gathers_announcements_stops_it(
    settings: Settings, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`close` during the sender's pause (it gathers announcements for one NOTIFY): the
    sender had cleared the close's wake-up and waited for ever, and `close` for its
    10 s bound (a teardown of 10.00 s in the suite)."""
    if backend != "postgresql":
        pytest.skip("NOTIFY is PostgreSQL's")
    monkeypatch.setattr(wakeups, "COALESCE", 0.5)
    with database(settings) as db:
        db.announcer.announce("files")
        time.sleep(0.1)  # the sender is in its pause
        sender = db.announcer._sender
        assert sender is not None
    assert not sender.is_alive()


def test_where_processes_can_listen(backend: str) -> None:
    pg = "postgresql://127.0.0.1/hw"
    bouncer = "postgresql://127.0.0.1:6432/hw"
    assert Settings(database_url=pg).listen_url == pg
    through = Settings(database_url=bouncer, database_pooling="transaction")
    assert through.listen_url is None  # LISTEN through a pooler in transaction mode: never
    told = Settings(database_url=bouncer, database_pooling="transaction", database_listen_url=pg)
    assert told.listen_url == pg
    assert Settings(database_url=pg, wakeups=False).listen_url is None
    assert Settings().listen_url is None  # SQLite: one machine, loops poll


def test_a_notify_reaches_a_listener_of_another_database_object(
    backend: str, settings: Settings
) -> None:
    if backend != "postgresql":
        pytest.skip("NOTIFY is PostgreSQL's")
    heard: list[tuple[str, str]] = []
    done = threading.Event()

    def wake(topic: str, key: str) -> None:
        if key:  # the listener's first call, with every topic, carries none
            heard.append((topic, key))
            done.set()

    async def listen(sender: Database, receiver: Database) -> None:
        stop = asyncio.Event()
        listener = wakeups.Listener(receiver.connect_listener, wake)
        task = asyncio.create_task(listener.run(stop))
        while not listener.listening:
            await asyncio.sleep(0.01)
        await asyncio.to_thread(lambda: sender.announcer.announce("feed", "cafe"))
        await asyncio.to_thread(done.wait, 30)
        stop.set()
        await task

    with database(settings) as sender, database(settings) as receiver:
        asyncio.run(listen(sender, receiver))
    assert heard == [("feed", "cafe")]


# --- across processes -------------------------------------------------------------------------


@pytest.fixture
def nodes(backend: str, tmp_path: Path) -> Iterator[tuple[ServerProcess, ServerProcess, str]]:
    """An API node without a worker and a worker node, each with a data directory of its
    own, on a new PostgreSQL database; every poll of both far longer than any wait here."""
    if backend != "postgresql":
        pytest.skip("processes on several machines share a PostgreSQL database")
    with fresh_pg_database("hw_wakeups") as (_name, url):
        shared = {
            "HEADWATER_DATABASE_URL": url,
            "HEADWATER_BOOTSTRAP_CLIENT_ID": OPERATOR_ID,
            "HEADWATER_BOOTSTRAP_CLIENT_SECRET": OPERATOR_SECRET,
            "HEADWATER_FILE_POLL_SECONDS": LONG,
            "HEADWATER_FEED_POLL_SECONDS": "30",
            "HEADWATER_IDLE_POLL_SECONDS": LONG,
            "HEADWATER_LOG_LEVEL": "WARNING",
        }

        def node(command: str, *args: str) -> ServerProcess:
            env = shared | {"HEADWATER_DATA_DIR": str(tmp_path / command)}
            return ServerProcess(env, *args, log=tmp_path / f"{command}.log", command=command)

        api, worker = node("serve", "--no-worker"), node("worker")
        try:
            api.start()
            worker.start()
            _wait_listening(url, 2)
            yield api, worker, url
        finally:
            api.stop()
            worker.stop()


def _wait_listening(url: str, processes: int) -> None:
    """Until `processes` connections LISTEN (their `application_name` says so)."""
    deadline = time.monotonic() + 60
    query = (
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND application_name LIKE 'headwater % listen%'"
    )
    while True:
        with psycopg.connect(url) as connection:
            row = connection.execute(query).fetchone()
        if row is not None and row[0] >= processes:
            return
        assert time.monotonic() < deadline, "the processes never listened"
        time.sleep(0.1)


def _tenant(api: httpx.Client) -> DataTenant:
    admin = auth(get_token(api, OPERATOR_ID, OPERATOR_SECRET))
    company = api.post("/admin/v1/companies", json={"name": "Wake"}, headers=admin)
    assert company.status_code == 201, company.text
    return DataTenant(api, admin, company.json()["id"])  # type: ignore[arg-type]


@pytest.mark.http
@pytest.mark.parametrize("orders", [1, 1000], ids=["small push", "large push"])
def test_a_waiting_feed_reader_wakes_for_records_another_node_commits(
    nodes: tuple[ServerProcess, ServerProcess, str], tmp_path: Path, orders: int
) -> None:
    """A small push is written in a group on the event loop; a large one (more than
    `groups.SMALL_BODY`) by itself on a thread, in autocommit."""
    api, _worker, url = nodes
    other = ServerProcess(
        api.env | {"HEADWATER_DATA_DIR": str(tmp_path / "other")},
        "--no-worker",
        log=tmp_path / "other.log",
    )
    with httpx.Client(base_url=api.url, timeout=60) as reader:
        tenant = _tenant(reader)
        other.start()
        try:
            _wait_listening(url, 3)
            page: dict[str, Any] = {}

            def follow() -> None:
                asked = time.monotonic()
                answer = reader.get(
                    "/platform/v1/data/changes",
                    params={
                        "client_id": tenant.client_id,
                        "dataset_id": "orders",
                        "wait": 30,
                        "limit": 1000,
                    },
                    headers=tenant.headers,
                )
                page.update(answer.json(), waited=time.monotonic() - asked)

            waiting = threading.Thread(target=follow)
            waiting.start()
            time.sleep(0.5)  # the reader waits on its node
            with httpx.Client(base_url=other.url, timeout=60) as writer:
                pushed = writer.post(
                    "/platform/v1/data/json",
                    json=tenant.envelope([order(7 + n) for n in range(orders)]),
                    headers=tenant.headers,
                )
            assert pushed.status_code == 200, pushed.text
            waiting.join(60)
        finally:
            other.stop()
    assert [record["data"]["order_id"] for record in page["data"]] == [
        order(7 + n)["order_id"] for n in range(orders)
    ]
    # woken, not at the end of its wait (30 s, the reader's node's poll too: only a
    # wake-up from the other node could end it sooner)
    assert page["waited"] < 15


@pytest.mark.http
def test_an_export_asked_of_an_api_node_starts_at_once_on_a_worker_node(
    nodes: tuple[ServerProcess, ServerProcess, str],
) -> None:
    api, _worker, _url = nodes
    with httpx.Client(base_url=api.url, timeout=60) as client:
        tenant = _tenant(client)
        pushed = client.post(
            "/platform/v1/data/json", json=tenant.envelope(order(1)), headers=tenant.headers
        )
        assert pushed.status_code == 200, pushed.text
        asked = client.post(
            "/platform/v1/exports",
            json={"client_id": tenant.client_id, "dataset_id": "orders", "format": "ndjson"},
            headers=tenant.headers,
        )
        assert asked.status_code == 202, asked.text
        deadline = time.monotonic() + 60  # the worker's slots poll every 300 s
        while True:
            export = client.get(
                f"/platform/v1/exports/{asked.json()['export_id']}", headers=tenant.headers
            ).json()
            if export["status"] not in ("queued", "running"):
                break
            assert time.monotonic() < deadline, "the worker never woke for the export"
            time.sleep(0.1)
    assert (export["status"], export["record_count"]) == ("completed", 1)
