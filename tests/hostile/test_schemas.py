"""Hostile schemas (contract section 15): references confined to the schema, size and cost
bounds, and a resolver that refuses whatever reaches it."""

from __future__ import annotations

import http.server
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from starlette.testclient import TestClient

from headwater.ingestion import validation
from tests.factories import assert_problem, create_ingestion_client
from tests.ingestion.conftest import DataTenant
from tests.loopback import serving


class _Counting(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Counting.hits.append(self.path)
        body = b'{"type": "string", "enum": ["SECRET-FROM-REMOTE"]}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def remote() -> Iterator[str]:
    """A schema host on loopback that records every request it gets."""
    _Counting.hits = []
    with serving(_Counting) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def client_id(client: TestClient, admin: dict[str, str], company: str) -> str:
    return create_ingestion_client(client, admin, company)


def _register(client: TestClient, admin: dict[str, str], client_id: str, schema: Any) -> Any:
    return client.post(
        f"/admin/v1/clients/{client_id}/datasets",
        json={"dataset_id": "hostile", "schema": schema},
        headers=admin,
    )


def test_a_remote_ref_is_refused_naming_its_pointer_and_nothing_is_fetched(
    client: TestClient, admin: dict[str, str], client_id: str, remote: str
) -> None:
    schema = {"properties": {"a": {"$ref": f"{remote}/x.json"}}}
    body = assert_problem(_register(client, admin, client_id, schema), 400, "invalid_schema")
    assert body["errors"][0]["path"] == "/properties/a/$ref"
    assert body["errors"][0]["field"] == "/schema/properties/a/$ref"
    assert "points outside the schema" in body["detail"]
    update = client.put(
        f"/admin/v1/clients/{client_id}/datasets/hostile/schema",
        json={"schema": schema},
        headers=admin,
    )
    assert update.status_code in (400, 404)
    assert _Counting.hits == []


def test_a_file_ref_is_refused_and_its_content_never_appears(
    client: TestClient, admin: dict[str, str], client_id: str, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"type": "string", "enum": ["LOCAL-FILE-CONTENT"]}')
    schema = {"definitions": {"x": {"items": [{"$ref": secret.as_uri()}]}}}
    response = _register(client, admin, client_id, schema)
    body = assert_problem(response, 400, "invalid_schema")
    assert body["errors"][0]["path"] == "/definitions/x/items/0/$ref"
    assert "LOCAL-FILE-CONTENT" not in response.text


@pytest.mark.parametrize("ref", ["other.json", "urn:example:x", "//evil.example/x", "x#/a"])
def test_relative_and_other_id_refs_are_refused(
    client: TestClient, admin: dict[str, str], client_id: str, ref: str
) -> None:
    schema = {"$id": "http://example.com/root.json", "properties": {"a": {"$ref": ref}}}
    body = assert_problem(_register(client, admin, client_id, schema), 400, "invalid_schema")
    assert body["errors"][0]["path"] == "/properties/a/$ref"


def test_references_inside_the_schema_work_and_data_that_looks_like_a_ref_is_data(
    client: TestClient, admin: dict[str, str], company: str
) -> None:
    tenant = DataTenant(client, admin, company)
    schema = {
        "definitions": {"code": {"type": "string", "pattern": "^[A-Z]+$"}},
        "type": "object",
        "properties": {
            "code": {"$ref": "#/definitions/code"},
            "enum": {"enum": [{"$ref": "http://127.0.0.1:9/not-a-schema"}, "plain"]},
        },
    }
    response = _register(client, admin, tenant.client_id, schema)
    assert response.status_code == 201, response.text
    ok = tenant.push({"code": "ABC", "enum": "plain"}, dataset_id="hostile")
    assert ok.status_code == 200, ok.text
    bad = tenant.push({"code": "abc"}, dataset_id="hostile")
    body = assert_problem(bad, 422)
    assert body["errors"][0]["path"] == "/code"


def test_a_schema_over_the_byte_limit_answers_413(
    client: TestClient, admin: dict[str, str], client_id: str
) -> None:
    schema = {"description": "x" * 530_000}
    body = assert_problem(_register(client, admin, client_id, schema), 413, "schema_too_large")
    assert "HEADWATER_MAX_SCHEMA_BYTES" in body["detail"]


def test_an_enum_over_the_cost_bound_is_refused(
    client: TestClient, admin: dict[str, str], client_id: str
) -> None:
    schema = {"properties": {"a": {"enum": list(range(validation.MAX_ENUM_VALUES + 1))}}}
    body = assert_problem(_register(client, admin, client_id, schema), 400, "invalid_schema")
    assert body["errors"][0]["path"] == "/properties/a/enum"
    assert "at most 10000 values" in body["errors"][0]["message"]


def test_the_compiled_validator_refuses_to_resolve_anything_outside(remote: str) -> None:
    """Even a schema that never went through registration (one stored earlier) compiles
    with a resolver that refuses: it fails to compile and nothing is fetched."""
    with pytest.raises(validation.SchemaUnusable, match="outside the schema"):
        validation.compile_schema({"properties": {"a": {"$ref": f"{remote}/x.json"}}})
    assert _Counting.hits == []


@pytest.mark.parametrize("pattern", ["^(a+)+$", "^(a|a)+(?=b)$", "^(a+)+\\1$"])
def test_a_catastrophic_pattern_answers_instead_of_backtracking(pattern: str) -> None:
    """Exponential in a backtracking engine; here linear or cut at the backtrack limit
    (the suite's timeout would stop a hang)."""
    validator = validation.compile_schema({"type": "string", "pattern": pattern})
    assert validator.is_valid("a" * 4096 + "!") is False


def test_a_stored_schema_that_reaches_outside_answers_409_not_500(
    client: TestClient, admin: dict[str, str], company: str, remote: str
) -> None:
    """A schema registered before references were confined (stored as it was) is never
    resolved: pushes to it answer 409 `schema_unusable`, and nothing is fetched."""
    from sqlalchemy import update

    from headwater.ingestion.models import Dataset, DatasetSchema

    tenant = DataTenant(client, admin, company)
    runtime = client.app.state.runtime  # type: ignore[attr-defined]
    with runtime.db.begin() as connection:
        dataset_pk = (
            connection.execute(
                Dataset.__table__.select().where(  # type: ignore[attr-defined]
                    Dataset.client_id == tenant.client_id, Dataset.dataset_id == "orders"
                )
            )
            .one()
            .id
        )
        connection.execute(
            update(DatasetSchema)
            .where(DatasetSchema.dataset_pk == dataset_pk)
            .values(schema={"properties": {"a": {"$ref": f"{remote}/x.json"}}})
        )
    response = tenant.push([{"order_id": "A", "amount": 1}])
    problem = assert_problem(response, 409, "schema_unusable")
    assert "register a new version" in problem["detail"]
    assert _Counting.hits == []
