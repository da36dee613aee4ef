"""The console's assets: served by the service itself, the vendored htmx exactly the
release pinned here, and no page naming anything from outside the service."""

from __future__ import annotations

import hashlib
import re

from starlette.testclient import TestClient

from tests.console.conftest import Browser

# htmx.org 2.0.11 from the npm registry (dist/htmx.min.js), BSD Zero Clause
HTMX = "/console/static/htmx-2.0.11.min.js"
HTMX_SHA256 = "d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717"


def test_the_vendored_htmx_is_the_pinned_release(client: TestClient) -> None:
    response = client.get(HTMX)
    assert response.status_code == 200
    assert hashlib.sha256(response.content).hexdigest() == HTMX_SHA256


def test_pages_load_only_the_services_own_assets(browser: Browser) -> None:
    page = browser.get("/console/sign-in")
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert HTMX in assets and "/console/static/console.css" in assets
    assert [a for a in assets if not a.startswith(("/", "#"))] == []
    for asset in assets:
        if asset.startswith("/console/static/"):
            assert browser.get(asset).status_code == 200, asset
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
