"""The tenant-isolation matrix, through the console: every page or form that names a
company's object, used by another company's session, answers what it answers for an
object that does not exist and changes nothing; another company's lists show nothing of
it. `test_the_matrix_covers_every_console_route` fails when a route is added without a
row here."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from starlette.testclient import TestClient

from tests.console.conftest import Browser
from tests.factories import OPERATOR_ID, OPERATOR_SECRET, auth, create_credential, get_token
from tests.reliability.test_isolation import EVERY_SCOPE, MISSING, Company, _ids, company_pair
from tests.routes import every_route

MISSING_COMPANY = "00000000-0000-4000-8000-000000000000"


@dataclass(frozen=True)
class Row:
    method: str
    route: str  # as the console's router names it
    path: str
    form: dict[str, str] | None = None


MATRIX = [
    Row("GET", "/console/transactions/{transaction_id}", "/console/transactions/{pushed}"),
    Row("GET", "/console/transactions/{transaction_id}", "/console/transactions/{file}"),
    Row(
        "POST",
        "/console/transactions/{transaction_id}/resubmit",
        "/console/transactions/{file}/resubmit",
        {},
    ),
    Row(
        "POST",
        "/console/transactions/{transaction_id}/resubmit",
        "/console/transactions/{file}/resubmit",
        {"line": "3", "data": '{"order_id": "A-2", "amount": 2, "quantity": 2}'},
    ),
    Row(
        "GET", "/console/datasets/{client_id}/{dataset_id}", "/console/datasets/{client_id}/orders"
    ),
    Row(
        "GET",
        "/console/datasets/{client_id}/{dataset_id}/records",
        "/console/datasets/{client_id}/orders/records",
    ),
    Row(
        "POST",
        "/console/datasets/{client_id}/{dataset_id}/preview",
        "/console/datasets/{client_id}/orders/preview",
        {"records": '[{"order_id": "S-1", "amount": 1}]'},
    ),
    Row("GET", "/console/webhooks/{endpoint_id}", "/console/webhooks/{hook}"),
    Row("POST", "/console/webhooks/{endpoint_id}/test", "/console/webhooks/{hook}/test", {}),
    Row(
        "POST",
        "/console/webhooks/{endpoint_id}/replay",
        "/console/webhooks/{hook}/replay",
        {"since": "2026-01-01T00:00"},
    ),
    Row(
        "POST",
        "/console/exports",
        "/console/exports",
        {"client_id": "{client_id}", "dataset_id": "orders", "format": "csv"},
    ),
    Row(
        "POST",
        "/console/erasures",
        "/console/erasures",
        {"subjects": "ada@example.com", "client_id": "{client_id}"},
    ),
]
# the operator's pages: a company user gets 403 whatever they name
OPERATOR_ROUTES = {
    ("GET", "/console/companies/{company_id}"),
    ("POST", "/console/companies/{company_id}/revoke"),
    ("POST", "/console/companies/{company_id}/clients"),
    ("POST", "/console/companies/{company_id}/clients/{client_id}/revoke"),
    ("POST", "/console/companies/{company_id}/credentials"),
    ("POST", "/console/companies/{company_id}/sftp_accounts"),
    ("POST", "/console/credentials/{client_id}/revoke"),
    ("GET", "/console/clients/{client_id}"),
    ("POST", "/console/clients/{client_id}/datasets"),
    ("GET", "/console/clients/{client_id}/datasets/{dataset_id}"),
    ("POST", "/console/clients/{client_id}/datasets/{dataset_id}/schema"),
    ("POST", "/console/clients/{client_id}/datasets/{dataset_id}/transforms"),
    ("POST", "/console/clients/{client_id}/datasets/{dataset_id}/preview"),
    ("POST", "/console/clients/{client_id}/datasets/{dataset_id}/inboxes"),
    ("POST", "/console/sftp_accounts/{username}/delete"),
    ("POST", "/console/inboxes/{inbox_id}/delete"),
}


def _fill(text: str, ids: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: ids[m.group(1)], text)


def _use(browser: Browser, row: Row, ids: dict[str, str]) -> tuple[int, str]:
    path = _fill(row.path, ids)
    if row.method == "GET":
        response = browser.get(path)
    else:
        response = browser.post(path, {k: _fill(v, ids) for k, v in (row.form or {}).items()})
    text = response.text
    for value in sorted(ids.values(), key=len, reverse=True):
        text = text.replace(value, "<id>")
    return response.status_code, text


@pytest.fixture
def a_and_b(client: TestClient, admin: dict[str, str]) -> tuple[Company, Company, Browser]:
    return _pair(client, admin)


@pytest.fixture(scope="module")
def matrix_pair(client: TestClient) -> tuple[Company, Company, Browser]:
    """A, B and B's session for the matrix's rows, made once for this file: each row
    checks that B's use answered as for a missing object and left A's as it was, so a
    row that changed them fails there (a pair for each row cost 0.2 s of CPU)."""
    return _pair(client, auth(get_token(client, OPERATOR_ID, OPERATOR_SECRET)))


def _pair(client: TestClient, admin: dict[str, str]) -> tuple[Company, Company, Browser]:
    a, b = company_pair(client, admin)
    credential = create_credential(client, admin, b.workflows.company_id, scopes=EVERY_SCOPE)
    return a, b, Browser(client).signed_in(credential)


def test_the_matrix_covers_every_console_route(client: TestClient) -> None:
    covered = {(row.method, row.route) for row in MATRIX} | OPERATOR_ROUTES
    named = {
        (method, path)
        for method, path in every_route(client.app)
        if path.startswith("/console/") and "{" in path
    }
    assert len(named) >= 20  # the walk reaches the console's routes
    assert sorted(named - covered) == []


@pytest.mark.parametrize("row", MATRIX, ids=lambda row: f"{row.method} {row.path}")
def test_another_companys_session_gets_what_a_missing_object_gets(
    client: TestClient, matrix_pair: tuple[Company, Company, Browser], row: Row
) -> None:
    a, _, b = matrix_pair
    before = client.get(f"/platform/v1/transactions/{a.file}", headers=a.headers).json()
    crossed = _use(b, row, _ids(a))
    missing = _use(b, row, MISSING)
    assert crossed[0] in (400, 403, 404), crossed
    assert crossed == missing
    after = client.get(f"/platform/v1/transactions/{a.file}", headers=a.headers).json()
    assert after == before
    assert client.get("/platform/v1/exports", headers=a.headers).json()["total_entries"] == 1
    assert client.get("/platform/v1/erasures", headers=a.headers).json()["total_entries"] == 1


def test_operator_routes_refuse_a_company_session(
    a_and_b: tuple[Company, Company, Browser],
) -> None:
    a, _, b = a_and_b
    ids = _ids(a) | {
        "company_id": a.workflows.company_id,
        "dataset_id": "orders",
        "username": "nobody",
        "inbox_id": MISSING_COMPANY,
    }
    for method, route in sorted(OPERATOR_ROUTES):
        path = _fill(route, ids)
        response = b.get(path) if method == "GET" else b.post(path, {"name": "x"})
        assert response.status_code == 403, (method, path, response.text)


def test_another_companys_pages_show_nothing_of_it(
    a_and_b: tuple[Company, Company, Browser],
) -> None:
    a, _, b = a_and_b
    everything_of_a = [*_ids(a).values(), a.workflows.company_id]
    for path in (
        "/console",
        "/console/transactions",
        "/console/datasets",
        "/console/webhooks",
        "/console/exports",
        "/console/activity",
        "/console/erasures",
    ):
        page = b.get(path)
        assert page.status_code == 200, (path, page.text)
        assert [value for value in everything_of_a if value in page.text] == [], path
    assert b.get("/console/transactions").text.count("/console/transactions/") >= 2  # B's own
