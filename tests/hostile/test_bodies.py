"""Hostile bodies and parameters (contract section 15): one strict reading of every JSON
body, one depth limit, U+0000 refused everywhere and `characters` for records."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.factories import assert_problem, create_ingestion_client
from tests.ingestion.conftest import DataTenant
from tests.tenants import Tenant


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.fixture
def data_tenant(client: TestClient, admin: dict[str, str], company: str) -> DataTenant:
    return DataTenant(client, admin, company)


@pytest.mark.parametrize("levels", [33, 253, 300, 1020, 5000])
def test_a_deeply_nested_push_is_400_never_500(data_tenant: DataTenant, levels: int) -> None:
    body = (
        f'{{"client_id": "{data_tenant.client_id}", "dataset_id": "orders", '
        f'"data": {{"order_id": "A", "amount": 1, "x": {_deep(levels)}}}}}'
    )
    response = data_tenant.client.post(
        "/platform/v1/data/json",
        content=body,
        headers=data_tenant.headers | {"content-type": "application/json"},
    )
    problem = assert_problem(response, 400)
    assert "nesting is deeper than 32 levels" in problem["detail"]
    assert problem["request_id"] == response.headers["x-request-id"]


@pytest.mark.parametrize("levels", [40, 1000])
def test_a_deep_token_request_is_invalid_request(client: TestClient, levels: int) -> None:
    body = f'{{"client_id": "x", "client_secret": "y", "audience": {_deep(levels)}}}'
    response = client.post(
        "/oauth/token", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid_request"
    assert "nesting" in response.json()["error_description"]


@pytest.mark.parametrize("levels", [40, 200, 1000])
def test_a_deep_schema_or_operator_body_is_400(
    client: TestClient, admin: dict[str, str], company: str, levels: int
) -> None:
    client_id = create_ingestion_client(client, admin, company)
    schema = '{"type": "object", "properties": {"a": %s}}' % (
        '{"items": ' * levels + "{}" + "}" * levels
    )
    response = client.post(
        f"/admin/v1/clients/{client_id}/datasets",
        content=f'{{"dataset_id": "deep", "schema": {schema}}}',
        headers=admin | {"content-type": "application/json"},
    )
    problem = assert_problem(response, 400, "malformed_json")
    assert "nesting" in problem["detail"]


def test_app_bodies_refuse_duplicate_members_as_pushes_do(tenant: Tenant) -> None:
    response = tenant.client.post(
        "/app/v1/workflow_categories",
        content='{"name": "a", "name": "b"}',
        headers=tenant.headers | {"content-type": "application/json"},
    )
    problem = assert_problem(response, 400, "malformed_json")
    assert "duplicate object member 'name'" in problem["detail"]


def test_a_body_in_another_content_type_is_415(tenant: Tenant) -> None:
    response = tenant.client.post(
        "/app/v1/workflow_categories",
        content='{"name": "a"}',
        headers=tenant.headers | {"content-type": "text/plain"},
    )
    problem = assert_problem(response, 415, "unsupported_media_type")
    assert "application/json" in problem["detail"]
    assert problem["request_id"]


def test_nul_in_an_operation_body_is_400_naming_the_member(tenant: Tenant) -> None:
    response = tenant.client.post(
        "/app/v1/workflow_categories",
        content='{"name": "ok", "description": "a\\u0000b"}',
        headers=tenant.headers | {"content-type": "application/json"},
    )
    problem = assert_problem(response, 400)
    assert problem["errors"][0]["field"] == "/description"
    assert "NUL" in problem["detail"]


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/app/v1/workflow_categories", {"name": "a\x00b"}),
        ("/platform/v1/transactions", {"client_id": "a\x00"}),
        ("/app/v1/workflow_categories", {"sort_by": "\x00"}),
    ],
)
def test_nul_in_a_query_parameter_is_400_on_both_databases(
    tenant: Tenant, path: str, params: dict[str, str]
) -> None:
    response = tenant.client.get(path, params=params, headers=tenant.headers)
    problem = assert_problem(response, 400)
    assert "Retry-After" not in response.headers
    assert problem["errors"][0]["location"] == "query"
    assert problem["errors"][0]["field"] == next(iter(params))


def test_nul_in_a_record_filter_is_400(data_tenant: DataTenant) -> None:
    response = data_tenant.client.get(
        "/platform/v1/data",
        params={
            "client_id": data_tenant.client_id,
            "dataset_id": "orders",
            "filter": '{"order_id": "a\\u0000"}',
        },
        headers=data_tenant.headers,
    )
    assert_problem(response, 400)


def test_nul_in_a_path_id_is_400(client: TestClient, admin: dict[str, str]) -> None:
    response = client.get("/admin/v1/credentials/a%00b", headers=admin)
    problem = assert_problem(response, 400)
    assert problem["errors"][0]["location"] == "path"


def test_a_record_holding_nul_fails_with_keyword_characters_and_reads_still_work(
    data_tenant: DataTenant,
) -> None:
    ok = data_tenant.push([{"order_id": "A-1", "amount": 1}])
    assert ok.status_code == 200, ok.text
    refused = data_tenant.push(
        [{"order_id": "A-2", "amount": 1}, {"order_id": "B\x00", "amount": 2, "k\x00": 1}]
    )
    problem = assert_problem(refused, 422)
    found = {(e["record"], e["path"], e["keyword"]) for e in problem["errors"]}
    assert (1, "/order_id", "characters") in found
    assert (1, "/k\\u0000", "characters") in found  # NUL written as text in a pointer
    transaction = data_tenant.client.get(
        f"/platform/v1/transactions/{problem['transaction_id']}", headers=data_tenant.headers
    )
    assert transaction.json()["status"] == "rejected"
    # a filtered read of the dataset still answers, with only the stored record
    listed = data_tenant.client.get(
        "/platform/v1/data",
        params={
            "client_id": data_tenant.client_id,
            "dataset_id": "orders",
            "filter": '{"order_id": "A-1"}',
        },
        headers=data_tenant.headers,
    )
    assert listed.status_code == 200, listed.text
    assert [r["data"]["order_id"] for r in listed.json()["data"]] == ["A-1"]


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/app/v1/workflow_categories", {"colour": "red"}),
        ("/platform/v1/transactions", {"page": "0", "pagesize": "5"}),
        ("/healthz", {"x": "1"}),
    ],
)
def test_an_unknown_query_parameter_is_400_naming_it(
    tenant: Tenant, path: str, params: dict[str, str]
) -> None:
    response = tenant.client.get(path, params=params, headers=tenant.headers)
    problem = assert_problem(response, 400)
    assert problem["errors"][0]["location"] == "query"
    assert problem["errors"][0]["message"] == "unknown parameter"


@pytest.mark.parametrize(
    ("path", "query"),
    [
        ("/app/v1/workflows", "name=a&name=b"),
        ("/app/v1/workflow_templates", "page=0&page_size=5&page=1"),
        ("/app/v1/workflow_categories", "page_size=5&page_size=6"),
    ],
)
def test_a_parameter_given_twice_is_400_naming_it(tenant: Tenant, path: str, query: str) -> None:
    """A parameter that takes one value, sent twice, is refused: no silent choice of one."""
    response = tenant.client.get(f"{path}?{query}", headers=tenant.headers)
    problem = assert_problem(response, 400)
    field = query.split("&")[-1].split("=")[0]
    assert problem["errors"] == [
        {"location": "query", "field": field, "message": "given more than once"}
    ]
    once = "&".join(dict.fromkeys(p for p in query.split("&") if p.split("=")[0] != field))
    assert tenant.client.get(f"{path}?{once}", headers=tenant.headers).status_code == 200


@pytest.mark.parametrize("value", ["19.0", "1e1", "true", ""])
def test_page_size_must_be_an_integer(tenant: Tenant, value: str) -> None:
    response = tenant.client.get(
        "/app/v1/workflow_categories", params={"page_size": value}, headers=tenant.headers
    )
    assert_problem(response, 400)


@pytest.mark.parametrize("value", [0, 1, "false", "true"])
def test_boolean_options_must_be_json_booleans(
    client: TestClient, admin: dict[str, str], company: str, value: Any
) -> None:
    client_id = create_ingestion_client(client, admin, company)
    response = client.post(
        f"/admin/v1/clients/{client_id}/datasets",
        json={
            "dataset_id": "strict",
            "schema": {"type": "object"},
            "options": {"drop_unknown_fields": value},
        },
        headers=admin,
    )
    problem = assert_problem(response, 400)
    assert problem["errors"][0]["field"] == "/options/drop_unknown_fields"


def test_a_422_from_an_unkeyed_push_carries_its_request_id(data_tenant: DataTenant) -> None:
    response = data_tenant.push([{"order_id": "A", "amount": "not a number"}])
    problem = assert_problem(response, 422)
    assert problem["request_id"] == response.headers["x-request-id"]
    given = data_tenant.client.post(
        "/platform/v1/data/json",
        json=data_tenant.envelope([{"amount": -1}]),
        headers=data_tenant.headers | {"X-Request-ID": "mine-123"},
    )
    assert assert_problem(given, 422)["request_id"] == "mine-123"
