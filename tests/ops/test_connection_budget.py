"""A process holds at most its budget of PostgreSQL connections, however many want one:
the rest wait for a connection to come free. `pg_stat_activity` names what holds each."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import text

from headwater.config import Settings
from headwater.db import Database, Shares
from tests.factories import PG_ADMIN_URL, fresh_pg_database


def _held(database: str) -> list[str]:
    """The `application_name` of each connection this test process holds to `database`."""
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT application_name FROM pg_stat_activity "
            "WHERE datname = %s AND application_name LIKE %s",
            (database, f"headwater % {os.getpid()}"),
        ).fetchall()
    return [name for (name,) in rows]


def _operations_query(database: str) -> list[tuple[str, int]]:
    """The query docs/operations.md gives operators, run as written there."""
    page = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    query = page.split("```sql\n", 1)[1].split("```", 1)[0]
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + database
    with psycopg.connect(url, autocommit=True) as connection:
        return [(name, count) for name, count in connection.execute(query).fetchall()]


@pytest.mark.parametrize("role", ["api", "other"])
def test_a_process_holds_at_most_its_budget_of_connections(
    settings: Settings, backend: str, role: Any
) -> None:
    """Twice as many readers and writers as the budget (and, in an API process, reads on
    the event loop), each holding its connection for a moment: all of them finish, and
    no more connections than the budget are open at any time, named by role and part."""
    if backend != "postgresql":
        pytest.skip("connection budgets are PostgreSQL's")
    budget = 8
    with fresh_pg_database("hw_budget") as (_name, url):  # only this Database's connections
        _hold_twice_the_budget(settings, url, budget, role)


def _hold_twice_the_budget(settings: Settings, url: str, budget: int, role: Any) -> None:
    db = Database(
        settings.model_copy(update={"db_connections": budget, "database_url": url}), role=role
    )
    assert db.shares.total == budget
    database = db.engine.url.database
    assert database is not None
    done: list[str] = []
    seen: list[list[str]] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            seen.append(_held(database))
            time.sleep(0.01)

    def hold(sessions: Any, part: str) -> None:
        with sessions() as session:
            session.execute(text("SELECT pg_sleep(0.05)"))
            session.commit()
        done.append(part)

    async def on_loop() -> None:
        async def one() -> None:
            async with db.loop_read() as connection:
                await connection.execute("SELECT pg_sleep(0.05)")
            done.append("loop read")

        await asyncio.gather(*(one() for _ in range(2 * budget)))
        await db.close_loop_reads()

    sampler = threading.Thread(target=sample)
    sampler.start()
    threads = [
        threading.Thread(target=hold, args=(sessions, part))
        for sessions, part in [(db.sessions, "write"), (db.read_sessions, "read")]
        for _ in range(2 * budget)
    ]
    try:
        for thread in threads:
            thread.start()
        if db.reads_on_loop:
            asyncio.run(on_loop())
        for thread in threads:
            thread.join()
        shown = dict(_operations_query(database))  # idle connections stay open, named
        assert shown[f"headwater {role} write {os.getpid()}"] >= 1
    finally:
        sampling.set()
        sampler.join()
        db.dispose()
    parts = {"write", "read", "loop read"} if role == "api" else {"write", "read"}
    assert sorted(set(done)) == sorted(parts) and len(done) == 2 * budget * len(parts)
    assert max(len(names) for names in seen) <= budget
    names = {name for names in seen for name in names}
    assert names == {f"headwater {role} {part} {os.getpid()}" for part in parts}


def test_shares_of_a_budget_add_up_to_it() -> None:
    """Every budget allowed is shared out whole, each part of it at least one connection
    (an API process's), and the defaults are the documented ones."""
    for total in range(5, 200):
        api, other = Shares.of(total, api=True), Shares.of(total, api=False)
        assert api.total == other.total == total
        assert min(api.writes, api.reads, api.loop_reads, api.push_writers) >= 1
        assert (other.loop_reads, other.push_writers) == (0, 0)
    assert Shares.of(20, api=True) == Shares(writes=9, reads=5, loop_reads=4, push_writers=2)
    assert Shares.of(10, api=False) == Shares(writes=7, reads=3, loop_reads=0, push_writers=0)
