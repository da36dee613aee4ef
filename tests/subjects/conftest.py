"""A tenant whose `orders` dataset names its subjects (`/customer-email`), quarantines a
file's invalid rows, and holds a credential that may erase."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from starlette.testclient import TestClient

from headwater import worker
from headwater.runtime import Runtime
from tests.downstream.conftest import FeedTenant
from tests.factories import auth, create_company, create_credential, get_token

OPTIONS = {"subject_key": "/customer-email", "invalid_rows": "quarantine"}


def run_erasures(client: TestClient) -> int:
    """Run every queued erasure, as the worker would; how many ran."""
    runtime: Runtime = client.app.state.runtime  # type: ignore[attr-defined]
    ran = 0
    while worker.erase_one(runtime, "test-erasure-worker"):
        ran += 1
    return ran


class SubjectTenant(FeedTenant):
    def __init__(self, client: TestClient, admin: dict[str, str], company_id: str) -> None:
        super().__init__(client, admin, company_id, **OPTIONS)
        credential = create_credential(client, admin, company_id, scopes=["data:erase"])
        self.eraser = auth(get_token(client, credential["client_id"], credential["client_secret"]))

    def erase(self, *subjects: str, status: int = 202, **body: Any) -> Any:
        response = self.client.post(
            "/platform/v1/erasures",
            json={"subjects": list(subjects)} | body,
            headers=self.eraser,
        )
        assert response.status_code == status, response.text
        return response.json()

    def erasure(self, erasure_id: str, status: int = 200) -> Any:
        response = self.client.get(f"/platform/v1/erasures/{erasure_id}", headers=self.eraser)
        assert response.status_code == status, response.text
        return response.json()

    def erased(self, *subjects: str, **body: Any) -> Any:
        """Erase, run the worker, answer the erasure as read then."""
        queued = self.erase(*subjects, **body)
        assert queued["status"] == "queued"
        run_erasures(self.client)
        return self.erasure(queued["erasure_id"])

    def all_records(self) -> list[dict[str, Any]]:
        """Every stored record of `orders`, all pages."""
        found: list[dict[str, Any]] = []
        page = 0
        while True:
            batch = self.records(page=page)
            found += batch
            if len(batch) < 100:
                return found
            page += 1


def customer(n: int, email: str, **fields: Any) -> dict[str, Any]:
    return {"order_id": f"A-{n}", "amount": 10 + n, "customer-email": email, **fields}


@pytest.fixture
def subject_tenant(client: TestClient, admin: dict[str, str], company: str) -> SubjectTenant:
    return SubjectTenant(client, admin, company)


@pytest.fixture
def other_subject_tenant(client: TestClient, admin: dict[str, str]) -> SubjectTenant:
    return SubjectTenant(client, admin, create_company(client, admin, f"S {uuid.uuid4().hex[:6]}"))
