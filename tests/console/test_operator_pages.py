"""The operator's pages: a company made, a client and a credential added (the secret
shown once, and it signs in), the credential revoked; a dataset registered, a schema
version added, steps set and previewed. Company users are refused."""

from __future__ import annotations

import json
import re

from starlette.testclient import TestClient

from tests.console.conftest import OPERATOR, Browser
from tests.factories import create_credential
from tests.files.conftest import FileTenant
from tests.ingestion.conftest import SCHEMA


def _company(browser: Browser, name: str) -> str:
    made = browser.post("/console/companies", {"name": name})
    assert made.status_code == 303, made.text
    found = re.fullmatch(r"/console/companies/([0-9a-f-]{36})", made.headers["location"])
    assert found
    return found.group(1)


def test_an_operator_makes_a_company_with_a_client_and_a_credential_that_signs_in(
    client: TestClient, browser: Browser
) -> None:
    browser.signed_in(OPERATOR)
    company = _company(browser, "Console Co")
    assert "<h1>Console Co</h1>" in browser.get(f"/console/companies/{company}").text
    added = browser.post(
        f"/console/companies/{company}/clients", {"client_id": "console-crm", "name": "CRM"}
    )
    assert added.status_code == 303, added.text
    issued = browser.post(
        f"/console/companies/{company}/credentials",
        {"name": "Reader", "scopes": "data:read", "client_ids": "console-crm"},
    )
    assert issued.status_code == 201, issued.text
    secret = re.search(r'<p class="secret" id="secret">([^<]+)</p>', issued.text)
    client_id = re.search(r"Credential (\S+) created", issued.text)
    assert secret and client_id
    page = browser.get(f"/console/companies/{company}")
    assert client_id.group(1) in page.text and secret.group(1) not in page.text
    # the new credential signs in to its company's pages, and its token works
    user = Browser(client).signed_in(
        {"client_id": client_id.group(1), "client_secret": secret.group(1)}
    )
    assert user.get("/console/transactions").status_code == 200
    revoked = browser.post(f"/console/credentials/{client_id.group(1)}/revoke", {})
    assert revoked.status_code == 303
    assert revoked.headers["location"] == f"/console/companies/{company}"
    assert user.get("/console/transactions").status_code == 303  # signed out at once
    gone = browser.post(f"/console/companies/{company}/clients/console-crm/revoke", {})
    assert gone.status_code == 303
    assert "revoked" in browser.get(f"/console/companies/{company}").text
    again = browser.post(f"/console/companies/{company}/clients/console-crm/revoke", {})
    assert again.status_code < 500
    token = client.post(
        "/oauth/token",
        data={
            "grant_type": "client_credentials",
            "client_id": client_id.group(1),
            "client_secret": secret.group(1),
            "audience": "headwater-api",
        },
    )
    assert token.status_code == 401


def test_bad_operator_forms_say_what_is_wrong(browser: Browser) -> None:
    browser.signed_in(OPERATOR)
    company = _company(browser, "Forms Co")
    for path, fields, status in (
        ("/console/companies", {"name": ""}, 400),
        (f"/console/companies/{company}/clients", {"client_id": "bad id!", "name": "x"}, 400),
        (f"/console/companies/{company}/credentials", {"name": "x", "scopes": "admin"}, 400),
        (f"/console/companies/{company}/credentials", {"name": "x"}, 400),
        (
            f"/console/companies/{company}/credentials",
            {"name": "x", "scopes": "data:read", "client_ids": "nope"},
            400,
        ),
        (
            "/console/companies/00000000-0000-0000-0000-000000000000/clients",
            {"client_id": "x1", "name": "x"},
            404,
        ),
        ("/console/credentials/nope/revoke", {}, 404),
    ):
        response = browser.post(path, fields)
        assert response.status_code == status, (path, fields, response.text)


def test_an_operator_registers_a_dataset_versions_it_and_sets_previewed_steps(
    browser: Browser, file_tenant: FileTenant
) -> None:
    browser.signed_in(OPERATOR)
    base = f"/console/clients/{file_tenant.client_id}"
    made = browser.post(
        f"{base}/datasets",
        {"dataset_id": "leads", "schema": json.dumps(SCHEMA), "invalid_rows": "quarantine"},
    )
    assert made.status_code == 303, made.text
    assert made.headers["location"] == f"{base}/datasets/leads"
    assert 'href="/console/clients/' in browser.get(base).text
    v2 = SCHEMA | {"properties": SCHEMA["properties"] | {"coupon": {"type": "string"}}}
    added = browser.post(f"{base}/datasets/leads/schema", {"schema": json.dumps(v2)})
    assert added.status_code == 303, added.text
    assert "Schema (version 2)" in browser.get(f"{base}/datasets/leads").text
    steps = [{"op": "drop", "path": "/channel"}]
    preview = browser.post(
        f"{base}/datasets/leads/preview",
        {
            "records": json.dumps(
                [
                    {"order_id": "A-1", "amount": 1, "quantity": 1},
                    {"order_id": "A-2", "amount": "x"},
                ]
            ),
            "steps": json.dumps(steps),
        },
    )
    assert preview.status_code == 200, preview.text
    assert re.findall(r'<span class="status [^"]+">(\w+)</span>', preview.text) == [
        "stored",
        "invalid",
    ]
    assert "&#34;channel&#34;" not in preview.text.split("<h2>Preview</h2>")[1].split("</ol>")[0]
    done = browser.post(f"{base}/datasets/leads/transforms", {"steps": json.dumps(steps)})
    assert done.status_code == 303, done.text
    assert "Transform steps (version 1)" in browser.get(f"{base}/datasets/leads").text
    for path, fields in (
        (f"{base}/datasets", {"dataset_id": "x", "schema": "{"}),
        (f"{base}/datasets", {"dataset_id": "x", "schema": '{"type": 5}'}),
        (f"{base}/datasets/leads/schema", {"schema": "[]"}),
        (f"{base}/datasets/leads/transforms", {"steps": '[{"op": "explode"}]'}),
        (f"{base}/datasets/leads/preview", {"records": "[]", "steps": ""}),
    ):
        assert browser.post(path, fields).status_code == 400, (path, fields)
    assert (
        browser.post(
            f"{base}/datasets", {"dataset_id": "leads", "schema": json.dumps(SCHEMA)}
        ).status_code
        == 409
    )


