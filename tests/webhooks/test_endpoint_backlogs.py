"""An endpoint's backlog after a change through the API (contract section 13), moved by
the worker after the answer, a short database transaction at a time: in the request, as
one transaction, 100,000 pending deliveries held SQLite's one writer, or on PostgreSQL
the endpoint's row, for 2-5 s.

- Deleted: gone from the API at once, its deliveries never leased again, then removed
  with their attempts.
- Disabled: never leased from then on; its pending deliveries then leave the schedule
  (no due time, so that leases do not pass over them).
- Enabled again: those among its newest deliveries due at once, in the request; the
  older ones after it.
"""

from __future__ import annotations

import threading
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
from tests.factories import database
from tests.webhooks.conftest import HookTenant

ENDPOINTS = "/platform/v1/webhook_endpoints"


def _gone(tenant: HookTenant, db: Database) -> None:
    """The tenant's endpoints deleted and removed: their backlogs (due, to a closed port)
    would fill the slots of a worker that a later test on this database starts."""
    listed = tenant.client.get(ENDPOINTS, params={"page_size": 100}, headers=tenant.headers)
    for endpoint in listed.json()["data"]:
        tenant.client.delete(f"{ENDPOINTS}/{endpoint['id']}", headers=tenant.headers)
    service.remove_deleted(db)


