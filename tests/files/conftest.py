"""A file tenant: an ingestion tenant that uploads files and runs the worker in-test."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit

import httpx
import pytest
from starlette.testclient import TestClient

from headwater import worker
from headwater.runtime import Runtime
from tests.factories import create_company
from tests.ingestion.conftest import DataTenant

CSV_HEADER = "order_id,customer-email,amount,quantity,paid,placed_at\n"


def csv_rows(count: int, start: int = 0) -> str:
    return "".join(
        f"A-{i},c{i}@example.com,{i}.5,{i},true,2026-11-22T10:00:00+01:00\n"
        for i in range(start, start + count)
    )


def run_worker(client: TestClient) -> int:
    """Process every queued file job, as the worker would; answers how many ran."""
    runtime: Runtime = client.app.state.runtime  # type: ignore[attr-defined]
    ran = 0
    while worker.process_one(runtime, "test-worker"):
        ran += 1
    return ran


class FileTenant(DataTenant):
    def upload_url(
        self,
        content_type: str = "text/csv",
        file_name: str = "orders.csv",
        dataset_id: str = "orders",
        status: int = 200,
        **extra: Any,
    ) -> Any:
        params = {
            "client_id": self.client_id,
            "dataset_id": dataset_id,
            "file_name": file_name,
            "content_type": content_type,
        } | extra
        response = self.client.get(
            "/platform/v1/data/file_upload_url", params=params, headers=self.headers
        )
        assert response.status_code == status, response.text
        return response.json()

    def put(
        self, ticket: dict[str, Any], body: bytes, *, url: str | None = None, **headers: str
    ) -> httpx.Response:
        """PUT through the test client to the path and query of the upload URL."""
        parts = urlsplit(url or ticket["upload_url"])
        return self.client.put(
            f"{parts.path}?{parts.query}", content=body, headers=ticket["headers"] | headers
        )

    def upload(
        self, body: bytes | str, content_type: str = "text/csv", **params: Any
    ) -> dict[str, Any]:
        """Upload a file, run the worker, answer the transaction."""
        ticket = self.upload_url(content_type, **params)
        data = body.encode() if isinstance(body, str) else body
        response = self.put(ticket, data)
        assert response.status_code == 200, response.text
        run_worker(self.client)
        return self.transaction(ticket["transaction_id"])

    def via(self, client: TestClient) -> Self:
        """The same tenant, calling another app on the same database."""
        moved = type(self).__new__(type(self))
        moved.__dict__ |= self.__dict__ | {"client": client}
        return moved

    def transaction(self, transaction_id: str) -> Any:
        response = self.client.get(
            f"/platform/v1/transactions/{transaction_id}", headers=self.headers
        )
        assert response.status_code == 200, response.text
        return response.json()

    def settled(self, transaction_id: str, timeout: float = 60) -> Any:
        """The transaction once a worker outside the test (a server's own) has finished
        with it."""
        deadline = time.monotonic() + timeout
        while (found := self.transaction(transaction_id))["status"] in (
            "awaiting_upload",
            "processing",
        ):
            assert time.monotonic() < deadline, found
            time.sleep(0.1)
        return found


@pytest.fixture
def file_tenant(client: TestClient, admin: dict[str, str], company: str) -> FileTenant:
    return FileTenant(client, admin, company)


@pytest.fixture
def quarantine_tenant(client: TestClient, admin: dict[str, str]) -> FileTenant:
    company = create_company(client, admin, f"Q {uuid.uuid4().hex[:6]}")
    return FileTenant(client, admin, company, invalid_rows="quarantine")


@pytest.fixture
def other_file_tenant(client: TestClient, admin: dict[str, str]) -> FileTenant:
    return FileTenant(client, admin, create_company(client, admin, f"O {uuid.uuid4().hex[:6]}"))


@contextmanager
def served_files(tmp_path: Path, database_url: str | None) -> Iterator[FileTenant]:
    """`headwater serve` (its worker inside) on `tmp_path`, and a file tenant of it over
    real HTTP."""
    from tests.factories import OPERATOR_ID, OPERATOR_SECRET, auth, get_token
    from tests.http_server import operated_env, running_server

    env = operated_env(tmp_path, database_url)
    with running_server(env) as base, httpx.Client(base_url=base, timeout=30) as http:
        admin = auth(get_token(http, OPERATOR_ID, OPERATOR_SECRET))
        yield FileTenant(http, admin, create_company(http, admin, "Real"))  # type: ignore[arg-type]
