"""POST /platform/v1/data/json (contract section 4): answers, atomicity, every bad input."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.factories import (
    assert_problem,
    auth,
    create_credential,
    create_ingestion_client,
    get_token,
)
from tests.ingestion.conftest import DataTenant, order, register_dataset

PUSH = "/platform/v1/data/json"


def raw(tenant: DataTenant, body: bytes, content_type: str = "application/json") -> Any:
    headers = tenant.headers | {"Content-Type": content_type}
    return tenant.client.post(PUSH, content=body, headers=headers)


def nothing_stored(tenant: DataTenant) -> None:
    assert tenant.records() == []


def test_single_record_answer_shape(data_tenant: DataTenant) -> None:
    response = data_tenant.push(order(1))
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {
        "transaction_id",
        "status",
        "client_id",
        "dataset_id",
        "schema_version",
        "records_received",
        "records_accepted",
        "received_at",
    }
    assert body["status"] == "completed"
    assert (body["client_id"], body["dataset_id"]) == (data_tenant.client_id, "orders")
    assert (body["records_received"], body["records_accepted"], body["schema_version"]) == (1, 1, 1)
    [stored] = data_tenant.records()
    assert stored["transaction_id"] == body["transaction_id"]
    assert stored["ingested_at"] == body["received_at"]
    assert stored["data"] == order(1) | {"channel": "web"}


def test_batch_is_stored_in_order(data_tenant: DataTenant) -> None:
    response = data_tenant.push([order(i) for i in range(250)])
    assert response.json()["records_accepted"] == 250
    stored = [r["data"]["order_id"] for r in data_tenant.records(page_size=100, page=1)]
    assert stored == [f"A-{i}" for i in range(100, 200)]


def test_records_are_normalised_before_validation(
    client: TestClient, admin: dict[str, str], company: str
) -> None:
    tenant = DataTenant(client, admin, company, coerce_types=True, drop_unknown_fields=True)
    response = tenant.push(
        {
            "order_id": " A-1 ",
            "amount": "12.50",
            "quantity": "3",
            "paid": "true",
            "placed_at": "2026-01-02T10:00:00+01:00",
            "utm": "x",
            "channel": "",
        }
    )
    assert response.status_code == 200, response.text
    assert tenant.records()[0]["data"] == {
        "order_id": "A-1",
        "amount": 12.5,
        "quantity": 3,
        "paid": True,
        "placed_at": "2026-01-02T09:00:00.000Z",
        "channel": "",
    }


def test_json_pushes_do_not_coerce_by_default(data_tenant: DataTenant) -> None:
    problem = assert_problem(data_tenant.push(order(1, quantity="3")), 422)
    assert problem["errors"] == [
        {
            "record": 0,
            "path": "/quantity",
            "keyword": "type",
            "message": '"3" is not of type "integer"',
        }
    ]


def test_invalid_batch_stores_nothing_and_lists_every_error(data_tenant: DataTenant) -> None:
    batch = [order(0), {"order_id": "A-1"}, order(2, amount=-1, quantity=1.5), order(3)]
    problem = assert_problem(data_tenant.push(batch), 422, "validation_failed")
    assert problem["error_count"] == 3
    assert [(e["record"], e["path"], e["keyword"]) for e in problem["errors"]] == [
        (1, "/amount", "required"),
        (2, "/amount", "minimum"),
        (2, "/quantity", "type"),
    ]
    nothing_stored(data_tenant)
    transaction = data_tenant.client.get(
        f"/platform/v1/transactions/{problem['transaction_id']}", headers=data_tenant.headers
    ).json()
    assert transaction["status"] == "rejected"
    assert (transaction["records_received"], transaction["records_accepted"]) == (4, 0)
    assert transaction["records_rejected"] == 2
    assert transaction["error_count"] == 3
    assert [e["path"] for e in transaction["errors"]] == ["/amount", "/amount", "/quantity"]


def test_at_most_100_errors_listed_with_the_total(data_tenant: DataTenant) -> None:
    problem = assert_problem(data_tenant.push([{"amount": "x"}] * 80), 422)
    assert problem["error_count"] == 160
    assert len(problem["errors"]) == 100


def test_token_without_the_client_is_403_same_as_unknown_client(
    client: TestClient,
    admin: dict[str, str],
    company: str,
    data_tenant: DataTenant,
    other_data_tenant: DataTenant,
) -> None:
    second = create_ingestion_client(client, admin, company)
    register_dataset(client, admin, second)
    limited = create_credential(
        client, admin, company, scopes=["data:write", "data:read"], client_ids=[second]
    )
    headers = auth(get_token(client, limited["client_id"], limited["client_secret"]))
    bodies = []
    for client_id, used in (
        (data_tenant.client_id, headers),
        (other_data_tenant.client_id, data_tenant.headers),
        ("no-such-client", data_tenant.headers),
    ):
        response = client.post(
            PUSH,
            json={"client_id": client_id, "dataset_id": "orders", "data": order()},
            headers=used,
        )
        problem = assert_problem(response, 403, "client_not_allowed")
        bodies.append(problem["detail"].replace(client_id, "X"))
    assert len(set(bodies)) == 1
    nothing_stored(data_tenant)
    assert other_data_tenant.records() == []


def test_unknown_dataset_404(data_tenant: DataTenant) -> None:
    assert_problem(data_tenant.push(order(), dataset_id="nope"), 404, "dataset_not_found")


def test_scope_data_write_needed(
    client: TestClient, admin: dict[str, str], company: str, data_tenant: DataTenant
) -> None:
    reader = create_credential(client, admin, company, scopes=["data:read"])
    headers = auth(get_token(client, reader["client_id"], reader["client_secret"]))
    response = client.post(PUSH, json=data_tenant.envelope(order()), headers=headers)
    assert_problem(response, 403, "insufficient_scope")
    assert_problem(client.post(PUSH, json=data_tenant.envelope(order())), 401)


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "application/x-www-form-urlencoded",
        "application/json; charset=latin-1",
        "application/jsonx",
        "",
    ],
)
def test_wrong_content_type_415(data_tenant: DataTenant, content_type: str) -> None:
    body = json.dumps(data_tenant.envelope(order())).encode()
    assert_problem(raw(data_tenant, body, content_type), 415, "unsupported_media_type")
    nothing_stored(data_tenant)


def test_json_with_charset_utf8_is_fine(data_tenant: DataTenant) -> None:
    body = json.dumps(data_tenant.envelope(order())).encode()
    assert raw(data_tenant, body, "application/json; charset=UTF-8").status_code == 200


def test_batch_over_the_limit_413(data_tenant: DataTenant) -> None:
    response = data_tenant.push([{"order_id": "x", "amount": 1}] * 1001)
    assert_problem(response, 413, "batch_too_large")
    nothing_stored(data_tenant)


def test_body_over_5_mib_413(data_tenant: DataTenant) -> None:
    big = [order(i, order_id="x" * 6400) for i in range(1000)]
    body = json.dumps(data_tenant.envelope(big)).encode()
    assert len(body) >= 6 * 1024 * 1024
    assert_problem(raw(data_tenant, body), 413, "payload_too_large")
    nothing_stored(data_tenant)


ENVELOPE_CASES: list[tuple[Any, str]] = [
    ({"client_id": "C", "dataset_id": "orders"}, "/data"),
    ({"dataset_id": "orders", "data": {}}, "/client_id"),
    ({"client_id": "C", "data": {}}, "/dataset_id"),
    ({"client_id": "C", "dataset_id": "orders", "data": "text"}, "/data"),
    ({"client_id": "C", "dataset_id": "orders", "data": 42}, "/data"),
    ({"client_id": "C", "dataset_id": "orders", "data": None}, "/data"),
    ({"client_id": "C", "dataset_id": "orders", "data": []}, "/data"),
    ({"client_id": "C", "dataset_id": "orders", "data": [order(), 1]}, "/data/1"),
    ({"client_id": "C", "dataset_id": "orders", "data": [order(), [order()]]}, "/data/1"),
    ({"client_id": "C", "dataset_id": "orders", "data": {}, "extra": 1}, "/extra"),
    ({"client_id": 7, "dataset_id": "orders", "data": {}}, "/client_id"),
    ({"client_id": "C", "dataset_id": "bad id!", "data": {}}, "/dataset_id"),
    ([order()], ""),
]


@pytest.mark.parametrize(("envelope", "field"), ENVELOPE_CASES)
def test_envelope_problems_400(data_tenant: DataTenant, envelope: Any, field: str) -> None:
    if isinstance(envelope, dict) and envelope.get("client_id") == "C":
        envelope["client_id"] = data_tenant.client_id
    response = data_tenant.client.post(PUSH, json=envelope, headers=data_tenant.headers)
    problem = assert_problem(response, 400, "invalid_envelope")
    assert field in [e["field"] for e in problem["errors"]]
    nothing_stored(data_tenant)


BAD_JSON: list[tuple[bytes, str]] = [
    (
        b'{"client_id": "C", "dataset_id": "orders", "data": {"amount": 1, "amount": 2}}',
        "duplicate",
    ),
    (b'{"client_id": "C", "dataset_id": "orders", "data": {"amount": NaN}}', "NaN"),
    (b'{"client_id": "C", "dataset_id": "orders", "data": {"amount": Infinity}}', "Infinity"),
    (b'{"client_id": "C", "dataset_id": "orders", "data": {"amount": 1e999}}', "double"),
    (
        b'{"client_id": "C", "dataset_id": "orders", "data": {"quantity": 123456789012345678901}}',
        "64-bit",
    ),
    (b'{"client_id": "C", "dataset_id": "orders", "data": {"order_id": "\xc3\x28"}}', "UTF-8"),
    (
        b'{"client_id": "C", "dataset_id": "orders", "data": {"a": '
        + b"[" * 40
        + b"]" * 40
        + b"}}",
        "deeper than 32",
    ),
    (b'{"client_id": "C", "dataset_id": "orders", "data": {', "Expecting"),
    (b'{"client_id": "C", "dataset_id": "orders", "data": {"order_id": "\\udc00"}}', "surrogate"),
]


@pytest.mark.parametrize(("body", "says"), BAD_JSON)
def test_unacceptable_json_400(data_tenant: DataTenant, body: bytes, says: str) -> None:
    body = body.replace(b'"C"', json.dumps(data_tenant.client_id).encode())
    problem = assert_problem(raw(data_tenant, body), 400, "malformed_json")
    assert says in problem["detail"]
    nothing_stored(data_tenant)
    assert data_tenant.transactions()["total_entries"] == 0


def test_wrong_types_and_missing_required_are_422(data_tenant: DataTenant) -> None:
    problem = assert_problem(
        data_tenant.push([{"order_id": 5, "amount": "ten", "paid": "yes"}, {}]), 422
    )
    assert {(e["record"], e["path"], e["keyword"]) for e in problem["errors"]} == {
        (0, "/order_id", "type"),
        (0, "/amount", "type"),
        (0, "/paid", "type"),
        (1, "/order_id", "required"),
        (1, "/amount", "required"),
    }
    nothing_stored(data_tenant)


def test_oversized_record_values_validate_as_usual(data_tenant: DataTenant) -> None:
    response = data_tenant.push(order(1, quantity=2**63 - 1, amount=1.7e308))
    assert response.status_code == 200, response.text
    assert data_tenant.records()[0]["data"]["quantity"] == 2**63 - 1


def test_format_errors_name_what_was_expected(data_tenant: DataTenant) -> None:
    response = data_tenant.push(
        [{"order_id": "A", "amount": 1, "customer-email": "nope", "placed_at": "yesterday"}]
    )
    assert response.status_code == 422, response.text
    messages = {e["path"]: e["message"] for e in response.json()["errors"]}
    assert messages["/customer-email"] == '"nope" is not an email address'
    assert messages["/placed_at"].startswith('"yesterday" is not a date-time (ISO 8601')
