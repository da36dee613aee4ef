"""A company's datasets in the console: the list, a dataset with its versions and a diff
between two, and its records; only the clients the credential may use."""

from __future__ import annotations

import copy
import json
import re

from starlette.testclient import TestClient

from tests.console.conftest import Browser
from tests.factories import create_credential, create_ingestion_client
from tests.files.conftest import FileTenant
from tests.ingestion.conftest import SCHEMA


def test_datasets_are_listed_with_their_current_version(
    browser: Browser, file_tenant: FileTenant
) -> None:
    browser.signed_in(file_tenant.credential)
    page = browser.get("/console/datasets")
    assert page.status_code == 200
    assert "1 dataset." in page.text
    assert f'href="/console/datasets/{file_tenant.client_id}/orders"' in page.text


def test_a_dataset_shows_what_changed_between_two_versions(
    client: TestClient, browser: Browser, file_tenant: FileTenant
) -> None:
    v2 = copy.deepcopy(SCHEMA)
    v2["properties"]["coupon"] = {"type": "string", "maxLength": 20}
    file_tenant.add_schema_version(v2)
    browser.signed_in(file_tenant.credential)
    page = browser.get(f"/console/datasets/{file_tenant.client_id}/orders")
    assert page.status_code == 200
    assert "2 (current)" in page.text
    added = re.findall(r'<span class="d-added">\+ ([^<]*)</span>', page.text)
    # four lines more in version 2 (difflib may pair a `"type"` line differently)
    assert len(added) == 4
    assert {"&#34;coupon&#34;: {", "&#34;maxLength&#34;: 20,"} <= {a.strip() for a in added}
    assert 'class="d-removed"' not in page.text
    same = browser.get(f"/console/datasets/{file_tenant.client_id}/orders", old=2, new=2)
    assert "The same version." in same.text
    missing = browser.get(f"/console/datasets/{file_tenant.client_id}/orders", old=3)
    assert missing.status_code == 404
    assert (
        browser.get(f"/console/datasets/{file_tenant.client_id}/orders", old=0).status_code == 400
    )


def test_records_of_a_dataset_are_shown_and_filtered_by_transaction(
    browser: Browser, file_tenant: FileTenant
) -> None:
    first = file_tenant.push({"order_id": "A-1", "amount": 1, "quantity": 1}).json()
    file_tenant.push({"order_id": "A-2", "amount": 2, "quantity": 2})
    browser.signed_in(file_tenant.credential)
    base = f"/console/datasets/{file_tenant.client_id}/orders/records"
    every = browser.get(base)
    assert "2 records." in every.text and "A-1" in every.text and "A-2" in every.text
    one = browser.get(base, transaction_id=first["transaction_id"])
    assert "1 record." in one.text and "A-2" not in one.text
    assert browser.get(base, transaction_id="nope").status_code == 400


def test_a_client_the_credential_may_not_use_is_refused(
    client: TestClient,
    browser: Browser,
    admin: dict[str, str],
    file_tenant: FileTenant,
    other_file_tenant: FileTenant,
) -> None:
    other = create_ingestion_client(client, admin, file_tenant.company_id)
    limited = create_credential(
        client, admin, file_tenant.company_id, scopes=["data:read"], client_ids=[other]
    )
    browser.signed_in(limited)
    assert "0 datasets." in browser.get("/console/datasets").text
    for path in (
        f"/console/datasets/{file_tenant.client_id}/orders",
        f"/console/datasets/{file_tenant.client_id}/orders/records",
        f"/console/datasets/{other_file_tenant.client_id}/orders",
        f"/console/datasets/{other_file_tenant.client_id}/orders/records",
    ):
        assert browser.get(path).status_code in (403, 404), path


def test_a_dataset_shows_its_steps_and_previews_records_through_them(
    client: TestClient, browser: Browser, file_tenant: FileTenant
) -> None:
    steps = [{"op": "drop", "path": "/channel"}]
    response = client.put(
        f"/admin/v1/clients/{file_tenant.client_id}/datasets/orders/transforms",
        json={"steps": steps},
        headers=file_tenant.admin,
    )
    assert response.status_code == 200, response.text
    browser.signed_in(file_tenant.credential)
    path = f"/console/datasets/{file_tenant.client_id}/orders"
    page = browser.get(path)
    assert "Transform steps (version 1)" in page.text and "&#34;drop&#34;" in page.text
    records = [{"order_id": "A-1", "amount": 1, "quantity": 1, "channel": "x"}, {"amount": 1}]
    before = file_tenant.transactions()["total_entries"]
    tried = browser.post(f"{path}/preview", {"records": json.dumps(records)})
    assert tried.status_code == 200, tried.text
    assert re.findall(r'<span class="status [^"]+">(\w+)</span>', tried.text) == [
        "stored",
        "invalid",
    ]
    for bad in ("[]", "{", '"x"'):
        assert browser.post(f"{path}/preview", {"records": bad}).status_code == 400, bad
    assert file_tenant.transactions()["total_entries"] == before  # nothing stored
