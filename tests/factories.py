"""Factories: plain functions over the HTTP API, and the constants the tests share."""

from __future__ import annotations

import os
import secrets
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
from starlette.testclient import TestClient

from headwater.config import Settings
from headwater.db import Database
from tests import preloaded

PG_ADMIN_URL = os.environ.get("HEADWATER_TEST_PG", "postgresql://127.0.0.1:5432/test")


def pg_admin(sql: str) -> None:
    """Run one statement on the test server's admin database, outside any transaction."""
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql)


@contextmanager
def fresh_pg_database(prefix: str) -> Iterator[tuple[str, str]]:
    """A new PostgreSQL database of one's own: its (name, URL); dropped afterwards."""
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    pg_admin(f'CREATE DATABASE "{name}"')
    try:
        yield name, PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        pg_admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


OPERATOR_ID = "test-operator"
OPERATOR_SECRET = secrets.token_urlsafe(24)
AUDIENCE = "headwater-api"
# the sealing key of the test installation: its apps, server processes and commands, as
# the nodes of one installation, all seal with it (contract 19)
SEALING_KEY = "the test installation's sealing key"


def request_token(client: httpx.Client, client_id: str, client_secret: str, **extra: str) -> Any:
    """POST /oauth/token as JSON; `extra` adds or overrides members (audience, scope...)."""
    body = {"client_id": client_id, "client_secret": client_secret, "audience": AUDIENCE}
    return client.post("/oauth/token", json=body | extra)


def get_token(client: httpx.Client, client_id: str, client_secret: str, **extra: str) -> str:
    response = request_token(client, client_id, client_secret, **extra)
    assert response.status_code == 200, response.text
    return str(response.json()["access_token"])


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def create_company(client: httpx.Client, admin: dict[str, str], name: str = "Acme") -> str:
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
    client: httpx.Client,
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


def run_cli(
    *args: str, data_dir: Path, database_url: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`headwater ARGS` in a process of its own, configured only through its environment."""
    env = {
        "HEADWATER_DATA_DIR": str(data_dir),
        "HEADWATER_WEBHOOK_SECRET_KEY": SEALING_KEY,  # as the tests' apps seal
        "PATH": "/usr/bin:/bin",
    }
    if database_url:
        env["HEADWATER_DATABASE_URL"] = database_url
    return preloaded.run_command(*args, env=env)


@contextmanager
def database(settings: Settings) -> Iterator[Database]:
    """The tests' database through a pool of its own, disposed of at the end."""
    db = Database(settings)
    try:
        yield db
    finally:
        db.dispose()
