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

    tested = run(env, "webhooks", "test", endpoint["id"], "--json")
    assert tested.returncode == 0, tested.stderr
    test_id = json.loads(tested.stdout)["event_id"]
    third = receiver.wait_for("/cli", 3)[2]
    sent = webhooks.verify(endpoint["secret"], third.headers, third.body)
    assert sent["id"] == test_id and sent["type"] == "webhook.test"
    with tenant.client() as client:
        assert client.send_webhook_test(endpoint["id"]) != test_id

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


def test_the_readme_receiver_works_as_written(tmp_path: Path) -> None:
    """The client README's example receiver, run as written (on a free loopback port):
    a signed event is taken once (204, printed), a repeat is not printed again, a forged
    one is refused (400)."""
    import re
    import subprocess
    import sys

    import httpx
    from tests.http_server import free_port

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    code = re.search(r"```python\n(import os\nfrom http\.server.*?)```", readme, re.S)
    assert code is not None
    port = free_port()
    script = tmp_path / "receiver.py"
    script.write_text(code.group(1).replace('("0.0.0.0", 8080)', f'("127.0.0.1", {port})'))
    process = subprocess.Popen(
        [sys.executable, "-u", str(script)],
        env={"HEADWATER_WEBHOOK_SECRET": SECRET, "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        body = b'{"id":"ev_1","type":"transaction.completed","data":{"transaction_id":"t-1"}}'
        deadline = time.monotonic() + 20
        while True:
            try:
                answer = httpx.post(
                    f"http://127.0.0.1:{port}/", content=body, headers=_signed(body)
                )
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the receiver did not start"
                time.sleep(0.1)
        assert answer.status_code == 204
        again = httpx.post(f"http://127.0.0.1:{port}/", content=body, headers=_signed(body))
        assert again.status_code == 204
        forged = _signed(body) | {"webhook-signature": "v1,AAAA"}
        refused = httpx.post(f"http://127.0.0.1:{port}/", content=body, headers=forged)
        assert refused.status_code == 400
    finally:
        process.terminate()
        out, _ = process.communicate(timeout=10)
    assert out.splitlines() == ["transaction.completed t-1"]
