"""Deliveries over real HTTP to a receiver on loopback: the Standard Webhooks signature
(checked with the `standardwebhooks` package), retries, the log, replay, redirects,
timeouts, addresses checked at each delivery, rotation, slow receivers, disabling
(contract section 13)."""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import update
from standardwebhooks.webhooks import Webhook, WebhookVerificationError
from starlette.testclient import TestClient

from headwater.config import Settings
from headwater.kit.clock import utcnow
from headwater.webhooks.models import WebhookEndpoint
from tests.factories import database
from tests.webhooks.conftest import DELIVERING, HookTenant
from tests.webhooks.receiver import Receiver

ENDPOINTS = "/platform/v1/webhook_endpoints"


def verified(secret: str, request: Any) -> dict[str, Any]:
    """The body, once the standardwebhooks package accepts its signature."""
    payload = Webhook(secret).verify(request.body, request.headers)
    assert isinstance(payload, dict)
    return payload


def delivered(found: list[dict[str, Any]], n: int = 1) -> bool:
    return len(found) >= n and all(d["status"] == "delivered" for d in found)


def test_an_event_is_posted_signed_and_logged(
    hooks: HookTenant, delivering: TestClient, receiver: Receiver
) -> None:
    worker = hooks.using(delivering)
    endpoint = worker.endpoint(receiver.at("/hook"), ["transaction.completed"])
    pushed = hooks.push(1)
    (request,) = receiver.wait_for("/hook")
    payload = verified(endpoint["secret"], request)
    assert payload["type"] == "transaction.completed"
    assert payload["data"]["transaction_id"] == pushed["transaction_id"]
    assert request.headers["content-type"] == "application/json"
    assert request.headers["webhook-id"] == payload["id"]
    assert abs(int(request.headers["webhook-timestamp"]) - time.time()) < 60
    # the body is the event exactly as the feed answers it
    feed = [e for e in hooks.follow()[0] if e["id"] == payload["id"]]
    assert feed == [payload]
    (delivery,) = hooks.wait_deliveries(endpoint["id"], delivered)
    assert delivery["event_id"] == payload["id"]
    assert delivery["event_type"] == "transaction.completed"
    assert delivery["next_attempt_at"] is None
    (attempt,) = delivery["attempts"]
    assert attempt["status_code"] == 200
    assert attempt["error"] is None
    assert attempt["duration_ms"] >= 0
    metrics = hooks.client.get("/metrics").text
    for line in (
        'headwater_events_total{type="transaction.completed"}',
        'headwater_webhook_attempts_total{outcome="delivered"}',
        "headwater_webhook_attempt_seconds_count",
    ):
        found = [m for m in metrics.splitlines() if m.startswith(line)]
        assert found and float(found[0].rsplit(" ", 1)[1]) >= 1, line
    assert "headwater_webhook_oldest_pending_seconds" in metrics
    # a signature with another secret, or a changed body, does not verify
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + "A" * 43 + "=").verify(request.body, request.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(endpoint["secret"]).verify(request.body + b" ", request.headers)


def test_only_subscribed_types_are_sent(
    hooks: HookTenant, delivering: TestClient, receiver: Receiver
) -> None:
    worker = hooks.using(delivering)
    rejected_only = worker.endpoint(receiver.at("/rejected"), ["transaction.rejected"])
    everything = worker.endpoint(receiver.at("/all"), ["*"])
    hooks.push(1)
    body = {"client_id": hooks.client_id, "dataset_id": "orders", "data": {"amount": -1}}
    assert (
        hooks.client.post("/platform/v1/data/json", json=body, headers=hooks.headers).status_code
        == 422
    )
    receiver.wait_for("/all", 2)
    (request,) = receiver.wait_for("/rejected")
    assert verified(rejected_only["secret"], request)["type"] == "transaction.rejected"
    types = sorted(verified(everything["secret"], r)["type"] for r in receiver.requests("/all"))
    assert types == ["transaction.completed", "transaction.rejected"]
    time.sleep(0.5)
    assert len(receiver.requests("/rejected")) == 1


def test_endpoints_of_one_type_set_each_get_the_events_written_since_they_were_made(
    hooks: HookTenant, delivering: TestClient, receiver: Receiver
) -> None:
    """Endpoints that want the same types share one fan-out statement; each still gets
    only the events written after it was made, however the events are sequenced."""
    worker = hooks.using(delivering)
    early = [worker.endpoint(receiver.at(f"/early{k}"), ["transaction.completed"]) for k in (0, 1)]
    hooks.push(1)
    late = worker.endpoint(receiver.at("/late"), ["transaction.completed"])
    hooks.push(2)
    for endpoint in early:
        hooks.wait_deliveries(endpoint["id"], lambda found: delivered(found, 2))
    (only,) = hooks.wait_deliveries(late["id"], delivered)
    second = {r.headers["webhook-id"] for r in receiver.requests("/early0")}
    assert second == {r.headers["webhook-id"] for r in receiver.requests("/early1")}
    assert len(second) == 2 and only["event_id"] in second
    time.sleep(0.5)
    assert len(receiver.requests("/late")) == 1


def test_a_failed_attempt_is_retried_then_delivered(
    hooks: HookTenant, delivering: TestClient, receiver: Receiver
) -> None:
    worker = hooks.using(delivering)
    endpoint = worker.endpoint(receiver.at("/flaky", fail_first=1), ["transaction.completed"])
    hooks.push(1)
    first, second = receiver.wait_for("/flaky", 2)
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    # about a second apart (the schedule's first delay, with up to 10% jitter)
    assert second.at - first.at >= 0.9
    (delivery,) = hooks.wait_deliveries(endpoint["id"], delivered)
    assert [a["status_code"] for a in delivery["attempts"]] == [500, 200]


def test_after_the_last_retry_the_delivery_fails_and_replay_sends_it_again(
    hooks: HookTenant, delivering: TestClient, receiver: Receiver
) -> None:
    worker = hooks.using(delivering)
    since = utcnow() - timedelta(seconds=1)
    endpoint = worker.endpoint(receiver.at("/down", status=503), ["transaction.completed"])
    hooks.push(1)
    (delivery,) = hooks.wait_deliveries(
        endpoint["id"], lambda found: bool(found) and found[0]["status"] == "failed"
    )
    # the first attempt and the schedule's two retries
    assert [a["status_code"] for a in delivery["attempts"]] == [503, 503, 503]
    assert hooks.deliveries(endpoint["id"], status="failed") == [delivery]
    assert hooks.deliveries(endpoint["id"], status="delivered") == []
    receiver.behaviours["/down"].status = 204
    response = hooks.client.post(
        f"{ENDPOINTS}/{endpoint['id']}/replay",
        json={"since": since.isoformat(), "only_failed": True},
        headers=hooks.headers,
    )
    assert response.status_code == 202, response.text
    assert response.json() == {"queued": 1}
    (again,) = hooks.wait_deliveries(endpoint["id"], delivered)
    assert [a["status_code"] for a in again["attempts"]] == [503, 503, 503, 204], again
    ids = {r.headers["webhook-id"] for r in receiver.requests("/down")}
    assert ids == {delivery["event_id"]}


def test_replay_of_a_window_sends_delivered_and_never_sent_events(
    hooks: HookTenant, delivering: TestClient, receiver: Receiver
) -> None:
    since = utcnow() - timedelta(seconds=1)
    hooks.push(1)  # before the endpoint exists: never sent
    worker = hooks.using(delivering)
    endpoint = worker.endpoint(receiver.at("/replay"), ["transaction.completed"])
    hooks.push(2)
    receiver.wait_for("/replay", 1)
    hooks.wait_deliveries(endpoint["id"], delivered)
    response = hooks.client.post(
        f"{ENDPOINTS}/{endpoint['id']}/replay",
        json={"since": since.isoformat(), "until": (utcnow() + timedelta(seconds=1)).isoformat()},
        headers=hooks.headers,
    )
    assert response.json() == {"queued": 2}
    requests = receiver.wait_for("/replay", 3)
    ids = [r.headers["webhook-id"] for r in requests]
    assert len(set(ids)) == 2 and ids.count(ids[0]) == 2
    hooks.wait_deliveries(endpoint["id"], lambda found: delivered(found, 2))
    # a window with nothing in it queues nothing
    empty = hooks.client.post(
        f"{ENDPOINTS}/{endpoint['id']}/replay",
        json={"since": "2020-01-01T00:00:00Z", "until": "2020-01-02T00:00:00Z"},
        headers=hooks.headers,
    )
    assert empty.json() == {"queued": 0}


def test_redirects_are_not_followed(
    hooks: HookTenant, delivering: TestClient, receiver: Receiver
) -> None:
    worker = hooks.using(delivering)
    target = receiver.at("/elsewhere")
    endpoint = worker.endpoint(
        receiver.at("/moved", status=307, location=target), ["transaction.completed"]
    )
    hooks.push(1)
    receiver.wait_for("/moved")
    (delivery,) = hooks.wait_deliveries(endpoint["id"], lambda f: bool(f and f[0]["attempts"]))
    attempt = delivery["attempts"][0]
    assert attempt["status_code"] == 307
    assert attempt["error"] == "redirects are not followed"
    assert delivery["status"] == "pending"
    assert receiver.requests("/elsewhere") == []


def test_a_slow_answer_times_out(
    hooks: HookTenant, delivering: TestClient, receiver: Receiver
) -> None:
    worker = hooks.using(delivering)
    endpoint = worker.endpoint(receiver.at("/slow", delay=4), ["transaction.completed"])
    hooks.push(1)
    (delivery,) = hooks.wait_deliveries(
        endpoint["id"], lambda f: bool(f and f[0]["attempts"]), timeout=20
    )
    attempt = delivery["attempts"][0]
    assert attempt["status_code"] is None
    assert attempt["error"] == "timed out after 2 s"
    assert 1900 <= attempt["duration_ms"] < 4000


def test_a_slow_receiver_does_not_delay_another(
    hooks: HookTenant, delivering: TestClient, receiver: Receiver, settings: Settings
) -> None:
    worker = hooks.using(delivering)
    sluggish = worker.endpoint(
        receiver.at("/sluggish", delay=1.5), ["dataset.schema_version_added"]
    )
    healthy = worker.endpoint(receiver.at("/healthy"), ["dataset.schema_version_added"])
    hooks.write_events(settings, 12)  # committed together
    slow = _attempts(hooks.wait_deliveries(sluggish["id"], lambda f: delivered(f, 12), timeout=60))
    fast = _attempts(hooks.wait_deliveries(healthy["id"], lambda f: delivered(f, 12)))
    # Read from the attempts the service stored (their start and duration), not from the
    # receiver's clock: on a loaded machine a request may wait to be read for long enough
    # that the sender's 2 s timeout, not the answer, frees its slot. At most 4 attempts to
    # the slow endpoint ran at once, and 4 did (the twelve were due together) ...
    assert max(_running(slow, start) for start, _ in slow) == 4
    # ... and the healthy one had all twelve before the slow one's fifth began
    assert max(start for start, _ in fast) < sorted(slow)[4][0]


def _attempts(deliveries: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """Every attempt of the deliveries: (start, end), epoch seconds."""
    return [
        (at, at + attempt["duration_ms"] / 1000)
        for delivery in deliveries
        for attempt in delivery["attempts"]
        for at in [datetime.fromisoformat(attempt["at"]).timestamp()]
    ]


def _running(attempts: list[tuple[float, float]], moment: float) -> int:
    """How many attempts were running at `moment` (2 ms allowed for the rounding of
    their starts and durations to milliseconds)."""
    return sum(1 for start, end in attempts if start <= moment < end - 0.002)


def test_after_a_rotation_both_secrets_sign_for_a_day(
    hooks: HookTenant, delivering: TestClient, receiver: Receiver
) -> None:
    worker = hooks.using(delivering)
    endpoint = worker.endpoint(receiver.at("/rotated"), ["transaction.completed"])
    rotated = hooks.client.post(
        f"{ENDPOINTS}/{endpoint['id']}/rotate_secret", headers=hooks.headers
    ).json()["secret"]
    hooks.push(1)
    (request,) = receiver.wait_for("/rotated")
    assert len(request.headers["webhook-signature"].split(" ")) == 2
    assert verified(rotated, request) == verified(endpoint["secret"], request)


def test_a_disabled_endpoint_gets_nothing_until_enabled(
    hooks: HookTenant, delivering: TestClient, receiver: Receiver
) -> None:
    worker = hooks.using(delivering)
    endpoint = worker.endpoint(receiver.at("/paused"), ["transaction.completed"])
    path = f"{ENDPOINTS}/{endpoint['id']}"
    hooks.client.patch(path, json={"status": "disabled"}, headers=hooks.headers)
    hooks.push(1)
    hooks.events()  # sequenced: a disabled endpoint gets no delivery
    time.sleep(1)
    assert receiver.requests("/paused") == []
    assert hooks.deliveries(endpoint["id"]) == []
    hooks.client.patch(path, json={"status": "enabled"}, headers=hooks.headers)
    hooks.push(2)
    (request,) = receiver.wait_for("/paused")
    assert verified(endpoint["secret"], request)["data"]["records_received"] == 1


def test_an_address_refused_at_delivery_fails_the_attempt(
    hooks: HookTenant,
    make_client: Callable[..., TestClient],
    loopback_client: TestClient,
    receiver: Receiver,
) -> None:
    """The endpoint was allowed where it was made; the delivering worker does not allow
    loopback: each attempt checks again, and nothing reaches the receiver."""
    created_on = hooks.using(loopback_client)
    endpoint = created_on.endpoint(receiver.at("/private"), ["transaction.completed"])
    make_client(**DELIVERING | {"webhook_allow_private": False})
    hooks.push(1)
    (delivery,) = hooks.wait_deliveries(endpoint["id"], lambda f: bool(f and f[0]["attempts"]))
    assert delivery["attempts"][0]["status_code"] is None
    assert "loopback" in delivery["attempts"][0]["error"]
    assert receiver.requests("/private") == []


def test_dns_rebinding_is_caught_at_delivery(
    hooks: HookTenant,
    make_client: Callable[..., TestClient],
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A name that resolved to a public address when the endpoint was made, and to
    loopback when the event is sent: the attempt fails and no request is made. (The
    resolver is the one thing replaced: no name resolves to a public address here, and
    nothing may be sent to one.)"""
    port = int(receiver.url.rsplit(":", 1)[1])
    answers = iter(["93.184.216.34"])
    real = socket.getaddrinfo

    def rebinding(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "rebind.test":
            address = next(answers, "127.0.0.1")
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    strict = hooks.using(make_client(webhook_allow_http=True))
    endpoint = strict.endpoint(f"http://rebind.test:{port}/rebound", ["transaction.completed"])
    make_client(**DELIVERING | {"webhook_allow_private": False})
    hooks.push(1)
    (delivery,) = hooks.wait_deliveries(endpoint["id"], lambda f: bool(f and f[0]["attempts"]))
    assert "rebind.test resolves to a loopback address" in delivery["attempts"][0]["error"]
    assert receiver.requests("/rebound") == []


def test_an_endpoint_failing_for_five_days_is_disabled_with_an_event(
    hooks: HookTenant,
    make_client: Callable[..., TestClient],
    receiver: Receiver,
    settings: Settings,
) -> None:
    # its periodic jobs every 0.2 s: the disabled endpoint's backlog leaves the schedule
    # at the next `tend_endpoint_backlogs` (10 s apart by default)
    worker = hooks.using(make_client(**DELIVERING | {"worker_interval_seconds": 0.2}))
    endpoint = worker.endpoint(receiver.at("/dead", status=500), ["transaction.completed"])
    hooks.push(1)
    hooks.wait_deliveries(endpoint["id"], lambda f: bool(f and f[0]["attempts"]))
    with database(settings) as db, db.begin() as connection:
        connection.execute(
            update(WebhookEndpoint)
            .where(WebhookEndpoint.id == uuid.UUID(endpoint["id"]))
            .values(failing_since=utcnow() - timedelta(days=5, minutes=1))
        )
    path = f"{ENDPOINTS}/{endpoint['id']}"
    deadline = time.monotonic() + 20
    while hooks.client.get(path, headers=hooks.headers).json()["status"] != "disabled":
        assert time.monotonic() < deadline, "never disabled"
        time.sleep(0.1)
    events = [e for e in hooks.follow()[0] if e["type"] == "webhook_endpoint.disabled"]
    assert len(events) == 1
    assert events[0]["data"]["id"] == endpoint["id"]
    assert events[0]["data"]["status"] == "disabled"
    assert "secret" not in json.dumps(events[0])
    # a disabled endpoint's pending deliveries leave the schedule (the worker takes them
    # out after the recorder's transaction: `dispatch.reschedule`) until it is
    # enabled
    (pending,) = hooks.wait_deliveries(
        endpoint["id"], lambda found: found[0]["next_attempt_at"] is None
    )
    assert pending["status"] == "pending"
    # a replay while it is disabled queues without scheduling
    replayed = hooks.client.post(
        f"{path}/replay", json={"since": "2020-01-01T00:00:00Z"}, headers=hooks.headers
    )
    assert replayed.status_code == 202, replayed.text
    assert all(d["next_attempt_at"] is None for d in hooks.deliveries(endpoint["id"]))
    # a success clears the failing time: enabled again, it has five more days
    receiver.behaviours["/dead"].status = 200
    hooks.client.patch(path, json={"status": "enabled"}, headers=hooks.headers)
    hooks.wait_deliveries(endpoint["id"], delivered)


def test_a_deleted_endpoint_gets_nothing_more(
    hooks: HookTenant, delivering: TestClient, receiver: Receiver
) -> None:
    worker = hooks.using(delivering)
    endpoint = worker.endpoint(receiver.at("/gone", status=500), ["transaction.completed"])
    hooks.push(1)
    receiver.wait_for("/gone")
    assert (
        hooks.client.delete(f"{ENDPOINTS}/{endpoint['id']}", headers=hooks.headers).status_code
        == 204
    )
    time.sleep(2.5)  # past the retry delay
    assert len(receiver.requests("/gone")) == 1


def test_two_workers_send_each_event_once(
    hooks: HookTenant,
    make_client: Callable[..., TestClient],
    receiver: Receiver,
    settings: Settings,
) -> None:
    """Two delivering workers on one database (PostgreSQL: claims skip each other's
    locked rows; SQLite: one writer at a time): every event arrives, none twice."""
    make_client(**DELIVERING)
    worker = hooks.using(make_client(**DELIVERING))
    endpoint = worker.endpoint(receiver.at("/shared"), ["dataset.schema_version_added"])
    for _ in range(4):
        hooks.write_events(settings, 25)
    hooks.wait_deliveries(endpoint["id"], lambda found: delivered(found, 100))
    ids = [r.headers["webhook-id"] for r in receiver.requests("/shared")]
    assert len(ids) == 100
    assert len(set(ids)) == 100


def test_a_test_event_goes_to_its_endpoint_alone_signed_and_never_to_the_feed(
    hooks: HookTenant, delivering: TestClient, receiver: Receiver
) -> None:
    worker = hooks.using(delivering)
    tested = worker.endpoint(receiver.at("/tested"), ["transaction.completed"])
    other = worker.endpoint(receiver.at("/other"), ["*"])
    _, cursor = hooks.follow()
    sent = hooks.client.post(f"{ENDPOINTS}/{tested['id']}/test", headers=hooks.headers)
    assert sent.status_code == 202, sent.text
    (request,) = receiver.wait_for("/tested")
    payload = verified(tested["secret"], request)
    assert payload["id"] == sent.json()["event_id"] == request.headers["webhook-id"]
    assert payload["type"] == "webhook.test"
    assert payload["data"] == {"endpoint_id": tested["id"]}
    assert payload["company_id"] == hooks.company_id
    (delivery,) = hooks.wait_deliveries(tested["id"], delivered)
    assert delivery["event_type"] == "webhook.test"
    # not in the feed, not to the endpoint that wants every type, not in a replay
    hooks.push(1)
    after, _ = hooks.follow(cursor)
    assert [e["type"] for e in after] == ["transaction.completed"]
    receiver.wait_for("/other")
    time.sleep(0.5)
    assert [r.headers["webhook-id"] for r in receiver.requests("/other")] == [after[0]["id"]]
    replayed = hooks.client.post(
        f"{ENDPOINTS}/{other['id']}/replay",
        json={"since": "2026-01-01T00:00:00Z"},
        headers=hooks.headers,
    )
    assert replayed.status_code == 202, replayed.text
    replayed_types = sorted(d["event_type"] for d in hooks.deliveries(other["id"]))
    # the dataset's registration, before the endpoint, and the push: never the test
    assert replayed_types == ["dataset.schema_version_added", "transaction.completed"]
    assert replayed.json() == {"queued": 2}


def test_a_test_event_to_a_disabled_endpoint_waits_until_it_is_enabled(
    hooks: HookTenant, delivering: TestClient, receiver: Receiver
) -> None:
    worker = hooks.using(delivering)
    endpoint = worker.endpoint(receiver.at("/later"))
    path = f"{ENDPOINTS}/{endpoint['id']}"
    hooks.client.patch(path, json={"status": "disabled"}, headers=hooks.headers)
    sent = hooks.client.post(f"{path}/test", headers=hooks.headers)
    assert sent.status_code == 202, sent.text
    time.sleep(1)
    assert receiver.requests("/later") == []
    hooks.client.patch(path, json={"status": "enabled"}, headers=hooks.headers)
    (request,) = receiver.wait_for("/later")
    assert request.headers["webhook-id"] == sent.json()["event_id"]


def test_a_test_event_answers_404_for_an_endpoint_not_the_callers(
    hooks: HookTenant, other_hooks: HookTenant, delivering: TestClient, receiver: Receiver
) -> None:
    theirs = other_hooks.using(delivering).endpoint(receiver.at("/theirs"))
    for endpoint_id in (theirs["id"], str(uuid.uuid4())):
        response = hooks.client.post(f"{ENDPOINTS}/{endpoint_id}/test", headers=hooks.headers)
        assert response.status_code == 404, response.text
        assert response.json()["code"] == "webhook_endpoint_not_found"
    assert other_hooks.deliveries(theirs["id"]) == []
    response = hooks.client.post(f"{ENDPOINTS}/not-a-uuid/test", headers=hooks.headers)
    assert response.status_code == 400, response.text
    assert hooks.client.post(f"{ENDPOINTS}/{theirs['id']}/test").status_code == 401
