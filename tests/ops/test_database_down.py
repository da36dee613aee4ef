"""503 with Retry-After, never a hang or a trace, when PostgreSQL cannot be reached.

SQLite is a file in the process: it has no "unreachable" state, so these run on
PostgreSQL only, against a database of their own whose connections they cut and restore.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.exc import OperationalError
from starlette.testclient import TestClient

from headwater.config import Settings
from headwater.db import Database
from headwater.main import create_app
from tests.factories import (
    OPERATOR_ID,
    OPERATOR_SECRET,
    PG_ADMIN_URL,
    assert_problem,
    auth,
    fresh_pg_database,
    get_token,
    pg_admin,
)


@pytest.fixture
def own_database() -> Iterator[str]:
    with fresh_pg_database("hw_down") as (name, _url):
        yield name


def _settings(tmp_path: Path, url: str) -> Settings:
    return Settings(
        data_dir=tmp_path,
        database_url=url,
        bootstrap_client_id=OPERATOR_ID,
        bootstrap_client_secret=OPERATOR_SECRET,
        public_url="http://testserver",
        worker_enabled=False,
        db_connect_timeout_seconds=1,
        log_level="CRITICAL",
    )


def test_lost_database_answers_503_then_recovers(tmp_path: Path, own_database: str) -> None:
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + own_database
    with TestClient(create_app(_settings(tmp_path, url))) as client:
        token = client.post(
            "/oauth/token",
            json={
                "client_id": OPERATOR_ID,
                "client_secret": OPERATOR_SECRET,
                "audience": "headwater-api",
            },
        ).json()["access_token"]
        assert client.get("/admin/v1/companies", headers=auth(token)).status_code == 200
        # a search keeps its event-loop connection (PostgreSQL), which the loss breaks
        company = client.post("/admin/v1/companies", json={"name": "c"}, headers=auth(token))
        credential = client.post(
            f"/admin/v1/companies/{company.json()['id']}/credentials",
            json={"name": "r", "scopes": ["activities:read"]},
            headers=auth(token),
        ).json()
        reader = get_token(client, credential["client_id"], credential["client_secret"])

        def search() -> Any:
            return client.post("/app/v1/activities/search", json={}, headers=auth(reader))

        assert search().status_code == 200

        pg_admin(f'ALTER DATABASE "{own_database}" ALLOW_CONNECTIONS false')
        pg_admin(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE datname = '{own_database}'"
        )

        assert client.get("/healthz").status_code == 200
        ready = client.get("/readyz")
        assert_problem(ready, 503)
        assert ready.headers["retry-after"] == "5"
        listed = client.get("/admin/v1/companies", headers=auth(token))
        assert_problem(listed, 503, "database_unavailable")
        assert listed.headers["retry-after"] == "5"
        created = client.post("/admin/v1/companies", json={"name": "x"}, headers=auth(token))
        assert_problem(created, 503, "database_unavailable")
        for _ in range(2):  # the broken kept connection, then a new one that cannot connect
            assert_problem(search(), 503, "database_unavailable")

        pg_admin(f'ALTER DATABASE "{own_database}" ALLOW_CONNECTIONS true')
        assert client.get("/readyz").status_code == 200
        assert client.get("/admin/v1/companies", headers=auth(token)).status_code == 200
        assert search().status_code == 200


def test_database_down_at_start_does_not_stop_the_service(tmp_path: Path) -> None:
    settings = _settings(tmp_path, "postgresql://127.0.0.1:1/nothing")
    with TestClient(create_app(settings)) as client:
        assert client.get("/healthz").status_code == 200
        assert_problem(client.get("/readyz"), 503)
        response = client.post(
            "/oauth/token",
            json={
                "client_id": OPERATOR_ID,
                "client_secret": OPERATOR_SECRET,
                "audience": "headwater-api",
            },
        )
        assert_problem(response, 503, "database_unavailable")


@pytest.fixture
def limited_role(backend: str) -> Iterator[str]:
    """A PostgreSQL role allowed one connection at a time: its URL (the test database)."""
    if backend != "postgresql":
        pytest.skip("connection slots are PostgreSQL's")
    role = f"hw_limited_{uuid.uuid4().hex[:8]}"
    pg_admin(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 1")
    try:
        yield PG_ADMIN_URL.replace("postgresql://", f"postgresql://{role}@", 1)
    finally:
        pg_admin(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'")
        pg_admin(f"DROP ROLE {role}")


def test_a_connection_waits_for_a_free_server_slot(tmp_path: Path, limited_role: str) -> None:
    """While the server refuses connections for want of slots ("too many connections"),
    a new one is tried again until a slot frees, within the connect timeout, on the
    engine's pool and on the event loop's own connections alike; past the timeout the
    refusal is raised (and a request answers 503, as above)."""
    held = psycopg.connect(limited_role)  # the role's one slot
    db = Database(
        _settings(tmp_path, limited_role).model_copy(update={"db_connect_timeout_seconds": 10})
    )
    answers: list[Any] = []

    def query() -> None:
        with db.engine.connect() as connection:
            answers.append(connection.exec_driver_sql("SELECT 1").scalar())

    waiting = threading.Thread(target=query)
    waiting.start()
    waiting.join(timeout=0.5)
    assert waiting.is_alive() and answers == []  # refused so far, trying again
    held.close()
    waiting.join(timeout=10)
    assert answers == [1]

    # the event loop's connections wait the same way
    engine_slot = db.engine.connect()  # takes the slot again (the pool had let it go)
    engine_slot.exec_driver_sql("SELECT 1")

    async def loop_connection() -> Any:
        connection = await db.connect_async()
        try:
            return (await (await connection.execute("SELECT 2")).fetchone())[0]
        finally:
            await connection.close()

    def free() -> None:
        engine_slot.close()
        db.engine.dispose()  # the pool lets its connection go: the slot frees

    threading.Timer(0.5, free).start()
    assert asyncio.run(loop_connection()) == 2

    # never freed: the refusal, once the timeout has passed
    hurried = Database(_settings(tmp_path, limited_role))  # 1 s
    held = psycopg.connect(limited_role)
    try:
        with pytest.raises(OperationalError, match="too many connections"):
            hurried.engine.connect()
    finally:
        held.close()
        hurried.engine.dispose()
        db.engine.dispose()
