"""A company user's pages (contract 18): the overview's charts, transactions and one
transaction with its errors and quarantined rows, corrected and resubmitted in the page;
another company's objects answer 404."""

from __future__ import annotations

import re
from typing import Any

from starlette.testclient import TestClient

from tests.console.conftest import Browser
from tests.files.conftest import FileTenant
from tests.files.test_quarantine import BODY


def _push(tenant: FileTenant, data: Any) -> dict[str, Any]:
    response = tenant.push(data)
    assert response.status_code in (200, 422), response.text
    return response.json()  # type: ignore[no-any-return]


def _order(n: int) -> dict[str, Any]:
    return {"order_id": f"A-{n}", "amount": n, "quantity": n}


def test_the_overview_charts_what_arrived_by_status_and_channel(
    browser: Browser, file_tenant: FileTenant
) -> None:
    _push(file_tenant, [_order(1), _order(2)])
    _push(file_tenant, {"order_id": "A-3", "amount": "x"})  # rejected
    browser.signed_in(file_tenant.credential)
    page = browser.get("/console")
    assert page.status_code == 200, page.text
    figures = dict(re.findall(r"<dt>([^<]+)</dt><dd>([^<]+)</dd>", page.text))
    assert figures["Transactions, 24 h"] == "2"
    assert figures["Records received, 24 h"] == "3"
    assert figures["Rejection rate, 24 h"] == "33.3 %"
    assert page.text.count('<svg class="chart"') == 4
    # a bar per status and channel, each with its count in its title
    assert re.search(r'<rect class="s-completed"[^>]*><title>[^<]*completed: 1</title>', page.text)
    assert re.search(r'<rect class="s-rejected"[^>]*><title>[^<]*rejected: 1</title>', page.text)
    assert re.search(r'<rect class="s-api"[^>]*><title>[^<]*api: 3</title>', page.text)


def test_the_overview_of_a_company_with_no_traffic_says_so(
    browser: Browser, file_tenant: FileTenant
) -> None:
    browser.signed_in(file_tenant.credential)
    page = browser.get("/console")
    assert page.status_code == 200
    assert "Nothing arrived in this time." in page.text
    assert "<dd>no records</dd>" in page.text  # no rejection rate without records


def test_transactions_are_listed_and_filtered(browser: Browser, file_tenant: FileTenant) -> None:
    stored = _push(file_tenant, [_order(1)])
    rejected = _push(file_tenant, {"order_id": "A-3", "amount": "x"})
    browser.signed_in(file_tenant.credential)
    every = browser.get("/console/transactions")
    assert stored["transaction_id"] in every.text and "2 transactions." in every.text
    only = browser.get("/console/transactions", status="rejected", channel="api")
    assert "1 transaction." in only.text
    assert rejected["transaction_id"] in only.text
    assert stored["transaction_id"] not in only.text
    assert "<option selected>rejected</option>" in only.text


def test_a_bad_filter_answers_400_saying_which(browser: Browser, file_tenant: FileTenant) -> None:
    browser.signed_in(file_tenant.credential)
    response = browser.get("/console/transactions", status="lost")
    assert response.status_code == 400
    assert "status" in response.text
    assert browser.get("/console/transactions", colour="blue").status_code == 400


def test_a_transaction_shows_each_error_with_its_pointer(
    browser: Browser, file_tenant: FileTenant
) -> None:
    rejected = _push(file_tenant, [_order(1), {"order_id": "A-2", "amount": "x"}])
    browser.signed_in(file_tenant.credential)
    page = browser.get(f"/console/transactions/{rejected['transaction_id']}")
    assert page.status_code == 200
    assert "Errors (1)" in page.text
    assert '<td class="mono">/amount</td>' in page.text
    assert "hx-get" not in page.text  # final: nothing to follow


def test_a_quarantined_row_corrected_in_the_page_is_stored(
    browser: Browser, quarantine_tenant: FileTenant
) -> None:
    first = quarantine_tenant.upload(BODY)["transaction_id"]
    browser.signed_in(quarantine_tenant.credential)
    page = browser.get(f"/console/transactions/{first}")
    assert page.status_code == 200
    assert [int(n) for n in re.findall(r'<h3 id="row-(\d+)">', page.text)] == [3, 4, 5]
    assert "&#34;amount&#34;: &#34;x&#34;" in page.text  # the row as read, escaped
    response = browser.post(
        f"/console/transactions/{first}/resubmit",
        {"line": "3", "data": '{"order_id": "A-2", "amount": 2, "quantity": 2}'},
    )
    assert response.status_code == 303, response.text
    new = response.headers["location"].rsplit("/", 1)[1]
    assert new != first
    stored = quarantine_tenant.transaction(new)
    assert (stored["status"], stored["records_accepted"], stored["resubmit_of"]) == (
        "completed",
        1,
        first,
    )
    assert "A-2" in [r["data"]["order_id"] for r in quarantine_tenant.records()]
    left = browser.get(f"/console/transactions/{first}")
    assert [int(n) for n in re.findall(r'<h3 id="row-(\d+)">', left.text)] == [4, 5]


def test_a_correction_that_is_not_json_is_refused_and_nothing_moves(
    browser: Browser, quarantine_tenant: FileTenant
) -> None:
    first = quarantine_tenant.upload(BODY)["transaction_id"]
    browser.signed_in(quarantine_tenant.credential)
    for fields, said in (
        ({"line": "3", "data": "{not json"}, "not JSON"),
        ({"line": "3", "data": "[1]"}, "JSON object"),
        ({"line": "x", "data": "{}"}, "line"),
        ({"line": "2", "data": "{}"}, "nothing was resubmitted"),
    ):
        response = browser.post(f"/console/transactions/{first}/resubmit", fields)
        assert response.status_code == 400, (fields, response.text)
        assert said in response.text
    page = browser.get(f"/console/transactions/{first}")
    assert [int(n) for n in re.findall(r'<h3 id="row-(\d+)">', page.text)] == [3, 4, 5]


def test_resubmitting_needs_data_write(
    client: TestClient, browser: Browser, quarantine_tenant: FileTenant, admin: dict[str, str]
) -> None:
    from tests.factories import create_credential

    first = quarantine_tenant.upload(BODY)["transaction_id"]
    reader = create_credential(client, admin, quarantine_tenant.company_id, scopes=["data:read"])
    browser.signed_in(reader)
    page = browser.get(f"/console/transactions/{first}")
    assert page.status_code == 200 and "<textarea" not in page.text
    response = browser.post(f"/console/transactions/{first}/resubmit", {})
    assert response.status_code == 403


def test_another_companys_transaction_answers_404(
    browser: Browser, file_tenant: FileTenant, other_file_tenant: FileTenant
) -> None:
    theirs = _push(other_file_tenant, [_order(1)])["transaction_id"]
    browser.signed_in(file_tenant.credential)
    page = browser.get(f"/console/transactions/{theirs}")
    assert page.status_code == 404
    assert theirs not in browser.get("/console/transactions").text
    response = browser.post(f"/console/transactions/{theirs}/resubmit", {})
    assert response.status_code == 404
    assert browser.get("/console/transactions/not-a-uuid").status_code == 400
