"""Fixtures for the client's tests: a real `headwater serve` process on SQLite and on
PostgreSQL (the server's own test fixtures choose the database), tenants made through
its operator API, and clients for them. Nothing here fakes the transport."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.conftest import backend, database_url, pg_database  # noqa: F401 (fixtures)
from tests.factories import OPERATOR_ID, OPERATOR_SECRET, get_token
from tests.http_server import running_server

from headwater_client import AsyncClient, Client, RetryPolicy

SCHEMA = {
    "$schema": "http://json-schema.org/draft-06/schema#",
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "amount": {"type": "number"},
        "note": {"type": "string"},
    },
    "required": ["order_id", "amount"],
}
SCOPES = [
    "data:read",
    "data:write",
    "workflows:read",
    "workflows:write",
    "activities:read",
    "events:read",
    "webhooks:manage",
    "data:erase",
]
# Retries in tests wait milliseconds, not seconds, unless the service asks for more.
FAST = RetryPolicy(max_retries=4, backoff_base=0.02, backoff_max=0.2)


def server_env(data_dir: Path, database: str | None, **extra: str) -> dict[str, str]:
    env = {
        "HEADWATER_DATA_DIR": str(data_dir),
        "HEADWATER_BOOTSTRAP_CLIENT_ID": OPERATOR_ID,
        "HEADWATER_BOOTSTRAP_CLIENT_SECRET": OPERATOR_SECRET,
        "HEADWATER_LOG_LEVEL": "WARNING",
        "HEADWATER_RATE_LIMIT_PER_SECOND": "100000",
        "HEADWATER_RATE_LIMIT_BURST": "100000",
        **extra,
    }
    if database:
        env["HEADWATER_DATABASE_URL"] = database
    return env


@pytest.fixture(scope="session")
def server(
    database_url: str | None,  # noqa: F811 (the server tests' fixture, imported above)
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """A `headwater serve` process shared by the tests that need no special settings."""
    env = server_env(tmp_path_factory.mktemp("client-server"), database_url)
    with running_server(env) as url:
        yield url


class Recorder:
    """httpx event hooks noting every request and answer the client really sent and got."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []
        self.statuses: list[tuple[str, int]] = []

    def on_request(self, request: httpx.Request) -> None:
        self.requests.append((request.method, request.url.path))

    def on_response(self, response: httpx.Response) -> None:
        self.statuses.append((response.request.url.path, response.status_code))

    async def a_on_request(self, request: httpx.Request) -> None:
        self.on_request(request)

    async def a_on_response(self, response: httpx.Response) -> None:
        self.on_response(response)

    def count(self, path: str, method: str | None = None) -> int:
        return sum(1 for m, p in self.requests if p == path and method in (None, m))

    @property
    def token_requests(self) -> int:
        return self.count("/oauth/token")

    def http(self) -> httpx.Client:
        hooks = {"request": [self.on_request], "response": [self.on_response]}
        return httpx.Client(timeout=60, event_hooks=hooks)

    def async_http(self) -> httpx.AsyncClient:
        hooks = {"request": [self.a_on_request], "response": [self.a_on_response]}
        return httpx.AsyncClient(timeout=60, event_hooks=hooks)


class Tenant:
    """A company with one ingestion client (`crm-...`), its dataset `orders`, and a
    credential with every company scope; set up through the operator API."""

    def __init__(self, url: str, **dataset_options: Any) -> None:
        self.url = url
        self.client_id = f"crm-{uuid.uuid4().hex[:10]}"
        self.dataset_id = "orders"
        with httpx.Client(base_url=url, timeout=60) as http:
            operator = get_token(http, OPERATOR_ID, OPERATOR_SECRET)
            admin = {"Authorization": f"Bearer {operator}"}

            def post(path: str, body: dict[str, Any]) -> Any:
                response = http.post(path, json=body, headers=admin)
                assert response.status_code == 201, response.text
                return response.json()

            self.company_id = post("/admin/v1/companies", {"name": "Client Co"})["id"]
            post(
                f"/admin/v1/companies/{self.company_id}/clients",
                {"client_id": self.client_id, "name": "CRM"},
            )
            post(
                f"/admin/v1/clients/{self.client_id}/datasets",
                {"dataset_id": self.dataset_id, "schema": SCHEMA, "options": dataset_options},
            )
            credential = post(
                f"/admin/v1/companies/{self.company_id}/credentials",
                {"name": "client tests", "scopes": SCOPES},
            )
        self.credential_id: str = credential["client_id"]
        self.credential_secret: str = credential["client_secret"]
        self.author_id: str = credential["author_id"]

    def client(self, recorder: Recorder | None = None, **options: Any) -> Client:
        if recorder is not None:
            options["http_client"] = recorder.http()
        options.setdefault("retry", FAST)
        return Client(self.url, self.credential_id, self.credential_secret, **options)

    def async_client(self, recorder: Recorder | None = None, **options: Any) -> AsyncClient:
        if recorder is not None:
            options["http_client"] = recorder.async_http()
        options.setdefault("retry", FAST)
        return AsyncClient(self.url, self.credential_id, self.credential_secret, **options)

    def api(self) -> httpx.Client:
        """Plain HTTP with this tenant's bearer token, to set things up."""
        with httpx.Client(base_url=self.url, timeout=60) as http:
            token = get_token(http, self.credential_id, self.credential_secret)
        return httpx.Client(
            base_url=self.url, timeout=60, headers={"Authorization": f"Bearer {token}"}
        )

    def env(self, **extra: str) -> dict[str, str]:
        """Environment for `headwater-client` with this tenant's credentials."""
        return {
            "HEADWATER_URL": self.url,
            "HEADWATER_CLIENT_ID": self.credential_id,
            "HEADWATER_CLIENT_SECRET": self.credential_secret,
            **extra,
        }


@pytest.fixture
def tenant(server: str) -> Tenant:
    return Tenant(server)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def orders(count: int, start: int = 0, **extra: Any) -> Iterator[dict[str, Any]]:
    """Valid records, made lazily."""
    for number in range(start, start + count):
        yield {"order_id": f"O-{number}", "amount": number + 0.5, **extra}


def stored_ids(tenant: Tenant) -> list[str]:
    """The `order_id` of every record the tenant's dataset holds, in storage order."""
    with tenant.client() as hw:
        return [r.data["order_id"] for r in hw.stream_records(tenant.client_id, tenant.dataset_id)]


def write_wide_csv(path: Path, rows: int) -> int:
    """A CSV of `rows` orders with a 1000-character note each (about 1 KB a row);
    answers its size in bytes."""
    note = "n" * 1000
    with path.open("w") as out:
        out.write("order_id,amount,note\n")
        for start in range(0, rows, 1000):
            out.write("".join(f"O-{n},{n}.5,{note}\n" for n in range(start, start + 1000)))
    return path.stat().st_size


def upload_in_own_process(tenant: Tenant, path: Path) -> dict[str, Any]:
    """Upload `path` with the client from a process of its own (upload_peak.py); answers
    its report: peak memory before and after the upload, the transaction id, the progress
    calls."""
    script = Path(__file__).parent / "upload_peak.py"
    args = [tenant.url, tenant.credential_id, tenant.credential_secret, tenant.client_id]
    done = subprocess.run(
        [sys.executable, str(script), *args, tenant.dataset_id, str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    report: dict[str, Any] = json.loads(done.stdout)
    return report
