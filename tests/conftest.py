"""Fixtures: every database-touching test runs on SQLite and on PostgreSQL.

Each test session gets its own SQLite file and its own PostgreSQL database (created here,
dropped at the end), so runs never see each other's rows. Tests isolate from each other
by tenant: each makes its own company, clients and credentials through the API.
"""

from __future__ import annotations

import os
import secrets
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

from headwater.config import Settings
from headwater.main import create_app

PG_ADMIN_URL = os.environ.get("HEADWATER_TEST_PG", "postgresql://127.0.0.1:5432/test")
OPERATOR_ID = "test-operator"
OPERATOR_SECRET = secrets.token_urlsafe(24)
AUDIENCE = "headwater-api"


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A PostgreSQL database for this test session only."""
    name = f"hw_test_{os.getpid()}_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    yield f"{base}/{name}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("headwater")


@pytest.fixture(scope="session")
def database_url(backend: str, request: pytest.FixtureRequest) -> str | None:
    if backend == "postgresql":
        return str(request.getfixturevalue("pg_database"))
    return None


@pytest.fixture(scope="session")
def base_settings(database_url: str | None, data_root: Path, backend: str) -> dict[str, Any]:
    return {
        "data_dir": data_root / backend,
        "database_url": database_url,
        "bootstrap_client_id": OPERATOR_ID,
        "bootstrap_client_secret": OPERATOR_SECRET,
        "public_url": "http://testserver",
        "rate_limit_per_second": 100_000,
        "rate_limit_burst": 100_000,
        "worker_enabled": False,
        "log_level": "WARNING",
    }


@pytest.fixture(scope="session")
def settings(base_settings: dict[str, Any]) -> Settings:
    return Settings(**base_settings)


@pytest.fixture(scope="session")
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


@pytest.fixture
def make_client(base_settings: dict[str, Any]) -> Iterator[Callable[..., TestClient]]:
    """A separate app on the same database with some settings changed."""
    opened: list[TestClient] = []

    def make(**overrides: Any) -> TestClient:
        test_client = TestClient(create_app(Settings(**(base_settings | overrides))))
        test_client.__enter__()
        opened.append(test_client)
        return test_client

    yield make
    for test_client in opened:
        test_client.__exit__(None, None, None)


# --- factories: plain functions over the HTTP API ---------------------------------------


def request_token(client: TestClient, client_id: str, client_secret: str, **extra: str) -> Any:
    """POST /oauth/token as JSON; `extra` adds or overrides members (audience, scope...)."""
    body = {"client_id": client_id, "client_secret": client_secret, "audience": AUDIENCE}
    return client.post("/oauth/token", json=body | extra)


def get_token(client: TestClient, client_id: str, client_secret: str, **extra: str) -> str:
    response = request_token(client, client_id, client_secret, **extra)
    assert response.status_code == 200, response.text
    return str(response.json()["access_token"])


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def operator_token(client: TestClient) -> str:
    return get_token(client, OPERATOR_ID, OPERATOR_SECRET)


@pytest.fixture
def admin(operator_token: str) -> dict[str, str]:
    return auth(operator_token)


def create_company(client: TestClient, admin: dict[str, str], name: str = "Acme") -> str:
    response = client.post("/admin/v1/companies", json={"name": name}, headers=admin)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def create_ingestion_client(
    client: TestClient, admin: dict[str, str], company_id: str, client_id: str | None = None
) -> str:
    client_id = client_id or f"crm-{uuid.uuid4().hex[:10]}"
    response = client.post(
        f"/admin/v1/companies/{company_id}/clients",
        json={"client_id": client_id, "name": "CRM"},
        headers=admin,
    )
    assert response.status_code == 201, response.text
    return client_id


def create_credential(
    client: TestClient,
    admin: dict[str, str],
    company_id: str,
    scopes: list[str] | None = None,
    client_ids: list[str] | None = None,
) -> dict[str, Any]:
    response = client.post(
        f"/admin/v1/companies/{company_id}/credentials",
        json={"name": "sync", "scopes": scopes or ["data:read"], "client_ids": client_ids or []},
        headers=admin,
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


@pytest.fixture
def company(client: TestClient, admin: dict[str, str]) -> str:
    return create_company(client, admin)


@pytest.fixture
def credential(client: TestClient, admin: dict[str, str], company: str) -> dict[str, Any]:
    return create_credential(client, admin, company, scopes=["data:read", "workflows:read"])


@pytest.fixture
def company_token(client: TestClient, credential: dict[str, Any]) -> str:
    return get_token(client, credential["client_id"], credential["client_secret"])


def assert_problem(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    """An RFC 9457 body with the given status (and code), and nothing leaked."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert {"type", "title", "detail"} <= set(body)
    if code is not None:
        assert body["code"] == code, body
    text = response.text.lower()
    for leak in ("traceback", "select ", "insert ", "sqlalchemy", "psycopg", OPERATOR_SECRET):
        assert leak.lower() not in text
    return body