def test_a_company_user_is_refused_every_operator_page(
    client: TestClient, browser: Browser, admin: dict[str, str], file_tenant: FileTenant
) -> None:
    everything = create_credential(
        client,
        admin,
        file_tenant.company_id,
        scopes=["data:read", "data:write", "webhooks:manage", "activities:read", "data:erase"],
    )
    browser.signed_in(everything)
    for path in (
        "/console/companies",
        f"/console/companies/{file_tenant.company_id}",
        f"/console/clients/{file_tenant.client_id}",
        f"/console/clients/{file_tenant.client_id}/datasets/orders",
    ):
        assert browser.get(path).status_code == 403, path
    for path in (
        "/console/companies",
        f"/console/companies/{file_tenant.company_id}/credentials",
        f"/console/credentials/{everything['client_id']}/revoke",
        f"/console/clients/{file_tenant.client_id}/datasets/orders/transforms",
    ):
        assert browser.post(path, {"name": "x"}).status_code == 403, path


def test_an_operator_adds_sftp_accounts_and_inboxes(
    browser: Browser, file_tenant: FileTenant
) -> None:
    import asyncssh

    browser.signed_in(OPERATOR)
    company = f"/console/companies/{file_tenant.company_id}"
    key = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    with_key = browser.post(
        f"{company}/sftp_accounts",
        {"username": f"u-{file_tenant.client_id}", "public_keys": key + "\n"},
    )
    assert with_key.status_code == 201, with_key.text
    assert "SHA256:" in with_key.text and 'id="secret"' not in with_key.text
    with_password = browser.post(
        f"{company}/sftp_accounts",
        {"username": f"p-{file_tenant.client_id}", "password": "on"},
    )
    assert with_password.status_code == 201, with_password.text
    password = re.search(r'<p class="secret" id="secret">([^<]+)</p>', with_password.text)
    assert password
    listed = browser.get(company).text
    assert f"u-{file_tenant.client_id}" in listed and password.group(1) not in listed
    for fields in (
        {"username": "nokey"},
        {"username": "badkey", "public_keys": "ssh-ed25519 AAAA-not-a-key"},
        {"username": f"u-{file_tenant.client_id}", "password": "on"},
    ):
        assert browser.post(f"{company}/sftp_accounts", fields).status_code in (400, 409), fields
    deleted = browser.post(f"/console/sftp_accounts/u-{file_tenant.client_id}/delete", {})
    assert deleted.status_code == 303
    assert f"u-{file_tenant.client_id}" not in browser.get(company).text

    registry = f"/console/clients/{file_tenant.client_id}/datasets/orders"
    added = browser.post(
        f"{registry}/inboxes", {"allowed_senders": "ann@example.com\n@example.org"}
    )
    assert added.status_code == 303, added.text
    page = browser.get(registry).text
    address = re.search(r'<td class="mono">(in-[^<]+@ingest\.localhost)</td>', page)
    assert address and "ann@example.com, @example.org" in page
    assert (
        browser.post(f"{registry}/inboxes", {"allowed_senders": "not an address"}).status_code
        == 400
    )
    inbox_id = re.search(r'action="/console/inboxes/([0-9a-f-]{36})/delete"', page)
    assert inbox_id
    assert browser.post(f"/console/inboxes/{inbox_id.group(1)}/delete", {}).status_code == 303
    assert "No inbox yet." in browser.get(registry).text


def test_changes_made_in_the_console_are_in_the_activity_log_under_its_credential(
    client: TestClient, browser: Browser, admin: dict[str, str], file_tenant: FileTenant
) -> None:
    browser.signed_in(OPERATOR)
    author = client.get("/platform/v1/whoami", headers=admin).json()["author_id"]
    base = f"/console/clients/{file_tenant.client_id}/datasets/orders"
    v2 = SCHEMA | {"properties": SCHEMA["properties"] | {"coupon": {"type": "string"}}}
    assert browser.post(f"{base}/schema", {"schema": json.dumps(v2)}).status_code == 303
    steps = [{"op": "drop", "path": "/channel"}]
    assert browser.post(f"{base}/transforms", {"steps": json.dumps(steps)}).status_code == 303
    found = client.post(
        "/app/v1/activities/search",
        json={
            "filter": {"author_id": author},
            "sort_direction": "asc",
        },
        headers=file_tenant.headers,
    )
    assert found.status_code == 200, found.text
    # after the registration of the tenant's dataset (the operator's, through the API)
    entries = found.json()["data"][-3:]
    assert [(e["resource_type"], e["action"]) for e in entries] == [
        ("dataset", "update"),
        ("dataset_schema", "create"),
        ("dataset_transforms", "create"),
    ]
    assert entries[1]["after"]["schema"] == v2
