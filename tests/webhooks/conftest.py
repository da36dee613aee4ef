"""A tenant with a dataset, a credential for data, events and webhooks, and a receiver."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import update
from starlette.testclient import TestClient

from headwater.config import Settings
from headwater.events import outbox
from headwater.webhooks.models import WebhookDelivery, WebhookEndpoint
from tests.factories import (
    auth,
    create_company,
    create_credential,
    create_ingestion_client,
    database,
    get_token,
)
from tests.ingestion.conftest import register_dataset
from tests.webhooks.receiver import Receiver, running_receiver

SCOPES = [
    "data:read",
    "data:write",
    "events:read",
    "webhooks:manage",
    "workflows:read",
    "workflows:write",
]


class HookTenant:
    """A company with one ingestion client and its `orders` dataset, and a credential
    that may push, read events and manage webhooks, acting through `client`."""

    def __init__(self, client: TestClient, admin: dict[str, str], company_id: str) -> None:
        self.client = client
        self.admin = admin
        self.company_id = company_id
        self.client_id = create_ingestion_client(client, admin, company_id)
        register_dataset(client, admin, self.client_id)
        self.credential = create_credential(client, admin, company_id, scopes=SCOPES)
        self.headers = auth(
            get_token(client, self.credential["client_id"], self.credential["client_secret"])
        )

    def using(self, client: TestClient) -> HookTenant:
        """The same tenant, calling another app (one with its worker on, say)."""
        other = object.__new__(HookTenant)
        other.__dict__.update(self.__dict__)
        other.client = client
        return other

    def push(self, n: int = 0, status: int = 200) -> dict[str, Any]:
        body = {
            "client_id": self.client_id,
            "dataset_id": "orders",
            "data": {"order_id": f"A-{n}", "amount": 10 + n},
        }
        response = self.client.post("/platform/v1/data/json", json=body, headers=self.headers)
        assert response.status_code == status, response.text
        return response.json()  # type: ignore[no-any-return]

    def write_events(self, settings: Settings, count: int) -> None:
        """`count` schema-version events of this company, committed together."""
        with database(settings) as db, db.begin() as connection:
            outbox.write(
                connection,
                [
                    outbox.event(
                        "dataset.schema_version_added",
                        company_id=uuid.UUID(self.company_id),
                        data={
                            "client_id": self.client_id,
                            "dataset_id": "orders",
                            "schema_version": n,
                        },
                    )
                    for n in range(count)
                ],
            )

    def workflow(self) -> dict[str, Any]:
        """A draft workflow, made from a new category and a one-step template."""

        def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
            response = self.client.post(path, json=body, headers=self.headers)
            assert response.status_code == 201, response.text
            return response.json()  # type: ignore[no-any-return]

        category = post("/app/v1/workflow_categories", {"name": "c", "description": "d"})
        step = {"step_id": "s1", "name": "s", "description": "d", "type": "manual"}
        template = post(
            "/app/v1/workflow_templates",
            {"category_id": category["id"], "name": "t", "description": "d", "steps": [step]},
        )
        return post(
            "/app/v1/workflows",
            {
                "workflow_template_id": template["id"],
                "name": "w",
                "description": "d",
                "due_date": "2026-12-31T17:00:00Z",
            },
        )

    def events(self, status: int = 200, **params: Any) -> Any:
        response = self.client.get("/platform/v1/events", params=params, headers=self.headers)
        assert response.status_code == status, response.text
        return response.json()

    def follow(self, cursor: str | None = None, **params: Any) -> tuple[list[dict[str, Any]], str]:
        """Every event after `cursor` (pages of `limit`), and the last cursor."""
        found: list[dict[str, Any]] = []
        while True:
            query = dict(params)
            if cursor is not None:
                query["after"] = cursor
            page = self.events(**query)
            found.extend(page["data"])
            if cursor == page["next_cursor"] or not page["data"]:
                return found, page["next_cursor"]
            cursor = page["next_cursor"]

    def endpoint(
        self, url: str, types: list[str] | None = None, status: int = 201, **extra: Any
    ) -> Any:
        body = {"url": url, "event_types": types or ["*"], **extra}
        response = self.client.post(
            "/platform/v1/webhook_endpoints", json=body, headers=self.headers
        )
        assert response.status_code == status, response.text
        return response.json()

    def deliveries(self, endpoint_id: str, **params: Any) -> list[dict[str, Any]]:
        response = self.client.get(
            f"/platform/v1/webhook_endpoints/{endpoint_id}/deliveries",
            params={"page_size": 100} | params,
            headers=self.headers,
        )
        assert response.status_code == 200, response.text
        return response.json()["data"]  # type: ignore[no-any-return]

    def wait_deliveries(
        self,
        endpoint_id: str,
        check: Callable[[list[dict[str, Any]]], bool],
        timeout: float = 30.0,
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            found = self.deliveries(endpoint_id)
            if check(found):
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"deliveries never matched: {found}")
            time.sleep(0.1)


@pytest.fixture
def hooks(client: TestClient, admin: dict[str, str], company: str) -> HookTenant:
    return HookTenant(client, admin, company)


@pytest.fixture
def other_hooks(client: TestClient, admin: dict[str, str]) -> HookTenant:
    return HookTenant(client, admin, create_company(client, admin, "Other hooks"))


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as running:
        yield running


# A worker that delivers at once and retries after a second; URLs on loopback allowed.
DELIVERING = {
    "worker_enabled": True,
    "file_workers": 0,
    "webhook_allow_http": True,
    "webhook_allow_private": True,
    "webhook_poll_seconds": 0.05,
    "webhook_retry_schedule": "1,1",
    "webhook_timeout_seconds": 2,
}


def worker_env(settings: Settings) -> dict[str, str]:
    """The environment of a `headwater worker` process on the tests' database that
    delivers as `DELIVERING` does."""
    env = {
        "HEADWATER_DATA_DIR": str(settings.data_dir),
        "HEADWATER_WEBHOOK_ALLOW_HTTP": "true",
        "HEADWATER_WEBHOOK_ALLOW_PRIVATE": "true",
        "HEADWATER_WEBHOOK_POLL_SECONDS": "0.05",
        "HEADWATER_WEBHOOK_TIMEOUT_SECONDS": "2",
        "HEADWATER_FILE_WORKERS": "0",
        "HEADWATER_LOG_LEVEL": "WARNING",
    }
    if settings.database_url:
        env["HEADWATER_DATABASE_URL"] = settings.database_url
    return env


def unschedule_earlier_backlogs(settings: Settings) -> None:
    """Earlier tests' pending deliveries (this database is their share of the pytest
    process's) out of the schedule, and none of their endpoints marked for the worker to
    bring them back: a delivering worker this test starts would lease theirs before its
    own, oldest due first, and an endpoint of theirs on a closed port fails each attempt
    at once and is due again a few seconds later (once, a worker with one slot leased
    nothing of its test's own for 10 s)."""
    with database(settings) as db, db.begin() as connection:
        connection.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.status == "pending")
            .values(next_attempt_at=None, leased_until=None)
        )
        connection.execute(
            update(WebhookEndpoint)
            .where(WebhookEndpoint.rescheduling.is_(True))
            .values(rescheduling=False)
        )


@pytest.fixture(autouse=True)
def no_earlier_backlog(settings: Settings, client: TestClient) -> None:
    """Every webhook test starts with no earlier test's delivery in the schedule (on a
    database migrated by the session's app, `client`: a file run alone may have none)."""
    unschedule_earlier_backlogs(settings)


@pytest.fixture
def delivering(make_client: Callable[..., TestClient]) -> TestClient:
    """An app on the same database whose worker delivers webhooks (loopback allowed)."""
    return make_client(**DELIVERING)
