"""An ingestion tenant: a company, an ingestion client, a dataset and a data credential."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.factories import (
    auth,
    create_company,
    create_credential,
    create_ingestion_client,
    get_token,
)

SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-06/schema#",
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "minLength": 1},
        "customer-email": {"type": "string", "format": "email"},
        "amount": {"type": "number", "minimum": 0},
        "quantity": {"type": "integer"},
        "paid": {"type": "boolean"},
        "placed_at": {"type": "string", "format": "date-time"},
        "channel": {"type": "string", "default": "web"},
    },
    "required": ["order_id", "amount"],
    "additionalProperties": False,
    "examples": [{"order_id": "A-1", "amount": 12.5}],
}


def register_dataset(
    client: TestClient,
    admin: dict[str, str],
    client_id: str,
    dataset_id: str = "orders",
    schema: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
    status: int = 201,
) -> Any:
    body: dict[str, Any] = {"dataset_id": dataset_id, "schema": schema or SCHEMA}
    if options is not None:
        body["options"] = options
    response = client.post(f"/admin/v1/clients/{client_id}/datasets", json=body, headers=admin)
    assert response.status_code == status, response.text
    return response.json()


class DataTenant:
    """A company with one ingestion client, its `orders` dataset and a data credential."""

    def __init__(
        self, client: TestClient, admin: dict[str, str], company_id: str, **options: Any
    ) -> None:
        self.client = client
        self.admin = admin
        self.company_id = company_id
        self.client_id = create_ingestion_client(client, admin, company_id)
        self.dataset = register_dataset(client, admin, self.client_id, options=options or None)
        self.credential = create_credential(
            client, admin, company_id, scopes=["data:read", "data:write", "activities:read"]
        )
        self.headers = auth(
            get_token(client, self.credential["client_id"], self.credential["client_secret"])
        )

    def envelope(self, data: Any, dataset_id: str = "orders") -> dict[str, Any]:
        return {"client_id": self.client_id, "dataset_id": dataset_id, "data": data}

    def push(self, data: Any, *, key: str | None = None, **envelope: Any) -> Any:
        headers = dict(self.headers)
        if key is not None:
            headers["Idempotency-Key"] = key
        body = self.envelope(data) | envelope
        return self.client.post("/platform/v1/data/json", json=body, headers=headers)

    def add_schema_version(self, schema: dict[str, Any]) -> Any:
        """The operator adds a version of the `orders` schema (it must be accepted)."""
        response = self.client.put(
            f"/admin/v1/clients/{self.client_id}/datasets/orders/schema",
            json={"schema": schema},
            headers=self.admin,
        )
        assert response.status_code == 200, response.text
        return response.json()

    def records(self, **params: Any) -> list[dict[str, Any]]:
        query = {"client_id": self.client_id, "dataset_id": "orders", "page_size": 100} | params
        response = self.client.get("/platform/v1/data", params=query, headers=self.headers)
        assert response.status_code == 200, response.text
        return response.json()["data"]  # type: ignore[no-any-return]

    def transactions(self, **params: Any) -> dict[str, Any]:
        response = self.client.get("/platform/v1/transactions", params=params, headers=self.headers)
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]


def order(n: int = 0, **fields: Any) -> dict[str, Any]:
    return {"order_id": f"A-{n}", "amount": 10 + n, **fields}


@pytest.fixture
def data_tenant(client: TestClient, admin: dict[str, str], company: str) -> DataTenant:
    return DataTenant(client, admin, company)


@pytest.fixture
def other_data_tenant(client: TestClient, admin: dict[str, str]) -> DataTenant:
    return DataTenant(client, admin, create_company(client, admin, f"Other {uuid.uuid4().hex[:6]}"))
