"""Webhook endpoints in the console: one added with its secret shown once, a test event
sent and its attempt seen, a replay queued; another company's endpoint answers 404."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from starlette.testclient import TestClient

from headwater.config import Settings
from tests.console.conftest import Browser
from tests.factories import create_credential
from tests.webhooks.conftest import DELIVERING, HookTenant, unschedule_earlier_backlogs
from tests.webhooks.receiver import Receiver, running_receiver

SCOPES = ["data:read", "webhooks:manage"]


def test_an_endpoint_added_shows_its_secret_once_and_a_test_event_is_delivered(
    make_client: Callable[..., TestClient],
    admin: dict[str, str],
    hooks: HookTenant,
    settings: Settings,
) -> None:
    unschedule_earlier_backlogs(settings)  # its worker delivers this test's alone
    app = make_client(**DELIVERING)
    credential = create_credential(app, admin, hooks.company_id, scopes=SCOPES)
    browser = Browser(app).signed_in(credential)
    with running_receiver() as receiver:
        created = browser.post(
            "/console/webhooks",
            {"url": receiver.at("/hook"), "event_types": "*", "description": "CRM sync"},
        )
        assert created.status_code == 201, created.text
        secret = re.search(r'<p class="secret" id="secret">(whsec_[^<]+)</p>', created.text)
        assert secret, created.text
        endpoint_id = re.search(r'href="/console/webhooks/([0-9a-f-]{36})"', created.text)
        assert endpoint_id
        path = f"/console/webhooks/{endpoint_id.group(1)}"
        listed = browser.get("/console/webhooks")
        assert receiver.at("/hook") in listed.text
        assert secret.group(1) not in listed.text and secret.group(1) not in browser.get(path).text

        sent = browser.post(f"{path}/test", {})
        assert sent.status_code == 303
        assert sent.headers["location"].startswith(path + "?sent=")
        _wait_for(receiver, 1)
        page = _wait_page(browser, path, "HTTP 200")
        assert "webhook.test" in page and "delivered" in page
        assert receiver.received[0].headers["webhook-id"] in page  # the event's id

        overview = browser.get("/console").text
        health = re.search(
            rf"{re.escape(receiver.at('/hook'))}</a></td><td>enabled</td>"
            r'<td class="num">(\d+)</td><td class="num">(\d+)</td><td class="num">(\d+)</td>',
            overview,
        )
        assert health and health.groups() == ("1", "0", "0"), overview

        replayed = browser.post(f"{path}/replay", {"since": "2026-01-01T00:00"})
        assert replayed.status_code == 303
        queued = re.fullmatch(re.escape(path) + r"\?queued=(\d+)", replayed.headers["location"])
        assert queued, replayed.headers["location"]
        page = browser.get(replayed.headers["location"]).text
        assert re.search(rf"{queued.group(1)} deliver(y|ies) queued again\.", page)


def _wait_for(receiver: Receiver, count: int) -> None:
    deadline = time.monotonic() + 30
    while len(receiver.received) < count:
        assert time.monotonic() < deadline, "nothing was delivered"
        time.sleep(0.05)


def _wait_page(browser: Browser, path: str, text: str) -> str:
    deadline = time.monotonic() + 30
    while True:
        page = browser.get(path).text
        if text in page:
            return page
        assert time.monotonic() < deadline, page
        time.sleep(0.05)


def test_a_url_that_may_not_receive_webhooks_is_refused_saying_why(
    client: TestClient, admin: dict[str, str], hooks: HookTenant
) -> None:
    credential = create_credential(client, admin, hooks.company_id, scopes=SCOPES)
    browser = Browser(client).signed_in(credential)
    for fields, said in (
        ({"url": "https://127.0.0.1/h", "event_types": "*"}, "127.0.0.1"),
        ({"url": "ftp://example.com/h", "event_types": "*"}, "https"),
        ({"url": "https://hooks.example.com/h"}, "event_types"),
        ({"url": "https://hooks.example.com/h", "event_types": "nope"}, "event_types"),
    ):
        response = browser.post("/console/webhooks", fields)
        assert response.status_code == 400, (fields, response.text)
        assert said in response.text, (fields, response.text)
    assert "No endpoint yet." in browser.get("/console/webhooks").text


def test_a_bad_replay_window_is_refused(
    make_client: Callable[..., TestClient], admin: dict[str, str], hooks: HookTenant
) -> None:
    app = make_client(webhook_allow_http=True, webhook_allow_private=True)
    credential = create_credential(app, admin, hooks.company_id, scopes=SCOPES)
    endpoint = hooks.using(app).endpoint("http://127.0.0.1:9/h")
    browser = Browser(app).signed_in(credential)
    path = f"/console/webhooks/{endpoint['id']}/replay"
    for fields in (
        {"since": ""},
        {"since": "yesterday"},
        {"since": "2026-11-02T00:00", "until": "2026-11-01T00:00"},
    ):
        assert browser.post(path, fields).status_code == 400, fields


def test_webhooks_need_their_scope_and_another_companys_endpoint_is_404(
    client: TestClient,
    make_client: Callable[..., TestClient],
    admin: dict[str, str],
    hooks: HookTenant,
    other_hooks: HookTenant,
) -> None:
    app = make_client(webhook_allow_http=True, webhook_allow_private=True)
    theirs = other_hooks.using(app).endpoint("http://127.0.0.1:9/h")
    reader = create_credential(client, admin, hooks.company_id, scopes=["data:read"])
    seen_by_reader = Browser(client).signed_in(reader)
    assert seen_by_reader.get("/console/webhooks").status_code == 403
    assert "Webhook deliveries" not in seen_by_reader.get("/console").text
    manager = create_credential(client, admin, hooks.company_id, scopes=SCOPES)
    browser = Browser(client).signed_in(manager)
    path = f"/console/webhooks/{theirs['id']}"
    assert browser.get(path).status_code == 404
    assert browser.post(f"{path}/test", {}).status_code == 404
    assert browser.post(f"{path}/replay", {"since": "2026-01-01T00:00"}).status_code == 404
