"""Operator API under /admin/v1 (contract section 1)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.factories import (
    assert_problem,
    create_company,
    create_credential,
    create_ingestion_client,
)

ISO_MS = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"


def test_company_create_get_list(client: TestClient, admin: dict[str, str]) -> None:
    response = client.post("/admin/v1/companies", json={"name": "  Globex  "}, headers=admin)
    assert response.status_code == 201
    company = response.json()
    assert {"id", "name", "created_at"} <= set(company)
    assert company["name"] == "Globex"
    uuid.UUID(company["id"])
    assert client.get(f"/admin/v1/companies/{company['id']}", headers=admin).json() == company
    listed = client.get("/admin/v1/companies", params={"page_size": 100}, headers=admin).json()
    assert {"page_number", "page_size", "total_entries", "total_pages", "data"} == set(listed)
    assert listed["page_number"] == 0 and listed["total_entries"] >= 1


def test_created_at_has_milliseconds_and_z(client: TestClient, admin: dict[str, str]) -> None:
    import re

    company = client.post("/admin/v1/companies", json={"name": "T"}, headers=admin).json()
    assert re.match(ISO_MS, company["created_at"])


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"name": ""},
        {"name": "   "},
        {"name": 5},
        {"name": "x" * 201},
        {"name": "ok", "id": "6f1c5f4e-2f0a-4d7e-9a57-0b1f0c9d2e11"},
        [],
        "name",
    ],
)
def test_company_bad_bodies(client: TestClient, admin: dict[str, str], body: Any) -> None:
    body_problem = assert_problem(client.post("/admin/v1/companies", json=body, headers=admin), 400)
    assert body_problem["errors"] and body_problem["errors"][0]["location"] == "body"


def test_unknown_company_is_404_and_bad_uuid_is_400(
    client: TestClient, admin: dict[str, str]
) -> None:
    assert_problem(
        client.get(f"/admin/v1/companies/{uuid.uuid4()}", headers=admin), 404, "company_not_found"
    )
    problem = assert_problem(
        client.get("/admin/v1/companies/not-a-uuid", headers=admin), 400, "invalid_parameter"
    )
    assert problem["errors"][0] == {
        "location": "path",
        "field": "company_id",
        "message": problem["errors"][0]["message"],
    }


def test_paging(client: TestClient, admin: dict[str, str], company: str) -> None:
    for _ in range(3):
        create_ingestion_client(client, admin, company)
    url = f"/admin/v1/companies/{company}/clients"
    pages = [
        client.get(url, params={"page": p, "page_size": 2}, headers=admin).json() for p in range(3)
    ]
    assert [len(p["data"]) for p in pages] == [2, 1, 0]
    assert all(p["total_entries"] == 3 and p["total_pages"] == 2 for p in pages)
    ids = [c["client_id"] for p in pages for c in p["data"]]
    assert len(set(ids)) == 3


@pytest.mark.parametrize(
    "params",
    [
        {"page": -1},
        {"page": 10**32},  # found by schemathesis: an offset past 64 bits was a 500
        {"page_size": 0},
        {"page_size": 101},
        {"page": "x"},
        {"page_size": "1.5"},
        {"colour": "red"},
    ],
)
def test_bad_paging_parameters(
    client: TestClient, admin: dict[str, str], params: dict[str, Any]
) -> None:
    problem = assert_problem(
        client.get("/admin/v1/companies", params=params, headers=admin), 400, "invalid_parameter"
    )
    assert problem["errors"][0]["field"] == next(iter(params))
    assert problem["errors"][0]["location"] == "query"


def test_client_create_get_list_revoke(
    client: TestClient, admin: dict[str, str], company: str
) -> None:
    cid = f"acme_crm-1.{uuid.uuid4().hex[:6]}"  # hyphen, underscore and dot all allowed
    response = client.post(
        f"/admin/v1/companies/{company}/clients",
        json={"client_id": cid, "name": "CRM"},
        headers=admin,
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert {"client_id", "company_id", "name", "created_at"} <= set(body)
    assert body["company_id"] == company
    url = f"/admin/v1/companies/{company}/clients/{cid}"
    assert client.get(url, headers=admin).json() == body
    assert client.delete(url, headers=admin).status_code == 204
    assert client.get(url, headers=admin).json()["revoked_at"] is not None


def test_client_id_is_unique(client: TestClient, admin: dict[str, str], company: str) -> None:
    client_id = create_ingestion_client(client, admin, company)
    other = create_company(client, admin)
    response = client.post(
        f"/admin/v1/companies/{other}/clients",
        json={"client_id": client_id, "name": "again"},
        headers=admin,
    )
    assert_problem(response, 409, "client_exists")


@pytest.mark.parametrize("client_id", ["-starts-with-dash", "has space", "x" * 65, "", "é"])
def test_client_id_pattern(
    client: TestClient, admin: dict[str, str], company: str, client_id: str
) -> None:
    response = client.post(
        f"/admin/v1/companies/{company}/clients",
        json={"client_id": client_id, "name": "n"},
        headers=admin,
    )
    problem = assert_problem(response, 400)
    assert problem["errors"][0]["field"] == "/client_id"


def test_client_of_unknown_or_other_company_is_404(
    client: TestClient, admin: dict[str, str], company: str
) -> None:
    client_id = create_ingestion_client(client, admin, company)
    other = create_company(client, admin)
    assert_problem(
        client.get(f"/admin/v1/companies/{other}/clients/{client_id}", headers=admin),
        404,
        "client_not_found",
    )
    response = client.post(
        f"/admin/v1/companies/{uuid.uuid4()}/clients",
        json={"client_id": "zz-" + uuid.uuid4().hex[:8], "name": "n"},
        headers=admin,
    )
    assert_problem(response, 404, "company_not_found")


def test_credential_secret_is_shown_once(
    client: TestClient, admin: dict[str, str], company: str
) -> None:
    crm = create_ingestion_client(client, admin, company)
    created = create_credential(client, admin, company, scopes=["data:write"], client_ids=[crm])
    assert {
        "client_id",
        "client_secret",
        "author_id",
        "company_id",
        "scopes",
        "client_ids",
        "created_at",
    } <= set(created)
    assert created["client_ids"] == [crm] and created["scopes"] == ["data:write"]
    fetched = client.get(f"/admin/v1/credentials/{created['client_id']}", headers=admin)
    listed = client.get(f"/admin/v1/companies/{company}/credentials", headers=admin)
    for text in (fetched.text, listed.text):
        assert created["client_secret"] not in text
        assert "secret" not in text and "argon2" not in text
    assert fetched.json()["author_id"] == created["author_id"]
    assert listed.json()["total_entries"] == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x", "scopes": ["admin"]}, "/scopes/0"),
        ({"name": "x", "scopes": ["data:read", "root"]}, "/scopes/1"),
        ({"name": "x", "scopes": []}, "/scopes"),
        ({"name": "x"}, "/scopes"),
        ({"name": "x", "scopes": ["data:read"], "client_secret": "mine"}, "/client_secret"),
    ],
)
def test_credential_bad_bodies(
    client: TestClient, admin: dict[str, str], company: str, body: dict[str, Any], field: str
) -> None:
    response = client.post(f"/admin/v1/companies/{company}/credentials", json=body, headers=admin)
    problem = assert_problem(response, 400)
    assert field in [e["field"] for e in problem["errors"]]


def test_credential_for_another_companys_client_is_refused(
    client: TestClient, admin: dict[str, str], company: str
) -> None:
    other = create_company(client, admin)
    foreign = create_ingestion_client(client, admin, other)
    response = client.post(
        f"/admin/v1/companies/{company}/credentials",
        json={"name": "x", "scopes": ["data:read"], "client_ids": [foreign]},
        headers=admin,
    )
    problem = assert_problem(response, 400, "invalid_credential")
    assert foreign in problem["detail"]


def test_unknown_credential_is_404(client: TestClient, admin: dict[str, str]) -> None:
    assert_problem(
        client.get("/admin/v1/credentials/hw_nobody", headers=admin), 404, "credential_not_found"
    )
    assert_problem(client.delete("/admin/v1/credentials/hw_nobody", headers=admin), 404)


def test_company_tokens_cannot_use_the_operator_api(
    client: TestClient, company_token: str, company: str
) -> None:
    headers = {"Authorization": f"Bearer {company_token}"}
    for method, url in [
        ("GET", f"/admin/v1/companies/{company}"),
        ("POST", "/admin/v1/companies"),
        ("DELETE", "/admin/v1/credentials/x"),
    ]:
        assert_problem(
            client.request(method, url, headers=headers, json={"name": "x"}),
            403,
            "insufficient_scope",
        )
