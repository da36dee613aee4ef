"""Dataset registry (contract section 5): operator API, draft-06 checks, versions, activity."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.factories import (
    assert_problem,
    auth,
    create_company,
    create_credential,
    create_ingestion_client,
    get_token,
)
from tests.ingestion.conftest import SCHEMA, DataTenant, order, register_dataset


@pytest.fixture
def client_id(client: TestClient, admin: dict[str, str], company: str) -> str:
    return create_ingestion_client(client, admin, company)


def put_schema(
    client: TestClient, admin: dict[str, str], client_id: str, schema: Any, dataset: str = "orders"
) -> Any:
    return client.put(
        f"/admin/v1/clients/{client_id}/datasets/{dataset}/schema",
        json={"schema": schema},
        headers=admin,
    )


def test_register_answers_the_contract_shape(
    client: TestClient, admin: dict[str, str], client_id: str
) -> None:
    body = register_dataset(
        client, admin, client_id, "web_events-2", options={"coerce_types": True}
    )
    assert body["client_id"] == client_id
    assert body["dataset_id"] == "web_events-2"
    assert body["schema_version"] == 1
    assert body["schema"] == SCHEMA
    assert body["options"]["coerce_types"] is True
    assert body["options"]["compatibility"] == "backward"
    assert body["options"]["invalid_rows"] == "reject"
    assert body["created_at"].endswith("Z")
    assert [v["schema_version"] for v in body["versions"]] == [1]
    fetched = client.get(f"/admin/v1/clients/{client_id}/datasets/web_events-2", headers=admin)
    assert fetched.json() == body


@pytest.mark.parametrize(
    ("schema", "field"),
    [
        (
            {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"},
            "/schema/$schema",
        ),
        ({"$schema": "http://json-schema.org/draft-04/schema#"}, "/schema/$schema"),
        ({"type": "object", "properties": {"a": {"type": "text"}}}, "/schema/properties/a/type"),
        ({"type": "object", "required": [1]}, "/schema/required/0"),
        (
            {"type": "object", "properties": {"n": {"type": "integer"}}, "examples": [{"n": "1"}]},
            "/schema/examples/0/n",
        ),
    ],
)
def test_invalid_schemas_are_400_naming_why(
    client: TestClient, admin: dict[str, str], client_id: str, schema: Any, field: str
) -> None:
    response = client.post(
        f"/admin/v1/clients/{client_id}/datasets",
        json={"dataset_id": "orders", "schema": schema},
        headers=admin,
    )
    problem = assert_problem(response, 400, "invalid_schema")
    assert field in [e["field"] for e in problem["errors"]]
    if "$schema" in schema:
        assert schema["$schema"].split("/")[-2] in problem["detail"]
    assert (
        client.get(f"/admin/v1/clients/{client_id}/datasets", headers=admin).json()["total_entries"]
        == 0
    )


@pytest.mark.parametrize(
    "body",
    [
        {"dataset_id": "bad id", "schema": {}},
        {"dataset_id": "-x", "schema": {}},
        {"dataset_id": "ok", "schema": "not an object"},
        {"dataset_id": "ok", "schema": {}, "options": {"compatibility": "forward"}},
        {"dataset_id": "ok", "schema": {}, "options": {"unknown": True}},
        {"dataset_id": "ok", "schema": {}, "extra": 1},
    ],
)
def test_bad_registration_bodies_are_400(
    client: TestClient, admin: dict[str, str], client_id: str, body: dict[str, Any]
) -> None:
    response = client.post(f"/admin/v1/clients/{client_id}/datasets", json=body, headers=admin)
    assert_problem(response, 400)


def test_duplicate_dataset_409_and_unknown_client_404(
    client: TestClient, admin: dict[str, str], client_id: str
) -> None:
    register_dataset(client, admin, client_id)
    response = client.post(
        f"/admin/v1/clients/{client_id}/datasets",
        json={"dataset_id": "orders", "schema": SCHEMA},
        headers=admin,
    )
    assert_problem(response, 409, "dataset_exists")
    response = client.post(
        "/admin/v1/clients/nobody/datasets",
        json={"dataset_id": "orders", "schema": SCHEMA},
        headers=admin,
    )
    assert_problem(response, 404, "client_not_found")
    assert_problem(
        client.get(f"/admin/v1/clients/{client_id}/datasets/nope", headers=admin),
        404,
        "dataset_not_found",
    )


def test_registry_needs_admin(client: TestClient, data_tenant: DataTenant) -> None:
    response = client.post(
        f"/admin/v1/clients/{data_tenant.client_id}/datasets",
        json={"dataset_id": "x", "schema": SCHEMA},
        headers=data_tenant.headers,
    )
    assert_problem(response, 403, "insufficient_scope")
    assert_problem(client.get(f"/admin/v1/clients/{data_tenant.client_id}/datasets"), 401)


def test_versions_are_kept_and_records_name_theirs(
    client: TestClient, admin: dict[str, str], data_tenant: DataTenant
) -> None:
    assert data_tenant.push(order(1)).status_code == 200
    v2 = copy.deepcopy(SCHEMA)
    v2["properties"]["coupon"] = {"type": "string"}
    response = put_schema(client, admin, data_tenant.client_id, v2)
    assert response.status_code == 200, response.text
    assert response.json()["schema_version"] == 2
    assert [v["schema_version"] for v in response.json()["versions"]] == [1, 2]
    assert data_tenant.push(order(2, coupon="X")).json()["schema_version"] == 2
    assert [r["schema_version"] for r in data_tenant.records()] == [1, 2]

    base = f"/admin/v1/clients/{data_tenant.client_id}/datasets/orders/versions"
    listed = client.get(base, headers=admin).json()
    assert [v["schema_version"] for v in listed["data"]] == [1, 2]
    assert client.get(f"{base}/1", headers=admin).json()["schema"] == SCHEMA
    assert client.get(f"{base}/2", headers=admin).json()["schema"] == v2
    assert_problem(client.get(f"{base}/3", headers=admin), 404)
    assert_problem(client.get(f"{base}/0", headers=admin), 400)
    # found by schemathesis: a number past 64 bits was a 500
    assert_problem(client.get(f"{base}/{10**22}", headers=admin), 400)
    assert_problem(client.get(base, params={"page": 10**32}, headers=admin), 400)


def test_backward_compatibility_checks_examples_and_stored_records(
    client: TestClient, admin: dict[str, str], data_tenant: DataTenant
) -> None:
    assert data_tenant.push(order(1, quantity=5)).status_code == 200
    stricter = copy.deepcopy(SCHEMA)
    stricter["properties"]["quantity"] = {"type": "string"}
    problem = assert_problem(
        put_schema(client, admin, data_tenant.client_id, stricter), 409, "incompatible_schema"
    )
    assert problem["errors"][0]["path"] == "/quantity"
    assert "record_id" in problem["errors"][0]

    needs_coupon = copy.deepcopy(SCHEMA)
    needs_coupon["properties"]["coupon"] = {"type": "string"}
    needs_coupon["required"] = ["order_id", "amount", "coupon"]
    needs_coupon["examples"] = [{"order_id": "A", "amount": 1, "coupon": "C"}]
    problem = assert_problem(
        put_schema(client, admin, data_tenant.client_id, needs_coupon), 409, "incompatible_schema"
    )
    assert {"example": 0, "path": "/coupon", "keyword": "required"}.items() <= problem["errors"][
        0
    ].items()
    dataset = client.get(
        f"/admin/v1/clients/{data_tenant.client_id}/datasets/orders", headers=admin
    )
    assert dataset.json()["schema_version"] == 1


def test_compatibility_none_accepts_any_valid_schema(
    client: TestClient, admin: dict[str, str], data_tenant: DataTenant
) -> None:
    assert data_tenant.push(order(1)).status_code == 200
    response = client.put(
        f"/admin/v1/clients/{data_tenant.client_id}/datasets/orders/options",
        json={"options": {"compatibility": "none"}},
        headers=admin,
    )
    assert response.status_code == 200, response.text
    assert response.json()["options"]["compatibility"] == "none"
    other = {"type": "object", "required": ["sku"], "properties": {"sku": {"type": "string"}}}
    response = put_schema(client, admin, data_tenant.client_id, other)
    assert response.status_code == 200, response.text
    assert response.json()["schema_version"] == 2


def test_dataset_changes_write_activity(
    client: TestClient, admin: dict[str, str], data_tenant: DataTenant
) -> None:
    v2 = copy.deepcopy(SCHEMA)
    v2["properties"]["coupon"] = {"type": "string"}
    assert put_schema(client, admin, data_tenant.client_id, v2).status_code == 200
    response = client.post(
        "/app/v1/activities/search",
        json={
            "filter": {"resource_type": {"$in": ["dataset", "dataset_schema"]}},
            "sort_direction": "asc",
        },
        headers=data_tenant.headers,
    )
    assert response.status_code == 200, response.text
    entries = response.json()["data"]
    assert [(e["resource_type"], e["action"]) for e in entries] == [
        ("dataset", "create"),
        ("dataset_schema", "create"),
        ("dataset", "update"),
        ("dataset_schema", "create"),
    ]
    operator = client.get("/platform/v1/whoami", headers=admin).json()["author_id"]
    assert {e["author_id"] for e in entries} == {operator}
    assert entries[2]["before"]["schema_version"] == 1
    assert entries[2]["after"]["schema_version"] == 2
    assert entries[3]["after"]["schema"] == v2
    assert entries[0]["before"] is None


def test_company_reads_datasets_of_its_clients(
    client: TestClient,
    admin: dict[str, str],
    data_tenant: DataTenant,
    other_data_tenant: DataTenant,
) -> None:
    listed = client.get("/platform/v1/datasets", headers=data_tenant.headers).json()
    assert [(d["client_id"], d["dataset_id"]) for d in listed["data"]] == [
        (data_tenant.client_id, "orders")
    ]
    one = client.get(
        "/platform/v1/datasets/orders",
        params={"client_id": data_tenant.client_id},
        headers=data_tenant.headers,
    )
    assert one.status_code == 200
    assert one.json()["schema"] == SCHEMA
    for params in ({"client_id": other_data_tenant.client_id}, {"client_id": "nobody"}):
        assert_problem(
            client.get("/platform/v1/datasets/orders", params=params, headers=data_tenant.headers),
            403,
            "client_not_allowed",
        )
        assert_problem(
            client.get("/platform/v1/datasets", params=params, headers=data_tenant.headers),
            403,
            "client_not_allowed",
        )
    assert_problem(
        client.get(
            "/platform/v1/datasets/nope",
            params={"client_id": data_tenant.client_id},
            headers=data_tenant.headers,
        ),
        404,
        "dataset_not_found",
    )
    assert_problem(client.get("/platform/v1/datasets/orders", headers=data_tenant.headers), 400)


def test_a_company_reads_each_schema_version_of_its_datasets(
    client: TestClient,
    admin: dict[str, str],
    data_tenant: DataTenant,
    other_data_tenant: DataTenant,
) -> None:
    v2 = copy.deepcopy(SCHEMA)
    v2["properties"]["coupon"] = {"type": "string"}
    assert put_schema(client, admin, data_tenant.client_id, v2).status_code == 200
    base = "/platform/v1/datasets/orders/versions"
    mine = {"client_id": data_tenant.client_id}
    first = client.get(f"{base}/1", params=mine, headers=data_tenant.headers)
    assert first.status_code == 200, first.text
    assert (first.json()["schema_version"], first.json()["schema"]) == (1, SCHEMA)
    second = client.get(f"{base}/2", params=mine, headers=data_tenant.headers).json()
    assert second["schema"] == v2
    assert_problem(client.get(f"{base}/3", params=mine, headers=data_tenant.headers), 404)
    assert_problem(client.get(f"{base}/0", params=mine, headers=data_tenant.headers), 400)
    assert_problem(client.get(f"{base}/1", headers=data_tenant.headers), 400)  # no client_id
    # another company's client is not this token's to use
    theirs = client.get(f"{base}/1", params=mine, headers=other_data_tenant.headers)
    assert_problem(theirs, 403)


def test_token_limited_to_some_clients_sees_only_theirs(
    client: TestClient, admin: dict[str, str], company: str, data_tenant: DataTenant
) -> None:
    second = create_ingestion_client(client, admin, company)
    register_dataset(client, admin, second, "leads")
    limited = create_credential(client, admin, company, scopes=["data:read"], client_ids=[second])
    headers = auth(get_token(client, limited["client_id"], limited["client_secret"]))
    listed = client.get("/platform/v1/datasets", headers=headers).json()
    assert [d["dataset_id"] for d in listed["data"]] == ["leads"]
    assert_problem(
        client.get(
            "/platform/v1/datasets/orders",
            params={"client_id": data_tenant.client_id},
            headers=headers,
        ),
        403,
    )


def test_field_names_with_hyphens_and_underscores(
    client: TestClient, admin: dict[str, str], company: str
) -> None:
    tenant = DataTenant(
        client,
        admin,
        create_company(client, admin),
        coerce_types=True,
        field_map={"e_mail": "customer-email"},
    )
    response = tenant.push({"order_id": "A", "amount": "3", "e_mail": " a@b.co "})
    assert response.status_code == 200, response.text
    assert tenant.records()[0]["data"]["customer-email"] == "a@b.co"
    problem = assert_problem(
        tenant.push({"order_id": "A", "amount": 1, "customer-email": "x"}), 422
    )
    assert problem["errors"][0]["path"] == "/customer-email"


def test_cli_registers_versions_and_shows(
    client: TestClient, admin: dict[str, str], client_id: str, settings: Any, tmp_path: Any
) -> None:
    from tests.factories import run_cli

    where = {"data_dir": settings.data_dir, "database_url": settings.database_url}
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA))
    options_file = tmp_path / "options.json"
    options_file.write_text(json.dumps({"coerce_types": True}))
    done = run_cli(
        "datasets",
        "register",
        client_id,
        "cli-set",
        str(schema_file),
        "--options",
        str(options_file),
        **where,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["schema_version"] == 1
    v2 = copy.deepcopy(SCHEMA)
    v2["properties"]["coupon"] = {"type": "string"}
    schema_file.write_text(json.dumps(v2))
    done = run_cli("datasets", "add-version", client_id, "cli-set", str(schema_file), **where)
    assert done.returncode == 0, done.stderr
    fetched = client.get(f"/admin/v1/clients/{client_id}/datasets/cli-set", headers=admin).json()
    assert fetched["schema_version"] == 2
    assert fetched["options"]["coerce_types"] is True
    done = run_cli("datasets", "show", client_id, "cli-set", "--version", "1", **where)
    assert json.loads(done.stdout)["schema"] == SCHEMA

    schema_file.write_text(json.dumps({"$schema": "http://json-schema.org/draft-07/schema#"}))
    done = run_cli("datasets", "register", client_id, "bad", str(schema_file), **where)
    assert done.returncode == 1
    assert "draft-07" in done.stderr


def test_schema_and_options_updates_refuse_bad_input(
    client: TestClient, admin: dict[str, str], data_tenant: DataTenant
) -> None:
    base = f"/admin/v1/clients/{data_tenant.client_id}/datasets"
    assert_problem(put_schema(client, admin, data_tenant.client_id, SCHEMA, "nope"), 404)
    assert_problem(put_schema(client, admin, "no-client", SCHEMA), 404, "client_not_found")
    assert_problem(
        put_schema(client, admin, data_tenant.client_id, {"type": "strnig"}), 400, "invalid_schema"
    )
    for body in ({"options": {"invalid_rows": "skip"}}, {"options": {}, "x": 1}, {}):
        assert_problem(client.put(f"{base}/orders/options", json=body, headers=admin), 400)
    assert_problem(
        client.put(f"{base}/nope/options", json={"options": {}}, headers=admin),
        404,
        "dataset_not_found",
    )
    assert_problem(
        client.put(f"{base}/orders/options", json={"options": {}}, headers=data_tenant.headers),
        403,
        "insufficient_scope",
    )
    dataset = client.get(f"{base}/orders", headers=admin).json()
    assert dataset["schema_version"] == 1
    assert dataset["options"] == data_tenant.dataset["options"]
