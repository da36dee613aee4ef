"""Leasing ahead: a worker leases up to two rounds of deliveries, attempts one round at
a time, and hands the queued ones back when it stops (webhooks/sender.py)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from sqlalchemy import func, select, update
from starlette.testclient import TestClient

from headwater.config import Settings
from headwater.kit.clock import utcnow
from headwater.runtime import secret_box
from headwater.webhooks import dispatch
from headwater.webhooks.dispatch import Claimed
from headwater.webhooks.models import WebhookDelivery
from headwater.webhooks.sender import LEASE_MARGIN, Deliverer
from tests.factories import database
from tests.http_server import ServerProcess
from tests.webhooks.conftest import DELIVERING, HookTenant, worker_env
from tests.webhooks.receiver import Receiver


def leased(settings: Settings, endpoint_id: str) -> int:
    """The endpoint's deliveries under a lease (other tests' share the database)."""
    with database(settings) as db, db.read_connection() as connection:
        return int(
            connection.scalar(
                select(func.count()).where(
                    WebhookDelivery.endpoint_id == uuid.UUID(endpoint_id),
                    WebhookDelivery.leased_until.is_not(None),
                )
            )
            or 0
        )


def wait_leased(settings: Settings, endpoint_id: str, count: int) -> int:
    """The endpoint's leased deliveries once there are `count` (or after 10 s): the
    worker's next poll may come a moment after the attempt it holds began."""
    deadline = time.monotonic() + 10
    while leased(settings, endpoint_id) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return leased(settings, endpoint_id)


def test_a_worker_leases_a_round_ahead_and_attempts_one_round_at_a_time(
    hooks: HookTenant,
    make_client: Callable[..., TestClient],
    receiver: Receiver,
    settings: Settings,
) -> None:
    """One slot: while the first attempt is held, a second delivery is leased and
    queued (two leases), and no two requests ever overlap."""
    worker = hooks.using(make_client(**DELIVERING | {"webhook_concurrency": 1}))
    endpoint = worker.endpoint(receiver.at("/one", delay=1.0), ["dataset.schema_version_added"])
    hooks.write_events(settings, 3)
    receiver.wait_for("/one", 1)
    # the round ahead is leased while the first attempt is held
    assert wait_leased(settings, endpoint["id"], 2) == 2
    arrivals = sorted(r.at for r in receiver.wait_for("/one", 3, timeout=30))
    assert all(b - a >= 0.9 for a, b in itertools.pairwise(arrivals))
    hooks.wait_deliveries(
        endpoint["id"], lambda found: [d["status"] for d in found] == ["delivered"] * 3
    )


@pytest.mark.http
def test_a_stopping_worker_hands_its_queued_deliveries_back(
    hooks: HookTenant,
    make_client: Callable[..., TestClient],
    receiver: Receiver,
    settings: Settings,
) -> None:
    """A worker with one slot stops while an attempt is held and a second delivery waits
    in its queue: the queued one is due again at once, not after its lease, and was never
    attempted."""
    creator = hooks.using(make_client(**DELIVERING | {"worker_enabled": False}))
    endpoint = creator.endpoint(receiver.at("/held", delay=1.5), ["dataset.schema_version_added"])
    process = ServerProcess(
        worker_env(settings) | {"HEADWATER_WEBHOOK_CONCURRENCY": "1"},
        log=settings.data_dir / "lease-ahead-worker.log",
        command="worker",
    )
    process.start()
    try:
        hooks.write_events(settings, 2)
        receiver.wait_for("/held", 1, timeout=30)
        assert wait_leased(settings, endpoint["id"], 2) == 2
    finally:
        process.stop()
    assert leased(settings, endpoint["id"]) == 0
    deliveries = hooks.deliveries(endpoint["id"])
    waiting = [d for d in deliveries if d["status"] == "pending"]
    assert [d["status"] for d in deliveries].count("delivered") == 1
    assert len(waiting) == 1 and waiting[0]["attempts"] == []
    with database(settings) as db, db.read_connection() as connection:
        due = connection.scalar(
            select(WebhookDelivery.next_attempt_at).where(
                WebhookDelivery.endpoint_id == uuid.UUID(endpoint["id"]),
                WebhookDelivery.status == "pending",
            )
        )
    assert due is not None and due <= utcnow()
    assert len(receiver.requests("/held")) == 1


