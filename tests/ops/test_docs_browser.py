"""The interactive docs page, in a real browser: Playwright driving Debian's Chromium
against a real `headwater serve`, with no network beyond loopback (contract section 9)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser import launch
from tests.factories import (
    OPERATOR_ID,
    OPERATOR_SECRET,
    auth,
    create_company,
    create_credential,
    create_ingestion_client,
    get_token,
)
from tests.http_server import ServerProcess, operated_env

pytestmark = pytest.mark.http


@pytest.fixture(scope="module")
def docs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("docs")
    server = ServerProcess(
        operated_env(data),
        log=data / "server.log",
    ).start()
    yield server.url
    server.stop()


@pytest.fixture(scope="module")
def pusher(docs_server: str) -> dict[str, str]:
    """A credential that may push to the dataset the docs page's push example names
    (`acme-crm`, `orders`)."""
    with httpx.Client(base_url=docs_server, timeout=30) as client:
        admin = auth(get_token(client, OPERATOR_ID, OPERATOR_SECRET))
        company = create_company(client, admin)
        create_ingestion_client(client, admin, company, "acme-crm")
        created = client.post(
            "/admin/v1/clients/acme-crm/datasets",
            json={"dataset_id": "orders", "schema": {"type": "object"}},
            headers=admin,
        )
        assert created.status_code == 201, created.text
        return create_credential(client, admin, company, scopes=["data:write", "data:read"])


def _try(page: Any, operation_id: str) -> tuple[str, str]:
    """ "Try it out" on an operation, as its example stands: the status and the body."""
    operation = page.locator(f"[id^='operations-'][id$='-{operation_id}']")
    operation.locator(".opblock-summary").first.click()
    operation.get_by_role("button", name="Try it out").click()
    operation.get_by_role("button", name="Execute").click()
    status = operation.locator(".live-responses-table .response .response-col_status").first
    status.wait_for(timeout=30_000)
    body = operation.locator(".live-responses-table .response-col_description pre").first
    return status.inner_text().strip(), body.inner_text()


@pytest.mark.long
def test_authorize_with_client_credentials_then_try_whoami_and_a_push(
    docs_server: str, pusher: dict[str, str]
) -> None:
    """The OAuth flow of the docs page's Authorize (no `audience` of its own), then
    "Try it out" as the page's examples stand."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch(playwright)
        page = browser.new_page()
        page.goto(docs_server + "/docs")
        page.wait_for_selector(".opblock-tag", timeout=30_000)
        page.locator(".auth-wrapper .authorize").click()
        page.fill("#client_id_clientCredentials", pusher["client_id"])
        page.fill("#client_secret_clientCredentials", pusher["client_secret"])
        flow = page.locator(".modal-ux .auth-container").filter(has_text="oauth2")
        flow.locator("button.authorize").click()
        flow.locator("button", has_text="Logout").wait_for(timeout=30_000)
        assert "Auth Error" not in flow.inner_text()
        page.locator(".modal-ux .btn-done").first.click()
        status, body = _try(page, "whoami_platform_v1_whoami_get")
        assert status == "200", body
        assert pusher["client_id"] in body
        status, body = _try(page, "push_json_platform_v1_data_json_post")
        assert status == "200", body
        assert '"records_accepted": 1' in body
        browser.close()


def test_a_token_pasted_as_bearer_authorises_try_it_out(
    docs_server: str, pusher: dict[str, str]
) -> None:
    from playwright.sync_api import sync_playwright

    with httpx.Client(base_url=docs_server, timeout=30) as client:
        token = get_token(client, pusher["client_id"], pusher["client_secret"])
    with sync_playwright() as playwright:
        browser = launch(playwright)
        page = browser.new_page()
        page.goto(docs_server + "/docs")
        page.wait_for_selector(".opblock-tag", timeout=30_000)
        status, _ = _try(page, "whoami_platform_v1_whoami_get")
        assert status == "401"  # nothing authorised yet
        page.locator(".auth-wrapper .authorize").click()
        page.fill("#auth-bearer-value", token)
        page.get_by_role("button", name="Apply credentials", exact=True).click()
        scheme = page.locator(".modal-ux .auth-container").filter(has=page.locator("form"))
        scheme.locator("button", has_text="Logout").wait_for(timeout=30_000)
        page.locator(".modal-ux .btn-done").first.click()
        page.get_by_role("button", name="Execute").first.click()
        operation = page.locator("[id$='-whoami_platform_v1_whoami_get']")
        status_cell = operation.locator(".live-responses-table .response .response-col_status")
        status_cell.filter(has_text="200").first.wait_for(timeout=30_000)
        browser.close()


def test_the_docs_page_renders_every_tag_and_an_operations_body_schema(
    docs_server: str, tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    outside: list[str] = []
    with sync_playwright() as playwright:
        browser = launch(playwright)
        page = browser.new_page()
        page.on(
            "request",
            lambda request: (
                outside.append(request.url)
                if not request.url.startswith((docs_server, "data:", "blob:"))
                else None
            ),
        )
        page.goto(docs_server + "/docs")
        page.wait_for_selector(".opblock-tag", timeout=30_000)
        text = page.inner_text("body")
        assert "Unable to render this definition" not in text
        tags = [t.strip() for t in page.locator(".opblock-tag").all_inner_texts()]
        for tag in (
            "data",
            "workflows",
            "activity",
            "operator",
            "operator: datasets",
            "identity provider",
            "operations",
        ):
            assert any(t.startswith(tag) for t in tags), (tag, tags)
        push = page.locator("#operations-data-push_json_platform_v1_data_json_post")
        assert push.count() == 1
        assert "/platform/v1/data/json" in push.inner_text()
        push.locator(".opblock-summary").first.click()
        body = push.locator(".opblock-section-request-body")
        body.wait_for(timeout=10_000)
        body.get_by_text("Schema", exact=True).click()
        schema = push.locator(".model-box").first
        schema.wait_for(timeout=10_000)
        shown = push.inner_text()
        for member in ("client_id", "dataset_id", "data"):
            assert member in shown, shown[:2000]
        page.screenshot(path=str(tmp_path / "docs.png"), full_page=False)
        browser.close()
    assert outside == []  # every asset came from the service itself
