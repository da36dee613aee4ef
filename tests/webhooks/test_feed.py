"""The event feed: every event once, in commit order, never skipping one that committed
late; types, cursors, retention, scopes and tenants (contract section 13)."""

from __future__ import annotations

import random
import threading
import time
import uuid
from datetime import timedelta

from starlette.testclient import TestClient

from headwater.config import Settings
from headwater.db import Database
from headwater.events import log, outbox
from headwater.kit.clock import utcnow
from tests.factories import assert_problem, auth, create_credential, database, get_token
from tests.webhooks.conftest import HookTenant


def test_a_push_writes_its_event_with_the_transaction_as_data(hooks: HookTenant) -> None:
    pushed = hooks.push(1)
    events, _ = hooks.follow()
    assert [e["type"] for e in events] == ["dataset.schema_version_added", "transaction.completed"]
    event = events[1]
    assert set(event) == {"id", "type", "created_at", "company_id", "data"}
    assert event["company_id"] == hooks.company_id
    answered = hooks.client.get(
        f"/platform/v1/transactions/{pushed['transaction_id']}", headers=hooks.headers
    ).json()
    assert event["data"] == answered
    assert events[0]["data"] == {
        "client_id": hooks.client_id,
        "dataset_id": "orders",
        "schema_version": 1,
    }


def test_a_rejected_push_and_a_new_schema_version_write_theirs(
    hooks: HookTenant, admin: dict[str, str]
) -> None:
    _, cursor = hooks.follow()
    body = {"client_id": hooks.client_id, "dataset_id": "orders", "data": {"amount": -1}}
    refused = hooks.client.post("/platform/v1/data/json", json=body, headers=hooks.headers)
    assert refused.status_code == 422
    schema = {"type": "object", "properties": {"order_id": {"type": "string"}}}
    response = hooks.client.put(
        f"/admin/v1/clients/{hooks.client_id}/datasets/orders/schema",
        json={"schema": schema},
        headers=admin,
    )
    assert response.status_code == 200, response.text
    events, _ = hooks.follow(cursor)
    assert [e["type"] for e in events] == ["transaction.rejected", "dataset.schema_version_added"]
    assert events[0]["data"]["transaction_id"] == refused.json()["transaction_id"]
    assert events[0]["data"]["status"] == "rejected"
    assert events[1]["data"]["schema_version"] == 2


def test_a_workflow_status_change_writes_its_event(hooks: HookTenant) -> None:
    workflow = hooks.workflow()
    _, cursor = hooks.follow()
    renamed = hooks.client.patch(
        f"/app/v1/workflows/{workflow['id']}", json={"name": "x"}, headers=hooks.headers
    )
    assert renamed.status_code == 200
    activated = hooks.client.patch(
        f"/app/v1/workflows/{workflow['id']}", json={"status": "active"}, headers=hooks.headers
    )
    assert activated.status_code == 200, activated.text
    illegal = hooks.client.patch(
        f"/app/v1/workflows/{workflow['id']}", json={"status": "draft"}, headers=hooks.headers
    )
    assert illegal.status_code == 409
    events, _ = hooks.follow(cursor)
    # the rename and the refused change wrote nothing
    assert [e["type"] for e in events] == ["workflow.status_changed"]
    answered = hooks.client.get(f"/app/v1/workflows/{workflow['id']}", headers=hooks.headers)
    assert events[0]["data"] == answered.json() | {"previous_status": "draft"}


def test_pages_follow_the_cursor_and_filter_by_type(hooks: HookTenant) -> None:
    for n in range(5):
        hooks.push(n)
    first = hooks.events(limit=2)
    assert len(first["data"]) == 2
    everything, cursor = hooks.follow(limit=2)
    assert len(everything) == 6
    assert len({e["id"] for e in everything}) == 6
    assert everything[:2] == first["data"]
    # nothing new: the same cursor comes back
    again = hooks.events(after=cursor)
    assert again == {"data": [], "next_cursor": cursor}
    completed, _ = hooks.follow(type="transaction.completed")
    assert [e["type"] for e in completed] == ["transaction.completed"] * 5
    both, _ = hooks.follow(type="transaction.completed,dataset.schema_version_added")
    assert len(both) == 6


def test_the_feed_shows_only_the_callers_company(
    hooks: HookTenant, other_hooks: HookTenant
) -> None:
    hooks.push(1)
    other_hooks.push(2)
    mine, _ = hooks.follow()
    theirs, _ = other_hooks.follow()
    assert {e["company_id"] for e in mine} == {hooks.company_id}
    assert {e["company_id"] for e in theirs} == {other_hooks.company_id}
    assert not {e["id"] for e in mine} & {e["id"] for e in theirs}