def test_a_queued_delivery_whose_lease_no_longer_covers_an_attempt_is_not_attempted(
    settings: Settings,
) -> None:
    """Of two queued deliveries, the one whose lease ends before the timeout plus the
    margin is left to run out (due again then, for any worker); the other is attempted."""
    deliverer = Deliverer(None, None, settings)  # type: ignore[arg-type]
    started: list[int] = []

    async def attempt(claimed: Claimed) -> None:
        started.append(claimed.delivery_id)

    deliverer._attempt = attempt  # type: ignore[method-assign]
    now = utcnow()
    cover = timedelta(seconds=settings.webhook_timeout_seconds) + LEASE_MARGIN

    def queued(delivery_id: int, until: datetime) -> Claimed:
        return Claimed(
            delivery_id,
            uuid.uuid4(),
            uuid.uuid4(),
            "evt",
            "https://x.test/",
            ("s",),
            b"{}",
            0,
            until,
            now,
        )

    async def run() -> None:
        deliverer.queued.extend(
            [queued(1, now + cover - timedelta(seconds=1)), queued(2, now + cover * 2)]
        )
        deliverer._start_queued()
        await asyncio.sleep(0)

    asyncio.run(run())
    assert started == [2]
    assert not deliverer.queued


def test_a_worker_cancelled_while_it_stops_closes_its_connection_pools(
    settings: Settings,
) -> None:
    """The loop ending the process cancels a worker still waiting for an attempt in
    flight: its endpoints' pools are closed all the same (their sockets had been left to
    the garbage collector, a ResourceWarning in a later test)."""
    deliverer = Deliverer(None, None, settings)  # type: ignore[arg-type]

    async def run() -> bool:
        session = deliverer._session(uuid.uuid4())
        attempt = asyncio.create_task(asyncio.sleep(3600))
        deliverer.tasks[attempt] = None  # type: ignore[assignment]
        stop = asyncio.Event()
        stop.set()
        running = asyncio.create_task(deliverer.run(stop))
        await asyncio.sleep(0.05)  # it waits for the attempt in flight
        assert not running.done() and not session.closed
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        attempt.cancel()
        return session.closed

    assert asyncio.run(run())


def test_a_due_delivery_of_an_endpoint_not_enabled_is_never_leased(
    hooks: HookTenant,
    make_client: Callable[..., TestClient],
    receiver: Receiver,
    settings: Settings,
) -> None:
    """A lease reads the due-time index alone and leaves out the deliveries of every
    endpoint not enabled, even one whose delivery is due (as a hand-back or a retry
    recorded as it was disabled may leave it)."""
    allowing = hooks.using(make_client(webhook_allow_http=True, webhook_allow_private=True))
    endpoint = allowing.endpoint(receiver.at("/off"), ["transaction.completed"])
    hooks.push(1)
    hooks.events()  # sequenced: the endpoint's delivery is made
    path = f"/platform/v1/webhook_endpoints/{endpoint['id']}"
    hooks.client.patch(path, json={"status": "disabled"}, headers=hooks.headers)
    mine = uuid.UUID(endpoint["id"])
    with database(settings) as db:
        with db.begin() as connection:
            connection.execute(
                update(WebhookDelivery)
                .where(WebhookDelivery.endpoint_id == mine)
                .values(next_attempt_at=utcnow() - timedelta(seconds=1))
            )
        box = secret_box(settings)

        def leased_now() -> list[uuid.UUID]:
            taken = dispatch.claim(db, box, limit=100, per_endpoint=4, lease=timedelta(seconds=30))
            return [claimed.endpoint_id for claimed in taken if claimed.endpoint_id == mine]

        assert leased_now() == []
        hooks.client.patch(path, json={"status": "enabled"}, headers=hooks.headers)
        assert leased_now() == [mine]


def test_a_lease_fills_its_limit_from_events_fanned_out_together(
    hooks: HookTenant,
    make_client: Callable[..., TestClient],
    receiver: Receiver,
    settings: Settings,
) -> None:
    """Deliveries made by one sequencing are in event order, each event's to every
    endpoint, so that a lease's candidates (the oldest due, four times its limit) span
    every endpoint: made endpoint by endpoint, they were the first few endpoints' alone,
    and the slots (two an endpoint here) left a lease at a fraction of its limit."""
    allowing = hooks.using(make_client(webhook_allow_http=True, webhook_allow_private=True))
    endpoints = [allowing.endpoint(receiver.at(f"/many/{n}"))["id"] for n in range(20)]
    hooks.write_events(settings, 10)  # committed together: one sequencing fans them out
    with database(settings) as db:
        dispatch.sequence_all(db, uuid.UUID(hooks.company_id))
        taken = dispatch.claim(
            db, secret_box(settings), limit=40, per_endpoint=2, lease=timedelta(seconds=30)
        )
    by_endpoint = collections.Counter(str(claimed.endpoint_id) for claimed in taken)
    assert by_endpoint == dict.fromkeys(endpoints, 2)
