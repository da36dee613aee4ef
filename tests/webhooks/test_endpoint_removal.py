"""Deleting a webhook endpoint (contract section 13): gone from the API at once, its
deliveries never leased again, and its backlog (deliveries and their attempts) removed
after the request by the worker, a short database transaction at a time: as one
transaction, 100,000 deliveries held SQLite's one writer, or on PostgreSQL the
endpoint's row, for 4-5 s."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, func, select
from starlette.testclient import TestClient

from headwater.config import Settings
from headwater.db import Database
from headwater.kit.clock import utcnow_ms
from headwater.runtime import secret_box
from headwater.webhooks import dispatch, service
from headwater.webhooks.dispatch import Outcome
from headwater.webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from tests.webhooks.conftest import HookTenant

ENDPOINTS = "/platform/v1/webhook_endpoints"


@pytest.fixture
def loopback_ok(loopback_client: TestClient, hooks: HookTenant) -> HookTenant:
    return hooks.using(loopback_client)


@pytest.fixture
def db(settings: Settings) -> Iterator[Database]:
    database = Database(settings)
    try:
        yield database
    finally:
        database.dispose()


def _backlog(tenant: HookTenant, settings: Settings, db: Database, events: int) -> list[str]:
    """Two endpoints of the tenant, each with `events` pending deliveries; their ids."""
    made = [tenant.endpoint(f"http://127.0.0.1:9/{name}")["id"] for name in ("gone", "kept")]
    tenant.write_events(settings, events)
    dispatch.sequence_all(db, uuid.UUID(tenant.company_id))
    return made


def _count(db: Database, model: Any, endpoint_id: str) -> int:
    """The endpoint's rows (`WebhookEndpoint`: itself) of `model`."""
    column = model.id if model is WebhookEndpoint else model.endpoint_id
    chosen = select(func.count()).select_from(model).where(column == uuid.UUID(endpoint_id))
    with db.read_connection() as connection:
        return int(connection.scalar(chosen) or 0)


def _attempts(db: Database, company_id: str) -> int:
    """The company's attempts: also any whose delivery went and they stayed."""
    chosen = select(func.count()).where(WebhookAttempt.company_id == uuid.UUID(company_id))
    with db.read_connection() as connection:
        return int(connection.scalar(chosen) or 0)


def _attempted(db: Database, settings: Settings, endpoint_id: str) -> int:
    """Lease the endpoint's due deliveries (4 at a time) and record a failed attempt of
    each: attempts to remove with them; how many."""
    claimed = [
        c
        for c in dispatch.claim(
            db, secret_box(settings), limit=100, per_endpoint=4, lease=timedelta(seconds=30)
        )
        if str(c.endpoint_id) == endpoint_id
    ]
    failed = Outcome(at=utcnow_ms(), duration_ms=1, error="refused")
    dispatch.record(
        db, [(c, failed) for c in claimed], schedule=[60.0], disable_after=timedelta(days=5)
    )
    return len(claimed)


def test_a_deleted_endpoint_is_gone_at_once_and_its_backlog_after(
    loopback_ok: HookTenant, settings: Settings, db: Database
) -> None:
    gone, kept = _backlog(loopback_ok, settings, db, 40)
    assert _attempted(db, settings, gone) == 4
    path = f"{ENDPOINTS}/{gone}"
    headers = loopback_ok.headers
    assert loopback_ok.client.delete(path, headers=headers).status_code == 204

    for method, suffix, body in (
        ("GET", "", None),
        ("PATCH", "", {"status": "enabled"}),
        ("DELETE", "", None),
        ("POST", "/rotate_secret", None),
        ("GET", "/deliveries", None),
        ("POST", "/test", None),
        ("POST", "/replay", {"since": "2026-01-01T00:00:00Z"}),
    ):
        response = loopback_ok.client.request(method, path + suffix, json=body, headers=headers)
        assert response.status_code == 404, (method, suffix, response.text)
    listed = loopback_ok.client.get(ENDPOINTS, headers=headers).json()["data"]
    assert [e["id"] for e in listed] == [kept]
    # the request removed none of the backlog
    assert _count(db, WebhookDelivery, gone) == 40
    assert _attempts(db, loopback_ok.company_id) == 4

    assert service.remove_deleted(db, batch=15) == 40
    assert _count(db, WebhookDelivery, gone) == 0
    assert _attempts(db, loopback_ok.company_id) == 0
    assert _count(db, WebhookEndpoint, gone) == 0
    assert _count(db, WebhookDelivery, kept) == 40
    assert service.remove_deleted(db, batch=15) == 0


