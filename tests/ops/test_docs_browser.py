"""The interactive docs page, in a real browser: Playwright driving Debian's Chromium
against a real `headwater serve`, with no network beyond loopback (contract section 9)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.http_server import ServerProcess

pytestmark = pytest.mark.http

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def docs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("docs")
    server = ServerProcess(
        {"HEADWATER_DATA_DIR": str(data), "HEADWATER_LOG_LEVEL": "WARNING"},
        log=data / "server.log",
    ).start()
    yield server.url
    server.stop()


def test_the_docs_page_renders_every_tag_and_an_operations_body_schema(
    docs_server: str, tmp_path: Path
) -> None:
    assert shutil.which(CHROMIUM) or Path(CHROMIUM).exists(), (
        "Chromium is missing: scripts/test installs it (apt-get install -y chromium)"
    )
    from playwright.sync_api import sync_playwright

    outside: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
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
