"""Webhooks from the client's side: `webhooks.verify` (against signatures the
standardwebhooks package makes, and the service's own over real HTTP), and the
`headwater-client webhooks` commands against a real server."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from standardwebhooks.webhooks import Webhook
from test_client_cli import json_lines, run
from tests.http_server import running_server
from tests.webhooks.receiver import Receiver, running_receiver

from conftest import Tenant, server_env
from headwater_client import webhooks
from headwater_client.webhooks import WebhookVerificationFailed

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()


def _signed(body: bytes, *, at: datetime | None = None) -> dict[str, str]:
    """Headers as the standardwebhooks package signs a message."""
    at = at or datetime.now(UTC)
    signature = Webhook(SECRET).sign("msg_1", at, body.decode())
    return {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature,
    }


def test_verify_accepts_what_standard_webhooks_signs() -> None:
    body = b'{"id":"msg_1","type":"transaction.completed","data":{}}'
    headers = _signed(body)
    assert webhooks.verify(SECRET, headers, body)["type"] == "transaction.completed"
    # header names in any case; a second, unknown signature beside the right one
    upper = {k.upper(): v for k, v in headers.items()}
    upper["WEBHOOK-SIGNATURE"] = "v1,AAAA " + headers["webhook-signature"]
    assert webhooks.verify(SECRET, upper, body.decode())["id"] == "msg_1"


@pytest.mark.parametrize(
    "change",
    ["body", "secret", "old", "future", "missing", "timestamp", "not-a-secret", "not-an-object"],
)
def test_verify_refuses_anything_else(change: str) -> None:
    body = b'{"id":"msg_1"}'
    headers = _signed(body)
    secret = SECRET
    if change == "body":
        body = b'{"id":"msg_2"}'
    elif change == "secret":
        secret = "whsec_" + base64.b64encode(b"x" * 32).decode()
    elif change == "old":
        headers = _signed(body, at=datetime.fromtimestamp(time.time() - 600, UTC))
    elif change == "future":
        headers = _signed(body, at=datetime.fromtimestamp(time.time() + 600, UTC))
    elif change == "missing":
        del headers["webhook-signature"]
    elif change == "timestamp":
        headers["webhook-timestamp"] = "soon"
    elif change == "not-a-secret":
        secret = "whsec_***"
    elif change == "not-an-object":
        body = b"[1]"
        headers = _signed(body)
    with pytest.raises(WebhookVerificationFailed):
        webhooks.verify(secret, headers, body)


@pytest.fixture
def delivering_server(
    database_url: str | None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    env = server_env(
        tmp_path_factory.mktemp("webhook-server"),
        database_url,
        HEADWATER_WEBHOOK_ALLOW_HTTP="true",
        HEADWATER_WEBHOOK_ALLOW_PRIVATE="true",
        HEADWATER_WEBHOOK_POLL_SECONDS="0.05",
    )
    with running_server(env) as url:
        yield url


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as running:
        yield running


@pytest.mark.http
def test_the_cli_manages_endpoints_and_verify_checks_real_deliveries(
    delivering_server: str, receiver: Receiver, tmp_path: Path
) -> None:
    tenant = Tenant(delivering_server)
    env = tenant.env()
    created = run(
        env,
        "webhooks",
        "create",
        receiver.at("/cli"),
        "--event-types",
        "transaction.completed",
        "--description",
        "from the CLI",
        "--json",
    )
    assert created.returncode == 0, created.stderr
    endpoint = json.loads(created.stdout)
    assert endpoint["secret"].startswith("whsec_")
    listed = run(env, "webhooks", "list", "--json")
    assert [e["id"] for e in json_lines(listed.stdout)] == [endpoint["id"]]
    assert endpoint["secret"] not in listed.stdout

    with tenant.client() as client:
        client.push(tenant.client_id, tenant.dataset_id, [{"order_id": "W-1", "amount": 1}])
    (request,) = receiver.wait_for("/cli")
    event = webhooks.verify(endpoint["secret"], request.headers, request.body)
    assert event["type"] == "transaction.completed"
    assert event["data"]["records_accepted"] == 1

    deadline = time.monotonic() + 30
    while True:
        shown = run(env, "webhooks", "deliveries", endpoint["id"], "--json")
        deliveries = json_lines(shown.stdout)
        if deliveries and deliveries[0]["status"] == "delivered":
            break
        assert time.monotonic() < deadline, shown.stdout
        time.sleep(0.2)
    assert deliveries[0]["event_id"] == event["id"]
    table = run(env, "webhooks", "deliveries", endpoint["id"])
    assert "delivered" in table.stdout and event["id"] in table.stdout

    replayed = run(env, "webhooks", "replay", endpoint["id"], "--since", "2020-01-01T00:00:00Z")
    assert replayed.returncode == 0 and replayed.stdout.strip() == "queued 1"
    again = receiver.wait_for("/cli", 2)[1]
    assert webhooks.verify(endpoint["secret"], again.headers, again.body)["id"] == event["id"]

    rotated = run(env, "webhooks", "rotate", endpoint["id"])
    assert rotated.stdout.strip().startswith("whsec_")
    disabled = run(env, "webhooks", "update", endpoint["id"], "--status", "disabled", "--json")
    assert json.loads(disabled.stdout)["status"] == "disabled"
    refused = run(env, "webhooks", "create", "https://user:pw@127.0.0.1/x")
    assert refused.returncode == 1
    assert "password" in refused.stderr
    assert run(env, "webhooks", "delete", endpoint["id"]).returncode == 0
    missing = run(env, "webhooks", "show", endpoint["id"])
    assert missing.returncode == 1 and "not found" in missing.stderr.lower()
