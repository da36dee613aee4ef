"""The console in a real browser (contract 18): Playwright driving Debian's Chromium
against a real `headwater serve` (its worker on), on SQLite and on PostgreSQL. Every
page is checked with axe-core (no serious or critical violation) and saved as a
screenshot under `test-artefacts/console/`."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
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
    fresh_pg_database,
    get_token,
)
from tests.files.conftest import FileTenant
from tests.http_server import ServerProcess, operated_env
from tests.webhooks.receiver import running_receiver

pytestmark = pytest.mark.http

ROOT = Path(__file__).resolve().parents[2]
ARTEFACTS = ROOT / "test-artefacts" / "console"
AXE = Path(__file__).parent / "browser" / "node_modules" / "axe-core" / "axe.min.js"
CSV = "order_id,amount,quantity\nA-1,1,1\nA-2,x,2\nA-3,3,3\n"
EVERY_COMPANY_SCOPE = [
    "data:read",
    "data:write",
    "data:erase",
    "webhooks:manage",
    "activities:read",
    "workflows:read",
    "events:read",
]


@dataclass
class Site:
    url: str
    backend: str
    user: dict[str, str]  # every company scope
    tenant: FileTenant
    quarantined: str  # a file transaction with open quarantined rows
    theirs: str  # another company's transaction


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def site(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Site]:
    data = tmp_path_factory.mktemp("console")
    env = operated_env(
        data,
        HEADWATER_WEBHOOK_ALLOW_HTTP="true",
        HEADWATER_WEBHOOK_ALLOW_PRIVATE="true",
        HEADWATER_WEBHOOK_POLL_SECONDS="0.05",
        HEADWATER_FILE_WORKERS="1",
    )
    with contextlib.ExitStack() as stack:
        if request.param == "postgresql":
            _, url = stack.enter_context(fresh_pg_database("hw_console"))
            env["HEADWATER_DATABASE_URL"] = url
        server = ServerProcess(env, log=data / "server.log").start()
        stack.callback(server.stop)
        with httpx.Client(base_url=server.url, timeout=60) as http:
            yield _populate(http, server.url, request.param)


def _populate(http: httpx.Client, url: str, backend: str) -> Site:
    """A company with traffic on every page: pushes stored and rejected, a file with
    quarantined rows, a second schema version, a workflow category (activity)."""
    admin = auth(get_token(http, OPERATOR_ID, OPERATOR_SECRET))
    company = create_company(http, admin, "Acme Ltd")
    tenant = FileTenant(http, admin, company, invalid_rows="quarantine")  # type: ignore[arg-type]
    user = create_credential(http, admin, company, scopes=EVERY_COMPANY_SCOPE)
    headers = auth(get_token(http, user["client_id"], user["client_secret"]))
    for n in range(1, 6):
        tenant.push([{"order_id": f"A-{n}", "amount": n, "quantity": n}])
    tenant.push({"order_id": "A-9", "amount": "nine"})
    ticket = tenant.upload_url()
    assert tenant.put(ticket, CSV.encode()).status_code == 200
    quarantined = ticket["transaction_id"]
    _wait_final(http, headers, quarantined)
    v2 = {
        "type": "object",
        "required": ["order_id"],
        "properties": {
            "order_id": {"type": "string"},
            "amount": {"type": "number"},
            "quantity": {"type": "integer"},
            "coupon": {"type": "string"},
        },
    }
    response = http.put(
        f"/admin/v1/clients/{tenant.client_id}/datasets/orders/schema",
        json={"schema": v2},
        headers=admin,
    )
    assert response.status_code in (200, 409), response.text
    category = http.post(
        "/app/v1/workflow_categories",
        json={"name": "Onboarding", "description": "New suppliers"},
        headers=auth(
            get_token(http, tenant.credential["client_id"], tenant.credential["client_secret"])
        ),
    )
    other = FileTenant(http, admin, create_company(http, admin, "Other Co"))  # type: ignore[arg-type]
    theirs = other.push([{"order_id": "Z-1", "amount": 1, "quantity": 1}]).json()
    del category
    return Site(url, backend, user, tenant, quarantined, theirs["transaction_id"])


def _wait_final(http: httpx.Client, headers: dict[str, str], transaction_id: str) -> Any:
    for _ in range(60):
        read = http.get(
            f"/platform/v1/transactions/{transaction_id}", params={"wait": 1}, headers=headers
        ).json()
        if read["status"] not in ("awaiting_upload", "processing"):
            return read
    raise AssertionError(f"transaction {transaction_id} never became final")


# --- the browser -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    assert AXE.exists(), "axe-core is missing: scripts/test installs it (npm ci)"
    with sync_playwright() as playwright:
        browser = launch(playwright)
        yield browser
        browser.close()


class Tab:
    """One browser context on the site: its page, the requests that left the service,
    and the checks every page gets (axe-core, a screenshot)."""

    def __init__(self, chromium: Any, site: Site) -> None:
        # axe-core is injected as a script of the test's: the page's own CSP would refuse it
        self.context = chromium.new_context(bypass_csp=True, accept_downloads=True)
        self.page = self.context.new_page()
        self.site = site
        self.outside: list[str] = []
        self.page.on(
            "request",
            lambda r: None if r.url.startswith((site.url, "data:")) else self.outside.append(r.url),
        )

    def go(self, path: str) -> Any:
        response = self.page.goto(self.site.url + path)
        assert response is not None
        return response

    def sign_in(self, credential: dict[str, str]) -> None:
        """Through the form: the one on screen (it carries where to go next), if any."""
        if "/console/sign-in" not in self.page.url:
            self.go("/console/sign-in")
        self.page.get_by_label("Client id").fill(credential["client_id"])
        self.page.get_by_label("Client secret").fill(credential["client_secret"])
        self.page.get_by_role("button", name="Sign in").click()
        self.page.wait_for_load_state()
        assert "/console/sign-in" not in self.page.url, self.page.content()

    def check(self, name: str) -> None:
        """No serious or critical axe-core violation, and a screenshot."""
        self.page.add_script_tag(path=str(AXE))
        result = self.page.evaluate("async () => await axe.run(document)")
        bad = [
            (v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3])
            for v in result["violations"]
            if v["impact"] in ("serious", "critical")
        ]
        assert bad == [], (name, bad)
        folder = ARTEFACTS / self.site.backend
        folder.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(folder / f"{name}.png"), full_page=True)

    def close(self) -> None:
        self.context.close()
        assert self.outside == [], self.outside  # nothing loaded from outside the service


@pytest.fixture
def tab(chromium: Any, site: Site) -> Iterator[Tab]:
    opened = Tab(chromium, site)
    yield opened
    opened.close()


# --- the tests -------------------------------------------------------------------------------


def test_a_company_user_reads_every_page_and_signs_out(tab: Tab, site: Site) -> None:
    tab.go("/console/transactions")
    assert "/console/sign-in" in tab.page.url  # signed out: the sign-in form
    tab.check("sign-in")
    tab.sign_in(site.user)
    assert tab.page.url.endswith("/console/transactions")
    client = site.tenant.client_id
    pages = {
        "overview": ("/console", "Records per hour, last 24 hours, by channel"),
        "transactions": ("/console/transactions", "transactions."),
        "transaction": (f"/console/transactions/{site.quarantined}", "Quarantined rows"),
        "datasets": ("/console/datasets", "orders"),
        "dataset": (f"/console/datasets/{client}/orders", "What changed"),
        "records": (f"/console/datasets/{client}/orders/records", "A-1"),
        "webhooks": ("/console/webhooks", "Add an endpoint"),
        "exports": ("/console/exports", "Export a dataset"),
        "activity": ("/console/activity", "workflow_category"),
        "erasures": ("/console/erasures", "Erase data subjects"),
    }
    for name, (path, shown) in pages.items():
        assert tab.go(path).status == 200, path
        assert shown in tab.page.inner_text("main"), (path, tab.page.inner_text("main"))
        tab.check(name)
    # the overview's charts hold the pushes: a bar with its count in its tooltip
    tab.go("/console")
    assert tab.page.locator("svg.chart rect.s-completed").count() >= 1
    tab.page.get_by_role("button", name="Sign out").click()
    tab.page.wait_for_url("**/console/sign-in")
    tab.go("/console/transactions")
    assert "/console/sign-in" in tab.page.url


def test_an_operator_reads_the_operator_pages(tab: Tab, site: Site) -> None:
    tab.sign_in({"client_id": OPERATOR_ID, "client_secret": OPERATOR_SECRET})
    assert tab.page.url.endswith("/console/companies")
    tab.check("companies")
    tab.page.get_by_role("link", name="Acme Ltd").first.click()
    tab.page.wait_for_load_state()
    assert site.tenant.client_id in tab.page.inner_text("main")
    tab.check("company")
    tab.page.get_by_role("link", name=site.tenant.client_id).click()
    tab.page.wait_for_load_state()
    tab.check("client")
    tab.page.get_by_role("link", name="orders").click()
    tab.page.wait_for_load_state()
    assert "Transform steps" in tab.page.inner_text("main")
    tab.check("registry")


def test_a_quarantined_row_fixed_in_the_page_becomes_a_completed_transaction(
    tab: Tab, site: Site
) -> None:
    tab.sign_in(site.user)
    tab.go(f"/console/transactions/{site.quarantined}")
    box = tab.page.get_by_label("Record at line 3 (JSON)")
    fixed = json.loads(box.input_value()) | {"amount": 2}
    box.fill(json.dumps(fixed))
    tab.page.get_by_role("button", name="Resubmit line 3").click()
    tab.page.wait_for_load_state()
    assert site.quarantined not in tab.page.url  # the new transaction's page
    main = tab.page.inner_text("main")
    assert "completed" in main and "1 received, 1 stored, 0 rejected" in main, main
    assert f"Resubmission of\n{site.quarantined}" in main or site.quarantined in main


def test_a_webhook_endpoint_added_and_tested_shows_its_attempt(tab: Tab, site: Site) -> None:
    tab.sign_in(site.user)
    with running_receiver() as receiver:
        tab.go("/console/webhooks")
        tab.page.get_by_label("URL (https)").fill(receiver.at("/console-hook"))
        tab.page.get_by_role("button", name="Add endpoint").click()
        tab.page.wait_for_load_state()
        secret = tab.page.locator("#secret").inner_text()
        assert secret.startswith("whsec_")
        tab.check("webhook-created")
        tab.page.get_by_role("link", name=receiver.at("/console-hook")).click()
        tab.page.get_by_role("button", name="Send a test event").click()
        tab.page.wait_for_load_state()
        deadline = time.monotonic() + 30
        while "HTTP 200" not in tab.page.inner_text("main"):
            assert time.monotonic() < deadline, tab.page.inner_text("main")
            time.sleep(0.2)
            tab.page.reload()
        assert "webhook.test" in tab.page.inner_text("main")
        assert receiver.received and receiver.received[0].path == "/console-hook"
        tab.check("webhook")


def test_an_export_created_in_the_page_is_downloaded(tab: Tab, site: Site, tmp_path: Path) -> None:
    tab.sign_in(site.user)
    tab.go("/console/exports")
    tab.page.get_by_label("Client").fill(site.tenant.client_id)
    tab.page.get_by_label("Dataset").fill("orders")
    tab.page.get_by_label("Format").select_option("ndjson")
    tab.page.get_by_role("button", name="Export").click()
    tab.page.wait_for_load_state()
    link = tab.page.get_by_role("link", name="Download ndjson")
    deadline = time.monotonic() + 30
    while link.count() == 0:
        assert time.monotonic() < deadline, tab.page.inner_text("main")
        time.sleep(0.2)
        tab.page.reload()
    with tab.page.expect_download() as download:
        link.first.click()
    saved = tmp_path / "export.ndjson"
    download.value.save_as(saved)
    lines = saved.read_text().splitlines()
    assert len(lines) >= 5 and all('"order_id"' in line for line in lines)


def test_a_form_posted_without_its_csrf_token_is_refused(tab: Tab, site: Site) -> None:
    tab.sign_in(site.user)
    tab.go("/console/erasures")
    tab.page.get_by_label("Subjects, one a line").fill("ada@example.com")
    tab.page.evaluate(
        "document.querySelector('form[action=\"/console/erasures\"] input[name=csrf]').remove()"
    )
    tab.page.get_by_role("button", name="Erase").click()
    tab.page.wait_for_load_state()
    assert "Form refused" in tab.page.inner_text("main")
    tab.go("/console/erasures")
    assert "No erasure yet." in tab.page.inner_text("main")


def test_a_revoked_credentials_session_ends(tab: Tab, site: Site) -> None:
    with httpx.Client(base_url=site.url, timeout=30) as http:
        admin = auth(get_token(http, OPERATOR_ID, OPERATOR_SECRET))
        short = create_credential(
            http,
            admin,
            site.tenant.company_id,
            scopes=["data:read"],  # type: ignore[arg-type]
        )
        tab.sign_in(short)
        assert tab.go("/console/transactions").status == 200
        revoked = http.delete(f"/admin/v1/credentials/{short['client_id']}", headers=admin)
        assert revoked.status_code == 204
    tab.go("/console/transactions")
    assert "/console/sign-in" in tab.page.url


def test_another_companys_transaction_answers_404(tab: Tab, site: Site) -> None:
    tab.sign_in(site.user)
    response = tab.go(f"/console/transactions/{site.theirs}")
    assert response.status == 404
    assert "No transaction" in tab.page.inner_text("main")  # as the API says it
    for path in (
        f"/console/datasets/{site.tenant.client_id}/orders/records",
        "/console/transactions",
    ):
        assert site.theirs not in tab.go(path).text()


def test_a_file_being_processed_is_followed_without_a_reload(tab: Tab, site: Site) -> None:
    """htmx polls a pending transaction's status into the page: the upload lands after
    the page loaded, and the page shows the outcome by itself."""
    ticket = site.tenant.upload_url()
    tab.sign_in(site.user)
    tab.go(f"/console/transactions/{ticket['transaction_id']}")
    assert "awaiting_upload" in tab.page.inner_text("#progress")
    assert site.tenant.put(ticket, CSV.encode()).status_code == 200
    tab.page.locator("#progress .st-completed").wait_for(timeout=30_000)


def test_the_sign_in_form_works_from_the_keyboard(tab: Tab, site: Site) -> None:
    tab.go("/console/sign-in")
    tab.page.keyboard.press("Tab")  # the skip link first
    assert tab.page.evaluate("document.activeElement.textContent") == "Skip to content"
    tab.page.get_by_label("Client id").focus()
    tab.page.keyboard.type(site.user["client_id"])
    tab.page.keyboard.press("Tab")
    tab.page.keyboard.type(site.user["client_secret"])
    tab.page.keyboard.press("Enter")
    tab.page.wait_for_url("**/console")
    assert "Overview" in tab.page.inner_text("main")
