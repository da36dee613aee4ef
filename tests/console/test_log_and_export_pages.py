"""The activity log with 4.8's filters, exports (created, listed, downloaded) and
erasures (created, listed) in the console, each with its scope and its refusals."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from starlette.testclient import TestClient

from tests.console.conftest import Browser
from tests.downstream.test_exports import run_exports
from tests.factories import create_credential
from tests.subjects.conftest import SubjectTenant, customer, run_erasures
from tests.tenants import Tenant


def test_the_activity_log_is_searched_with_the_apis_filters(
    client: TestClient, browser: Browser, tenant: Tenant
) -> None:
    category = tenant.category("Onboarding")
    tenant.template(category["id"])
    browser.signed_in(tenant.credential)
    every = browser.get("/console/activity")
    assert every.status_code == 200
    assert "2 entries." in every.text
    only = browser.get("/console/activity", resource_type="workflow_category", action="create")
    assert "1 entry." in only.text and category["id"] in only.text
    by_id = browser.get("/console/activity", resource_id=category["id"], sort_direction="asc")
    assert "1 entry." in by_id.text
    none = browser.get("/console/activity", **{"from": "2099-01-01T00:00"})
    assert "No entry matches." in none.text
    for bad in ({"action": "explode"}, {"resource_id": "x"}, {"page": "-1"}, {"colour": "red"}):
        response = browser.get("/console/activity", **bad)
        assert response.status_code == 400, (bad, response.text)


def test_an_export_created_in_the_page_is_downloaded_from_it(
    client: TestClient, browser: Browser, subject_tenant: SubjectTenant
) -> None:
    subject_tenant.push([customer(1, "ada@example.com"), customer(2, "bob@example.com")])
    browser.signed_in(subject_tenant.credential)
    created = browser.post(
        "/console/exports",
        {"client_id": subject_tenant.client_id, "dataset_id": "orders", "format": "ndjson"},
    )
    assert created.status_code == 303, created.text
    queued = browser.get(created.headers["location"])
    assert "queued" in queued.text
    assert run_exports(client) >= 1
    listed = browser.get("/console/exports")
    link = re.search(r'<a href="([^"]+)" download>Download ndjson', listed.text)
    assert link, listed.text
    parts = urlsplit(link.group(1).replace("&amp;", "&"))
    body = client.get(f"{parts.path}?{parts.query}")
    assert body.status_code == 200
    assert sorted(line.count(b"@example.com") for line in body.content.splitlines()) == [1, 1]


def test_a_bad_export_form_is_refused_saying_what(
    browser: Browser, subject_tenant: SubjectTenant
) -> None:
    browser.signed_in(subject_tenant.credential)
    base = {"client_id": subject_tenant.client_id, "dataset_id": "orders", "format": "csv"}
    for fields, status in (
        (base | {"format": "xls"}, 400),
        (base | {"dataset_id": "nope"}, 404),
        (base | {"ingested_after": "2026-11-02T00:00", "ingested_before": "2026-11-01T00:00"}, 400),
    ):
        response = browser.post("/console/exports", fields)
        assert response.status_code == status, (fields, response.text)
    assert "No export yet." in browser.get("/console/exports").text


def test_an_erasure_created_in_the_page_runs(
    client: TestClient, browser: Browser, subject_tenant: SubjectTenant, admin: dict[str, str]
) -> None:
    subject_tenant.push([customer(1, "ada@example.com"), customer(2, "bob@example.com")])
    eraser = create_credential(client, admin, subject_tenant.company_id, scopes=["data:erase"])
    browser.signed_in(eraser)
    created = browser.post("/console/erasures", {"subjects": "ada@example.com\n\n"})
    assert created.status_code == 303, created.text
    assert run_erasures(client) >= 1
    page = browser.get("/console/erasures")
    assert "completed" in page.text and "1 records" in page.text
    assert "ada@example.com" not in page.text  # kept only as HMACs
    assert [r["data"]["customer-email"] for r in subject_tenant.all_records()] == [
        "bob@example.com"
    ]
    assert browser.post("/console/erasures", {"subjects": "  "}).status_code == 400


def test_each_page_needs_its_scope(
    client: TestClient, browser: Browser, subject_tenant: SubjectTenant, admin: dict[str, str]
) -> None:
    reader = create_credential(client, admin, subject_tenant.company_id, scopes=["data:read"])
    browser.signed_in(reader)
    assert browser.get("/console/erasures").status_code == 403
    assert browser.post("/console/erasures", {"subjects": "ada@example.com"}).status_code == 403
    assert browser.get("/console/activity").status_code == 403
    assert browser.get("/console/exports").status_code == 200
