"""503 with Retry-After, never a hang or a trace, when PostgreSQL cannot be reached.

SQLite is a file in the process: it has no "unreachable" state, so these run on
PostgreSQL only, against a database of their own whose connections they cut and restore.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from headwater.config import Settings
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
