"""A tenant that pushes and uploads records and reads them back through the record feed
and exports."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.factories import create_company
from tests.files.conftest import FileTenant


class FeedTenant(FileTenant):
    def changes(self, status: int = 200, **params: Any) -> Any:
        query = {"client_id": self.client_id, "dataset_id": "orders"} | params
        response = self.client.get("/platform/v1/data/changes", params=query, headers=self.headers)
        assert response.status_code == status, response.text
        return response.json()

    def follow(self, cursor: str | None = None, **params: Any) -> tuple[list[Any], str]:
        """Every record after `cursor`, page by page; and the last cursor."""
        records: list[Any] = []
        while True:
            extra = {"after": cursor} if cursor is not None else {}
            page = self.changes(**params, **extra)
            records.extend(page["data"])
            if not page["data"]:
                return records, page["next_cursor"]
            cursor = page["next_cursor"]

    def push_orders(self, *numbers: int) -> Any:
        data = [{"order_id": f"A-{n}", "amount": 10 + n} for n in numbers]
        response = self.push(data if len(data) > 1 else data[0])
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture
def feed_tenant(client: TestClient, admin: dict[str, str], company: str) -> FeedTenant:
    return FeedTenant(client, admin, company)


@pytest.fixture
def other_feed_tenant(client: TestClient, admin: dict[str, str]) -> FeedTenant:
    return FeedTenant(client, admin, create_company(client, admin, f"F {uuid.uuid4().hex[:6]}"))
