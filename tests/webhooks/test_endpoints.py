"""Webhook endpoints: create (secret once), list, read, change, delete, rotate; URL rules
and the address classes refused; scopes and tenants (contract section 13)."""

from __future__ import annotations

import base64

import pytest
from starlette.testclient import TestClient

from headwater.config import Settings
from tests.factories import assert_problem, auth, create_credential, database, get_token
from tests.webhooks.conftest import HookTenant

ENDPOINTS = "/platform/v1/webhook_endpoints"


@pytest.fixture
def loopback_ok(loopback_client: TestClient, hooks: HookTenant) -> HookTenant:
    """The tenant on an app that lets webhooks go to loopback over http (tests only)."""
    return hooks.using(loopback_client)


def test_create_shows_the_secret_once(loopback_ok: HookTenant) -> None:
    created = loopback_ok.endpoint(
        "http://127.0.0.1:9/hook", ["transaction.completed"], description="CRM"
    )
    assert set(created) == {
        "id",
        "url",
        "event_types",
        "description",
        "status",
        "secret",
        "created_at",
        "updated_at",
    }
    assert created["status"] == "enabled"
    assert created["event_types"] == ["transaction.completed"]
    assert created["secret"].startswith("whsec_")
    assert len(base64.b64decode(created["secret"].removeprefix("whsec_"))) >= 24
    read = loopback_ok.client.get(f"{ENDPOINTS}/{created['id']}", headers=loopback_ok.headers)
    assert read.status_code == 200
    assert "secret" not in read.json()
    assert created["secret"] not in read.text
    listed = loopback_ok.client.get(ENDPOINTS, headers=loopback_ok.headers).json()
    assert listed["total_entries"] == 1
    assert created["secret"] not in str(listed)


def test_the_secret_is_stored_encrypted(loopback_ok: HookTenant, settings: Settings) -> None:
    created = loopback_ok.endpoint("http://127.0.0.1:9/hook")
    with database(settings) as db, db.read_connection() as connection:
        stored = connection.exec_driver_sql("SELECT secret FROM webhook_endpoints").scalars().all()
    assert stored
    assert not any(created["secret"] in s or created["secret"][6:] in s for s in stored)


def test_update_rotate_and_delete(loopback_ok: HookTenant) -> None:
    created = loopback_ok.endpoint("http://127.0.0.1:9/hook")
    path = f"{ENDPOINTS}/{created['id']}"
    changed = loopback_ok.client.patch(
        path,
        json={"event_types": ["transaction.rejected"], "status": "disabled", "description": "x"},
        headers=loopback_ok.headers,
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["status"] == "disabled"
    assert changed.json()["event_types"] == ["transaction.rejected"]
    rotated = loopback_ok.client.post(f"{path}/rotate_secret", headers=loopback_ok.headers)
    assert rotated.status_code == 200
    assert rotated.json()["secret"].startswith("whsec_")
    assert rotated.json()["secret"] != created["secret"]
    assert loopback_ok.client.delete(path, headers=loopback_ok.headers).status_code == 204
    assert loopback_ok.client.get(path, headers=loopback_ok.headers).status_code == 404
    assert loopback_ok.client.delete(path, headers=loopback_ok.headers).status_code == 404


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"url": "https://127.0.0.1/h"},
        {"url": "https://127.0.0.1/h", "event_types": []},
        {"url": "https://127.0.0.1/h", "event_types": ["nope"]},
        {"url": "https://127.0.0.1/h", "event_types": ["*", "transaction.completed"]},
        {"url": "https://127.0.0.1/h", "event_types": ["*", "*"]},
        {"url": "https://127.0.0.1/h", "event_types": ["*"], "secret": "mine"},
        {"url": "https://127.0.0.1/h", "event_types": ["*"], "description": "x" * 501},
        {"url": "", "event_types": ["*"]},
        {"url": 5, "event_types": ["*"]},
    ],
)
def test_bad_bodies_answer_400(loopback_ok: HookTenant, body: dict[str, object]) -> None:
    response = loopback_ok.client.post(ENDPOINTS, json=body, headers=loopback_ok.headers)
    assert_problem(response, 400)
    assert (
        loopback_ok.client.get(ENDPOINTS, headers=loopback_ok.headers).json()["total_entries"] == 0
    )


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("https://127.0.0.1/h", "loopback"),
        ("https://127.8.9.10/h", "loopback"),
        ("https://localhost:8443/h", "loopback"),
        ("https://[::1]/h", "loopback"),
        ("https://10.1.2.3/h", "private"),
        ("https://172.16.0.1/h", "private"),
        ("https://192.168.1.1/h", "private"),
        ("https://[fd00::1]/h", "private"),
        ("https://169.254.169.254/latest/meta-data", "link-local"),
        ("https://[fe80::1]/h", "link-local"),
        ("https://224.0.0.1/h", "multicast"),
        ("https://[ff02::1]/h", "multicast"),
        ("https://0.0.0.0/h", "unspecified"),
        ("https://[::]/h", "unspecified"),
        ("https://[::ffff:10.0.0.1]/h", "private"),
        ("https://100.64.0.1/h", "not public"),
        ("http://93.184.216.34/h", "scheme must be https"),
        ("ftp://93.184.216.34/h", "scheme must be https"),
        ("https://user:pw@93.184.216.34/h", "user name or password"),
        ("https://93.184.216.34/h#frag", "fragment"),
        ("https:///h", "no host"),
        ("https://no-such-host.invalid/h", "does not resolve"),
        # an IPv6 address that carries an IPv4 one is judged by the IPv4 address
        ("https://[64:ff9b::7f00:1]/h", "loopback"),
        ("https://[64:ff9b:1::a00:1]/h", "private"),
        ("https://[2002:7f00:1::]/h", "loopback"),
        ("https://[2002:a9fe:a9fe::1]/h", "link-local"),
        ("https://[::127.0.0.1]/h", "loopback"),
        ("https://[::a00:1]/h", "private"),
        ("https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/h", "loopback"),
        # a host that is not a valid name is refused, never a 5xx
        ("https://xn--localhost-/h", "not a"),
        ("https://a.xn--/h", "not a"),
        ("https://exa_mple.com/h", "not a valid name"),
        ("https://-bad-.example/h", "not a valid name"),
    ],
)
def test_refused_urls_answer_400_saying_why(hooks: HookTenant, url: str, reason: str) -> None:
    response = hooks.client.post(
        ENDPOINTS, json={"url": url, "event_types": ["*"]}, headers=hooks.headers
    )
    problem = assert_problem(response, 400, "invalid_webhook_url")
    assert reason in problem["detail"], problem
    assert problem["errors"][0]["field"] == "/url"