def test_bad_parameters_answer_400_naming_them(hooks: HookTenant) -> None:
    for params, field in (
        ({"after": "not-a-cursor"}, "after"),
        ({"after": "cDp4"}, "after"),  # "p:x"
        ({"after": "cDo5OTk5OTk5OTk5"}, "after"),  # past the end of the log
        ({"type": "transaction.nope"}, "type"),
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"limit": "1.5"}, "limit"),
        ({"since": "x"}, "since"),
    ):
        response = hooks.client.get("/platform/v1/events", params=params, headers=hooks.headers)
        problem = assert_problem(response, 400)
        assert field in response.text, (params, problem)


def test_the_feed_needs_events_read(
    client: TestClient, admin: dict[str, str], hooks: HookTenant
) -> None:
    assert client.get("/platform/v1/events").status_code == 401
    credential = create_credential(client, admin, hooks.company_id, scopes=["data:read"])
    token = get_token(client, credential["client_id"], credential["client_secret"])
    response = client.get("/platform/v1/events", headers=auth(token))
    assert_problem(response, 403)
    # an operator token has no company
    assert client.get("/platform/v1/events", headers=admin).status_code == 403


def _write_event(db: Database, company_id: uuid.UUID, hold: float) -> uuid.UUID:
    """One event in a database transaction held open `hold` seconds before its commit."""
    event = outbox.event(
        "dataset.schema_version_added",
        company_id=company_id,
        data={"client_id": "c", "dataset_id": "d", "schema_version": 1},
    )
    with db.begin() as connection:
        outbox.write(connection, [event])
        time.sleep(hold)
    return event["id"]  # type: ignore[no-any-return]


def test_concurrent_writers_out_of_order_commits_every_event_exactly_once(
    db: Database, hooks: HookTenant
) -> None:
    """Writers insert in one order and commit in another (some hold their transaction
    open); a reader follows the cursor all the while and finds each event once."""
    company = uuid.UUID(hooks.company_id)
    _, cursor = hooks.follow()
    written: list[uuid.UUID] = []
    lock = threading.Lock()
    rng = random.Random(7)
    # SQLite has one writer at a time (commits cannot come out of order there): short
    # holds, so that queued writers stay within its busy timeout
    scale = 0.1 if db.engine.dialect.name == "sqlite" else 1.0
    holds = [scale * rng.choice([0, 0, 0.01, 0.05, 0.2]) for _ in range(8 * 15)]

    def writer(k: int) -> None:
        for i in range(15):
            event_id = _write_event(db, company, holds[k * 15 + i])
            with lock:
                written.append(event_id)

    seen: list[str] = []
    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    try:
        while any(t.is_alive() for t in threads):
            page = hooks.events(after=cursor, limit=7)
            seen.extend(e["id"] for e in page["data"])
            cursor = page["next_cursor"]
    finally:
        for thread in threads:
            thread.join()
    rest, _ = hooks.follow(cursor)
    seen.extend(e["id"] for e in rest)
    assert len(seen) == len(set(seen)), "an event came twice"
    assert sorted(seen) == sorted(str(e) for e in written), "an event was skipped"


def test_a_cursor_behind_removed_events_answers_410(settings: Settings, hooks: HookTenant) -> None:
    hooks.push(1)
    first = hooks.events(limit=1)
    hooks.push(2)
    hooks.events()  # every event so far has its position
    # retention with a cutoff in the future: every sequenced event is past it
    with database(settings) as db, db.begin() as connection:
        removed = log.purge(connection, older_than=utcnow() + timedelta(seconds=1), batch=100_000)
    assert removed >= 3
    expired = hooks.client.get(
        "/platform/v1/events", params={"after": first["next_cursor"]}, headers=hooks.headers
    )
    problem = assert_problem(expired, 410, "cursor_expired")
    assert "without `after`" in problem["detail"]
    # starting again without a cursor works, from the oldest event kept
    assert hooks.events()["data"] == []
    hooks.push(3)
    assert [e["type"] for e in hooks.follow()[0]] == ["transaction.completed"]


def test_the_openapi_describes_every_event_with_an_example(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    events = spec["paths"]["/platform/v1/events"]["get"]
    examples = events["responses"]["200"]["content"]["application/json"]["examples"]
    types = {example["value"]["data"][0]["type"] for example in examples.values()}
    assert types == set(outbox.TYPES)
    assert "410" in events["responses"]
    names = {p["name"] for p in events["parameters"]}
    assert names == {"after", "type", "limit"}
    paths = spec["paths"]
    for path in (
        "/platform/v1/webhook_endpoints",
        "/platform/v1/webhook_endpoints/{endpoint_id}",
        "/platform/v1/webhook_endpoints/{endpoint_id}/rotate_secret",
        "/platform/v1/webhook_endpoints/{endpoint_id}/deliveries",
        "/platform/v1/webhook_endpoints/{endpoint_id}/replay",
    ):
        assert path in paths, path
    assert (
        "202" in paths["/platform/v1/webhook_endpoints/{endpoint_id}/replay"]["post"]["responses"]
    )