def test_a_deleted_endpoints_deliveries_are_never_leased(
    loopback_ok: HookTenant, settings: Settings, db: Database
) -> None:
    gone, kept = _backlog(loopback_ok, settings, db, 6)
    assert (
        loopback_ok.client.delete(f"{ENDPOINTS}/{gone}", headers=loopback_ok.headers).status_code
        == 204
    )
    box = secret_box(settings)
    leased = [
        str(c.endpoint_id)
        for c in dispatch.claim(db, box, limit=1000, per_endpoint=100, lease=timedelta(seconds=30))
        if str(c.company_id) == loopback_ok.company_id
    ]
    assert leased == [kept] * 6


class Stopped(Exception):
    """The process stopping, where a statement would have run."""


@contextmanager
def _stopped_at_delete(db: Database, number: int) -> Iterator[None]:
    """The process stops (an exception) as its `number`-th DELETE of deliveries starts:
    what went before it is committed, the rest is not."""
    seen = [0]

    def before(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("DELETE FROM WEBHOOK_DELIVERIES"):
            seen[0] += 1
            if seen[0] == number:
                raise Stopped("stopped between two batches")

    event.listen(db.engine, "before_cursor_execute", before)
    try:
        yield
    finally:
        event.remove(db.engine, "before_cursor_execute", before)


def test_a_removal_stopped_between_batches_finishes_on_its_next_run(
    loopback_ok: HookTenant, other_hooks: HookTenant, settings: Settings, db: Database
) -> None:
    gone, kept = _backlog(loopback_ok, settings, db, 30)
    others = other_hooks.using(loopback_ok.client)
    (elsewhere, *_) = _backlog(others, settings, db, 5)
    service.remove_deleted(db)  # what earlier tests on this database deleted
    assert (
        loopback_ok.client.delete(f"{ENDPOINTS}/{gone}", headers=loopback_ok.headers).status_code
        == 204
    )

    with _stopped_at_delete(db, 3), pytest.raises(Stopped):
        service.remove_deleted(db, batch=10)
    assert _count(db, WebhookDelivery, gone) == 10  # two batches went, the third did not
    assert _count(db, WebhookEndpoint, gone) == 1

    assert service.remove_deleted(db, batch=10) == 10
    assert _count(db, WebhookDelivery, gone) == 0
    assert _count(db, WebhookEndpoint, gone) == 0
    assert _count(db, WebhookDelivery, kept) == 30
    assert _count(db, WebhookDelivery, elsewhere) == 5


def test_the_worker_removes_a_deleted_endpoints_backlog(
    make_client: Any, hooks: HookTenant, settings: Settings, db: Database
) -> None:
    working = hooks.using(
        make_client(
            worker_enabled=True,
            file_workers=0,
            worker_interval_seconds=0.2,
            webhook_allow_http=True,
            webhook_allow_private=True,
        )
    )
    endpoint = working.endpoint("http://127.0.0.1:9/gone")
    working.write_events(settings, 25)
    dispatch.sequence_all(db, uuid.UUID(working.company_id))
    assert (
        working.client.delete(f"{ENDPOINTS}/{endpoint['id']}", headers=working.headers).status_code
        == 204
    )
    deadline = time.monotonic() + 60
    while _count(db, WebhookEndpoint, endpoint["id"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _count(db, WebhookEndpoint, endpoint["id"]) == 0
    assert _count(db, WebhookDelivery, endpoint["id"]) == 0
