"""Health, readiness, metrics, OpenAPI and the offline docs page."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from headwater.config import Settings
from headwater.kit.memory import YOUNG_COLLECTION
from headwater.main import create_app
from tests.factories import auth


def test_healthz_and_readyz(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"]["database"] == "ok"


def test_metrics_count_requests_by_route_and_status(client: TestClient, company_token: str) -> None:
    client.get("/platform/v1/whoami", headers=auth(company_token))
    client.get("/platform/v1/whoami")
    text = client.get("/metrics").text
    assert (
        'headwater_http_requests_total{method="GET",route="/platform/v1/whoami",status="200"}'
        in text
    )
    assert 'route="/platform/v1/whoami",status="401"' in text
    assert (
        'headwater_http_request_duration_seconds_bucket{le="0.005",method="GET",'
        'route="/platform/v1/whoami"}' in text
    )


def test_unmatched_paths_share_one_metrics_label(client: TestClient) -> None:
    client.get("/random/a1")
    client.get("/random/b2")
    text = client.get("/metrics").text
    assert "/random/a1" not in text
    assert 'route="unmatched",status="404"' in text


def _members(node: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every object member's schema in a schema document, with where it is."""
    if isinstance(node, list):
        for n, item in enumerate(node):
            yield from _members(item, f"{where}[{n}]")
    elif isinstance(node, dict):
        for name, member in (node.get("properties") or {}).items():
            yield f"{where}.{name}", member
        for key, value in node.items():
            if key not in ("example", "examples", "default"):
                yield from _members(value, f"{where}/{key}")


def test_every_text_member_has_an_example_for_the_docs_page(client: TestClient) -> None:
    """Without one, the docs page makes a value up from the no-NUL pattern."""
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    missing = [
        where
        for where, member in _members(schemas)
        if "^[^\\u0000]*$" in json.dumps(member) and not {"example", "examples"} & set(member)
    ]
    assert missing == []


def test_openapi_is_complete(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    for path in [
        "/oauth/token",
        "/.well-known/jwks.json",
        "/admin/v1/companies",
        "/admin/v1/companies/{company_id}/clients",
        "/admin/v1/companies/{company_id}/credentials",
        "/admin/v1/credentials/{client_id}",
        "/healthz",
        "/readyz",
        "/metrics",
        "/app/v1/workflow_categories",
        "/app/v1/workflow_categories/{id}",
        "/app/v1/workflow_templates",
        "/app/v1/workflow_templates/{id}",
        "/app/v1/workflows",
        "/app/v1/workflows/{workflow_id}",
        "/app/v1/workflow_tasks",
        "/app/v1/workflow_tasks/actions/{workflow_action_id}",
        "/app/v1/activities/search",
        "/platform/v1/data/json",
        "/platform/v1/data",
        "/platform/v1/transactions",
        "/platform/v1/transactions/{transaction_id}",
        "/platform/v1/datasets",
        "/platform/v1/datasets/{dataset_id}",
        "/admin/v1/clients/{client_id}/datasets",
        "/admin/v1/clients/{client_id}/datasets/{dataset_id}/schema",
        "/admin/v1/clients/{client_id}/datasets/{dataset_id}/versions",
        "/admin/v1/companies/{company_id}/sftp_accounts",
        "/admin/v1/sftp_accounts",
        "/admin/v1/sftp_accounts/{username}",
        "/admin/v1/sftp_accounts/{username}/public_keys",
        "/admin/v1/clients/{client_id}/datasets/{dataset_id}/inboxes",
        "/admin/v1/inboxes",
        "/admin/v1/inboxes/{inbox_id}",
    ]:
        assert path in paths, path
    schemes = spec["components"]["securitySchemes"]
    assert (
        schemes["oauth2"]["flows"]["clientCredentials"]["tokenUrl"]
        == "/oauth/token?audience=headwater-api"
    )
    for path, operations in paths.items():
        for method, operation in operations.items():
            responses = operation["responses"]
            # 422 is only "records failed their schema", never FastAPI's request validation
            assert ("422" in responses) == (path == "/platform/v1/data/json"), (path, method)
            for status, response in responses.items():
                if status.startswith(("4", "5")) and path != "/oauth/token":
                    example = response["content"]["application/problem+json"]["example"]
                    assert example["status"] == int(status)
            if operation.get("security"):
                assert {"401", "403", "429"} <= set(responses), (path, method)
    create = paths["/admin/v1/companies"]["post"]
    assert create["requestBody"]["content"]["application/json"]["schema"]
    search = paths["/app/v1/activities/search"]["post"]
    body_schema = search["requestBody"]["content"]["application/json"]["schema"]
    assert body_schema  # with its example request
    assert spec["components"]["schemas"]["ActivitySearch"]["examples"]
    listing = paths["/app/v1/workflow_categories"]["get"]
    names = {p["name"] for p in listing["parameters"]}
    assert {"name", "description", "page", "page_size", "sort_by", "sort_direction"} <= names
    assert "409" in paths["/app/v1/workflows/{workflow_id}"]["patch"]["responses"]
    # found by schemathesis: an unknown workflow_id answers 404, which was not documented
    assert "404" in paths["/app/v1/workflow_tasks"]["get"]["responses"]
    push = paths["/platform/v1/data/json"]["post"]
    assert {"400", "403", "404", "409", "413", "415", "422"} <= set(push["responses"])
    assert push["requestBody"]["content"]["application/json"]["schema"]["properties"]["data"]
    assert "Idempotency-Key" in {p["name"] for p in push["parameters"]}
    records = paths["/platform/v1/data"]["get"]["responses"]["200"]["content"]
    assert {"application/json", "application/x-ndjson"} <= set(records)
    token = paths["/oauth/token"]["post"]
    assert {"application/json", "application/x-www-form-urlencoded"} <= set(
        token["requestBody"]["content"]
    )
    assert {"400", "401", "403"} <= set(token["responses"])


def test_docs_page_is_served_with_its_own_assets(client: TestClient) -> None:
    page = client.get("/docs")
    assert page.status_code == 200
    assert "/docs/assets/swagger-ui-bundle.js" in page.text
    assert "cdn" not in page.text.lower()
    js = client.get("/docs/assets/swagger-ui-bundle.js")
    assert js.status_code == 200 and len(js.content) > 100_000
    assert client.get("/docs/assets/swagger-ui.css").status_code == 200


@pytest.mark.usefixtures("thawed")
def test_a_running_app_collects_young_objects_less_often_then_restores_the_default(
    settings: Settings,
) -> None:
    before = gc.get_threshold()
    frozen = gc.get_freeze_count()  # another app of this test process may run
    with TestClient(create_app(settings)) as client:
        assert client.get("/healthz").status_code == 200
        assert gc.get_threshold()[0] == YOUNG_COLLECTION
        assert gc.get_freeze_count() > 0  # what start-up loaded is not walked
    assert gc.get_threshold() == before
    assert bool(gc.get_freeze_count()) == bool(frozen)  # the running one's freeze holds
