"""Hostile input to the console: any query string, form or path a browser (or a script
pretending to be one) can send answers a page with a 2xx, 3xx or 4xx status, never a
5xx, and changes nothing it should not."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from tests.console.conftest import OPERATOR, Browser
from tests.files.conftest import FileTenant

TEXT = st.text(st.characters(codec="utf-8"), max_size=80)
VALUES = st.one_of(
    TEXT,
    st.sampled_from(["", "-1", "0", "99999999999999999999", "null", "[]", "{}", "\x00", "%00"]),
)
QUERY = st.dictionaries(
    st.sampled_from(
        [
            "page",
            "page_size",
            "status",
            "channel",
            "client_id",
            "dataset_id",
            "transaction_id",
            "resource_type",
            "action",
            "resource_id",
            "author_id",
            "from",
            "to",
            "sort_by",
            "sort_direction",
            "old",
            "new",
            "next",
            "x",
        ]
    ),
    VALUES,
    max_size=4,
)
PAGES = [
    "/console",
    "/console/transactions",
    "/console/datasets",
    "/console/datasets/{client}/orders",
    "/console/datasets/{client}/orders/records",
    "/console/webhooks",
    "/console/exports",
    "/console/activity",
    "/console/erasures",
    "/console/sign-in",
]
FORMS = [
    "/console/transactions/00000000-0000-4000-8000-000000000000/resubmit",
    "/console/datasets/{client}/orders/preview",
    "/console/webhooks",
    "/console/exports",
    "/console/erasures",
    "/console/sign-in",
]


@pytest.fixture
def signed(client: TestClient, file_tenant: FileTenant, admin: dict[str, str]) -> Any:
    from tests.factories import create_credential

    credential = create_credential(
        client,
        admin,
        file_tenant.company_id,
        scopes=["data:read", "data:write", "webhooks:manage", "activities:read", "data:erase"],
    )
    return Browser(client).signed_in(credential), file_tenant.client_id


# one signed-in browser for all of a test's examples: what they send changes nothing
# (or only what the session's own company may change)
ONE_BROWSER = settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])


@ONE_BROWSER
@given(path=st.sampled_from(PAGES), query=QUERY)
def test_any_query_answers_a_page_not_an_error(
    signed: Any, path: str, query: dict[str, str]
) -> None:
    browser, client_id = signed
    response = browser.get(path.format(client=client_id), **query)
    assert response.status_code < 500, (path, query, response.text[:500])


@ONE_BROWSER
@given(path=st.sampled_from(FORMS), fields=st.dictionaries(TEXT, VALUES, max_size=5))
def test_any_form_answers_a_page_not_an_error(
    signed: Any, path: str, fields: dict[str, str]
) -> None:
    browser, client_id = signed
    response = browser.post(path.format(client=client_id), fields)
    assert response.status_code < 500, (path, fields, response.text[:500])


@ONE_BROWSER
@given(segment=TEXT)
def test_any_path_segment_answers_a_page_not_an_error(signed: Any, segment: str) -> None:
    browser, _ = signed
    for path in ("/console/transactions/{}", "/console/datasets/{}/orders", "/console/webhooks/{}"):
        response = browser.get(path.format(quote(segment, safe="")))
        assert response.status_code < 500, (path, segment, response.text[:500])


def test_bodies_that_are_not_forms_are_refused(signed: Any, client: TestClient) -> None:
    browser, _ = signed
    for content, kind in (
        (b'{"csrf": "x"}', "application/json"),
        (b"\xff\xfe\x00garbage", "application/x-www-form-urlencoded"),
        (b"--x\r\nbroken", "multipart/form-data; boundary=x"),
    ):
        response = browser.http.post(
            "/console/erasures", content=content, headers={"content-type": kind}
        )
        assert response.status_code in (400, 403), (kind, response.text[:300])
    operator = Browser(client).signed_in(OPERATOR)
    big = operator.post("/console/companies", {"name": "x" * 10_000})
    assert big.status_code == 400


def test_a_nul_anywhere_is_refused_naming_where(signed: Any) -> None:
    browser, client_id = signed
    assert browser.get("/console/transactions", status="\x00").status_code == 400
    assert browser.get("/console/datasets/%00/orders").status_code == 400
    erased = browser.post("/console/erasures", {"subjects": "ada\x00@example.com"})
    assert erased.status_code == 400 and "NUL" in erased.text
    tried = browser.post(
        f"/console/datasets/{client_id}/orders/preview", {"records": '[{"order_id": "\\u0000"}]'}
    )
    assert tried.status_code == 400 and "/0/order_id" in tried.text
    assert "No erasure yet." in browser.get("/console/erasures").text