@pytest.fixture
def loopback_ok(
    loopback_client: TestClient, hooks: HookTenant, other_hooks: HookTenant, db: Database
) -> Iterator[HookTenant]:
    yield hooks.using(loopback_client)
    for tenant in (hooks, other_hooks):
        _gone(tenant.using(loopback_client), db)


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
    service.remove_deleted(db)  # what earlier tests on this database deleted
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
def _stopped_at(db: Database, statement_start: str, number: int) -> Iterator[None]:
    """The process stops (an exception) as its `number`-th statement starting with
    `statement_start` starts: what went before it is committed, the rest is not."""
    seen = [0]

    def before(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith(statement_start):
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

    with _stopped_at(db, "DELETE FROM WEBHOOK_DELIVERIES", 3), pytest.raises(Stopped):
        service.remove_deleted(db, batch=10)
    assert _count(db, WebhookDelivery, gone) == 10  # two batches went, the third did not
    assert _count(db, WebhookEndpoint, gone) == 1

    assert service.remove_deleted(db, batch=10) == 10
    assert _count(db, WebhookDelivery, gone) == 0
    assert _count(db, WebhookEndpoint, gone) == 0
    assert _count(db, WebhookDelivery, kept) == 30
    assert _count(db, WebhookDelivery, elsewhere) == 5


def _working(make_client: Any, tenant: HookTenant) -> HookTenant:
    """The tenant on an app whose worker runs, its jobs every 0.2 s."""
    return tenant.using(
        make_client(
            worker_enabled=True,
            file_workers=0,
            worker_interval_seconds=0.2,
            webhook_allow_http=True,
            webhook_allow_private=True,
        )
    )


def test_the_worker_removes_a_deleted_endpoints_backlog(
    make_client: Any, hooks: HookTenant, settings: Settings, db: Database
) -> None:
    working = _working(make_client, hooks)
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


def _pending(db: Database, endpoint_id: str, *, scheduled: bool = True) -> list[int]:
    """The event positions of the endpoint's pending deliveries with a due time (not
    `scheduled`: without one), in order."""
    due = WebhookDelivery.next_attempt_at
    chosen = (
        select(WebhookDelivery.event_seq)
        .where(
            WebhookDelivery.endpoint_id == uuid.UUID(endpoint_id),
            WebhookDelivery.status == "pending",
            due.is_not(None) if scheduled else due.is_(None),
        )
        .order_by(WebhookDelivery.event_seq)
    )
    with db.read_connection() as connection:
        return list(connection.scalars(chosen))


def _scheduled(db: Database, endpoint_id: str) -> int:
    return len(_pending(db, endpoint_id))


def _leased(db: Database, settings: Settings, company_id: str) -> list[str]:
    box = secret_box(settings)
    taken = dispatch.claim(db, box, limit=1000, per_endpoint=100, lease=timedelta(seconds=1))
    return [str(c.endpoint_id) for c in taken if str(c.company_id) == company_id]


def _patch(tenant: HookTenant, endpoint_id: str, status: str) -> None:
    response = tenant.client.patch(
        f"{ENDPOINTS}/{endpoint_id}", json={"status": status}, headers=tenant.headers
    )
    assert response.status_code == 200, response.text
    assert response.json()["status"] == status


def _changed_then_stopped(
    tenant: HookTenant, endpoint_id: str, status: str, db: Database, *, at: int
) -> None:
    """The endpoint's status changed through the API, then the worker's rescheduling
    (10 deliveries a batch) stopped as its `at`-th update began."""
    _patch(tenant, endpoint_id, status)
    with _stopped_at(db, "UPDATE WEBHOOK_DELIVERIES", at), pytest.raises(Stopped):
        dispatch.reschedule(db, batch=10)


def test_a_disabled_endpoints_backlog_leaves_the_schedule_after_the_answer(
    loopback_ok: HookTenant, settings: Settings, db: Database
) -> None:
    paused, kept = _backlog(loopback_ok, settings, db, 30)
    service.remove_deleted(db)  # what earlier tests on this database deleted
    dispatch.reschedule(db)  # and disabled
    _patch(loopback_ok, paused, "disabled")
    assert _scheduled(db, paused) == 30  # the request moved none of them
    assert _leased(db, settings, loopback_ok.company_id) == [kept] * 30

    assert dispatch.reschedule(db, batch=7) == 30
    assert _scheduled(db, paused) == 0
    assert dispatch.reschedule(db, batch=7) == 0  # the mark is cleared
    assert _count(db, WebhookDelivery, paused) == 30

    _patch(loopback_ok, paused, "enabled")
    assert _scheduled(db, paused) == 30  # due again at once: fewer than ENABLED_AT_ONCE
    assert dispatch.reschedule(db) == 0  # and no mark left
    time.sleep(1.1)  # the kept endpoint's leases (of 1 s) have run out
    assert sorted(_leased(db, settings, loopback_ok.company_id)) == sorted([paused, kept] * 30)


def test_an_unscheduling_stopped_between_batches_finishes_on_its_next_run(
    loopback_ok: HookTenant, settings: Settings, db: Database
) -> None:
    paused, kept = _backlog(loopback_ok, settings, db, 30)
    dispatch.reschedule(db)  # what earlier tests on this database disabled
    _changed_then_stopped(loopback_ok, paused, "disabled", db, at=3)
    assert _scheduled(db, paused) == 10  # two batches went, the third did not
    assert dispatch.reschedule(db, batch=10) == 10
    assert _scheduled(db, paused) == 0
    assert _scheduled(db, kept) == 30


def test_an_endpoint_enabled_during_its_unscheduling_keeps_every_delivery_due(
    loopback_ok: HookTenant, settings: Settings, db: Database
) -> None:
    paused, _ = _backlog(loopback_ok, settings, db, 30)
    dispatch.reschedule(db)  # what earlier tests on this database disabled
    _changed_then_stopped(loopback_ok, paused, "disabled", db, at=2)
    assert _scheduled(db, paused) == 20
    _patch(loopback_ok, paused, "enabled")
    assert _scheduled(db, paused) == 30
    assert dispatch.reschedule(db, batch=10) == 0
    assert _scheduled(db, paused) == 30


def _paused(tenant: HookTenant, settings: Settings, db: Database, events: int) -> str:
    """An endpoint with `events` pending deliveries, disabled and out of the schedule."""
    paused, _ = _backlog(tenant, settings, db, events)
    dispatch.reschedule(db)  # what earlier tests on this database changed
    _patch(tenant, paused, "disabled")
    dispatch.reschedule(db)
    assert _scheduled(db, paused) == 0
    return paused


def test_an_endpoint_enabled_again_has_its_newest_due_at_once_and_the_rest_after(
    loopback_ok: HookTenant, settings: Settings, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    paused = _paused(loopback_ok, settings, db, 30)
    monkeypatch.setattr(dispatch, "ENABLED_AT_ONCE", 12)
    with db.read_connection() as connection:
        every = list(
            connection.scalars(
                select(WebhookDelivery.event_seq)
                .where(WebhookDelivery.endpoint_id == uuid.UUID(paused))
                .order_by(WebhookDelivery.event_seq)
            )
        )
    _patch(loopback_ok, paused, "enabled")
    assert _pending(db, paused) == every[-12:]  # the newest, in the request

    assert dispatch.reschedule(db, batch=7) == 18
    assert _pending(db, paused) == every
    assert dispatch.reschedule(db, batch=7) == 0  # the mark is cleared


def _enabling_stopped(
    tenant: HookTenant,
    settings: Settings,
    db: Database,
    monkeypatch: pytest.MonkeyPatch,
    *,
    at: int,
) -> str:
    """An endpoint of 30 unscheduled deliveries enabled again (its newest 5 due in the
    request), whose rescheduling of the rest (10 a batch) stopped as its `at`-th
    update began."""
    paused = _paused(tenant, settings, db, 30)
    monkeypatch.setattr(dispatch, "ENABLED_AT_ONCE", 5)
    _changed_then_stopped(tenant, paused, "enabled", db, at=at)
    return paused


def test_an_enabling_stopped_between_batches_finishes_on_its_next_run(
    loopback_ok: HookTenant, settings: Settings, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    paused = _enabling_stopped(loopback_ok, settings, db, monkeypatch, at=3)
    assert _scheduled(db, paused) == 5 + 20  # two batches went, the third did not
    assert dispatch.reschedule(db, batch=10) == 5
    assert _scheduled(db, paused) == 30
    assert dispatch.reschedule(db, batch=10) == 0


def test_an_endpoint_disabled_during_its_enabling_ends_out_of_the_schedule(
    loopback_ok: HookTenant, settings: Settings, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    paused = _enabling_stopped(loopback_ok, settings, db, monkeypatch, at=2)
    assert _scheduled(db, paused) == 5 + 10
    _patch(loopback_ok, paused, "disabled")
    assert paused not in _leased(db, settings, loopback_ok.company_id)  # disabled
    assert dispatch.reschedule(db, batch=10) == 15
    assert _scheduled(db, paused) == 0
    assert dispatch.reschedule(db, batch=10) == 0


def test_the_worker_schedules_an_enabled_endpoints_older_deliveries(
    make_client: Any,
    loopback_ok: HookTenant,
    settings: Settings,
    db: Database,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    paused = _paused(loopback_ok, settings, db, 25)
    working = _working(make_client, loopback_ok)
    monkeypatch.setattr(dispatch, "ENABLED_AT_ONCE", 5)
    _patch(working, paused, "enabled")
    deadline = time.monotonic() + 60
    while len(_pending(db, paused, scheduled=False)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(_pending(db, paused, scheduled=False)) == 0


def _at_once(settings: Settings, run: Any) -> list[int]:
    """`run(db)` in two threads at once, each with a database of its own (as two
    workers whose runs of the job overlap: one outlasting its period); their answers."""
    gate = threading.Barrier(2)
    answers: list[int] = []

    def one() -> None:
        with database(settings) as own:
            gate.wait()
            answers.append(run(own))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(answers) == 2, "a run failed"
    return answers


def test_two_removals_at_once_remove_each_delivery_once(
    loopback_ok: HookTenant, settings: Settings, db: Database
) -> None:
    gone, kept = _backlog(loopback_ok, settings, db, 60)
    service.remove_deleted(db)  # what earlier tests on this database deleted
    assert (
        loopback_ok.client.delete(f"{ENDPOINTS}/{gone}", headers=loopback_ok.headers).status_code
        == 204
    )
    answers = _at_once(settings, lambda database: service.remove_deleted(database, batch=5))
    assert sum(answers) == 60
    assert _count(db, WebhookDelivery, gone) == 0
    assert _count(db, WebhookEndpoint, gone) == 0
    assert _count(db, WebhookDelivery, kept) == 60


def test_two_reschedulings_at_once_move_each_delivery_once(
    loopback_ok: HookTenant, settings: Settings, db: Database
) -> None:
    paused, kept = _backlog(loopback_ok, settings, db, 60)
    dispatch.reschedule(db)  # what earlier tests on this database changed
    _patch(loopback_ok, paused, "disabled")
    answers = _at_once(settings, lambda database: dispatch.reschedule(database, batch=5))
    assert sum(answers) == 60
    assert _scheduled(db, paused) == 0
    assert _scheduled(db, kept) == 60
    assert dispatch.reschedule(db) == 0