def test_an_update_to_a_refused_url_answers_400(loopback_ok: HookTenant, hooks: HookTenant) -> None:
    created = loopback_ok.endpoint("http://127.0.0.1:9/hook")
    response = hooks.client.patch(
        f"{ENDPOINTS}/{created['id']}", json={"url": "https://10.0.0.1/x"}, headers=hooks.headers
    )
    assert_problem(response, 400, "invalid_webhook_url")
    kept = hooks.client.get(f"{ENDPOINTS}/{created['id']}", headers=hooks.headers).json()
    assert kept["url"] == "http://127.0.0.1:9/hook"


@pytest.mark.parametrize("body", [{}, {"url": None}, {"status": "paused"}, {"id": "x"}])
def test_bad_patches_answer_400(loopback_ok: HookTenant, body: dict[str, object]) -> None:
    created = loopback_ok.endpoint("http://127.0.0.1:9/hook")
    response = loopback_ok.client.patch(
        f"{ENDPOINTS}/{created['id']}", json=body, headers=loopback_ok.headers
    )
    assert_problem(response, 400)


def test_another_companys_endpoint_is_404(loopback_ok: HookTenant, other_hooks: HookTenant) -> None:
    created = loopback_ok.endpoint("http://127.0.0.1:9/hook")
    path = f"{ENDPOINTS}/{created['id']}"
    for method, suffix, body in (
        ("GET", "", None),
        ("PATCH", "", {"description": "x"}),
        ("DELETE", "", None),
        ("POST", "/rotate_secret", None),
        ("GET", "/deliveries", None),
        ("POST", "/replay", {"since": "2026-01-01T00:00:00Z"}),
    ):
        response = other_hooks.client.request(
            method, path + suffix, json=body, headers=other_hooks.headers
        )
        assert_problem(response, 404, "webhook_endpoint_not_found")
    assert other_hooks.client.get(ENDPOINTS, headers=other_hooks.headers).json()["data"] == []
    assert loopback_ok.client.get(path, headers=loopback_ok.headers).status_code == 200


def test_endpoints_need_webhooks_manage(
    client: TestClient, admin: dict[str, str], hooks: HookTenant
) -> None:
    credential = create_credential(client, admin, hooks.company_id, scopes=["events:read"])
    headers = auth(get_token(client, credential["client_id"], credential["client_secret"]))
    assert_problem(client.get(ENDPOINTS, headers=headers), 403)
    response = client.post(
        ENDPOINTS, json={"url": "https://127.0.0.1/h", "event_types": ["*"]}, headers=headers
    )
    assert_problem(response, 403)
    assert client.get(ENDPOINTS).status_code == 401


def test_the_operator_grants_the_new_scopes(
    client: TestClient, admin: dict[str, str], hooks: HookTenant
) -> None:
    credential = create_credential(
        client, admin, hooks.company_id, scopes=["events:read", "webhooks:manage"]
    )
    assert set(credential["scopes"]) == {"events:read", "webhooks:manage"}


def test_unknown_ids_and_bad_ids(hooks: HookTenant) -> None:
    assert_problem(
        hooks.client.get(
            f"{ENDPOINTS}/00000000-0000-4000-8000-000000000000", headers=hooks.headers
        ),
        404,
        "webhook_endpoint_not_found",
    )
    assert_problem(hooks.client.get(f"{ENDPOINTS}/not-a-uuid", headers=hooks.headers), 400)


def test_replay_window_must_be_ordered(loopback_ok: HookTenant) -> None:
    created = loopback_ok.endpoint("http://127.0.0.1:9/hook")
    for body in (
        {"since": "2026-02-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"},
        {"until": "2026-01-01T00:00:00Z"},
        {"since": "yesterday"},
        {"since": "2026-02-01T00:00:00"},
        {"since": "2026-02-01T00:00:00Z", "only_failed": "yes"},
    ):
        response = loopback_ok.client.post(
            f"{ENDPOINTS}/{created['id']}/replay", json=body, headers=loopback_ok.headers
        )
        assert_problem(response, 400)
    response = loopback_ok.client.get(
        f"{ENDPOINTS}/{created['id']}/deliveries",
        params={"status": "lost"},
        headers=loopback_ok.headers,
    )
    assert_problem(response, 400)
