"""The tenant-isolation matrix: every operation that names a company's resource, called
by a second company, answers exactly what it answers for a resource that does not exist,
and changes nothing. Plus mass assignment, SQL metacharacters, hostile bodies, and
secrets kept out of error bodies. On SQLite and PostgreSQL.

`test_the_matrix_covers_every_operation` fails when an operation is added to the API
without a row here.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from tests.factories import (
    OPERATOR_ID,
    OPERATOR_SECRET,
    auth,
    create_company,
    create_credential,
    get_token,
)
from tests.files.conftest import FileTenant
from tests.files.test_quarantine import BODY as QUARANTINE_CSV
from tests.http_server import ServerProcess, operated_env
from tests.reliability.conftest import operator_headers
from tests.tenants import Tenant

MISSING_UUID = "00000000-0000-4000-8000-000000000000"
MISSING_CLIENT = "crm-does-not-exist"
EVERY_SCOPE = [
    "workflows:read",
    "workflows:write",
    "data:read",
    "data:write",
    "activities:read",
    "events:read",
    "webhooks:manage",
    "data:erase",
]
# A literal public address needs no DNS; the endpoint is disabled at once, so nothing is
# ever sent to it (no worker claims a disabled endpoint's deliveries).
NEVER_CALLED = "https://192.88.99.1/never"


class Company:
    """A company with one of everything, and a token that holds every company scope."""

    def __init__(self, client: TestClient, admin: dict[str, str], name: str) -> None:
        company_id = create_company(client, admin, name)
        self.files = FileTenant(client, admin, company_id, invalid_rows="quarantine")
        self.workflows = Tenant(client, admin, company_id)
        credential = create_credential(client, admin, company_id, scopes=EVERY_SCOPE)
        token = get_token(client, credential["client_id"], credential["client_secret"])
        self.headers = {"Authorization": f"Bearer {token}"}
        self.client_id = self.files.client_id
        self.category = self.workflows.category()["id"]
        self.template = self.workflows.template(self.category)["id"]
        workflow = self.workflows.workflow(self.template)
        self.workflow = workflow["id"]
        tasks = client.get(
            "/app/v1/workflow_tasks", params={"workflow_id": self.workflow}, headers=self.headers
        ).json()["data"]
        self.task = tasks[0]["id"]
        self.pushed = self.files.push([{"order_id": "S-1", "amount": 1}]).json()["transaction_id"]
        self.file = self.files.upload(QUARANTINE_CSV)["transaction_id"]
        hook = client.post(
            "/platform/v1/webhook_endpoints",
            json={"url": NEVER_CALLED, "event_types": ["*"]},
            headers=self.headers,
        )
        assert hook.status_code == 201, hook.text
        self.hook = hook.json()["id"]
        disabled = client.patch(
            f"/platform/v1/webhook_endpoints/{self.hook}",
            json={"status": "disabled"},
            headers=self.headers,
        )
        assert disabled.status_code == 200
        export = client.post(
            "/platform/v1/exports",
            json={"client_id": self.client_id, "dataset_id": "orders", "format": "csv"},
            headers=self.headers,
        )
        assert export.status_code == 202, export.text
        self.export = export.json()["export_id"]
        erasure = client.post(
            "/platform/v1/erasures",
            json={"subjects": ["nobody@example.com"], "suppress": True},
            headers=self.headers,
        )
        assert erasure.status_code == 202, erasure.text
        self.erasure = erasure.json()["erasure_id"]
        suppressions = client.get("/platform/v1/suppressions", headers=self.headers).json()
        self.suppression = suppressions["data"][0]["suppression_id"]


@dataclass(frozen=True)
class Row:
    """One call naming company A's resource; `{x}` fields are filled from A or from ids
    that do not exist."""

    method: str
    operation: str  # as /openapi.json names the path
    path: str
    params: dict[str, str] | None = None
    body: dict[str, Any] | None = None


MATRIX = [
    Row("GET", "/app/v1/workflow_categories/{id}", "/app/v1/workflow_categories/{category}"),
    Row(
        "PATCH",
        "/app/v1/workflow_categories/{id}",
        "/app/v1/workflow_categories/{category}",
        body={"name": "Taken over"},
    ),
    Row("DELETE", "/app/v1/workflow_categories/{id}", "/app/v1/workflow_categories/{category}"),
    Row("GET", "/app/v1/workflow_templates/{id}", "/app/v1/workflow_templates/{template}"),
    Row(
        "PATCH",
        "/app/v1/workflow_templates/{id}",
        "/app/v1/workflow_templates/{template}",
        body={"name": "Taken over"},
    ),
    Row("DELETE", "/app/v1/workflow_templates/{id}", "/app/v1/workflow_templates/{template}"),
    Row(
        "POST",
        "/app/v1/workflow_templates",
        "/app/v1/workflow_templates",
        body={
            "category_id": "{category}",
            "name": "Mine now",
            "steps": [{"step_id": "a", "name": "A", "type": "review"}],
        },
    ),
    Row(
        "POST",
        "/app/v1/workflows",
        "/app/v1/workflows",
        body={
            "workflow_template_id": "{template}",
            "name": "Mine now",
            "due_date": "2026-12-31T17:00:00Z",
        },
    ),
    Row("GET", "/app/v1/workflows/{workflow_id}", "/app/v1/workflows/{workflow}"),
    Row(
        "PATCH",
        "/app/v1/workflows/{workflow_id}",
        "/app/v1/workflows/{workflow}",
        body={"status": "cancelled"},
    ),
    Row(
        "GET",
        "/app/v1/workflow_tasks",
        "/app/v1/workflow_tasks",
        params={"workflow_id": "{workflow}"},
    ),
    Row(
        "GET",
        "/app/v1/workflows",
        "/app/v1/workflows",
        params={"workflow_template_id": "{template}"},
    ),
    Row(
        "GET",
        "/app/v1/workflow_tasks/actions/{workflow_action_id}",
        "/app/v1/workflow_tasks/actions/{task}",
    ),
    Row(
        "PATCH",
        "/app/v1/workflow_tasks/actions/{workflow_action_id}",
        "/app/v1/workflow_tasks/actions/{task}",
        body={"name": "Taken over"},
    ),
    Row(
        "GET",
        "/platform/v1/transactions/{transaction_id}",
        "/platform/v1/transactions/{pushed}",
    ),
    Row(
        "GET",
        "/platform/v1/transactions/{transaction_id}/quarantine",
        "/platform/v1/transactions/{file}/quarantine",
    ),
    Row(
        "POST",
        "/platform/v1/transactions/{transaction_id}/resubmit",
        "/platform/v1/transactions/{file}/resubmit",
    ),
    Row(
        "GET",
        "/platform/v1/data",
        "/platform/v1/data",
        params={"client_id": "{client_id}", "dataset_id": "orders"},
    ),
    Row(
        "GET",
        "/platform/v1/datasets/{dataset_id}",
        "/platform/v1/datasets/orders",
        params={"client_id": "{client_id}"},
    ),
    Row(
        "GET",
        "/platform/v1/datasets/{dataset_id}/versions/{version}",
        "/platform/v1/datasets/orders/versions/1",
        params={"client_id": "{client_id}"},
    ),
    Row(
        "GET",
        "/platform/v1/datasets/{dataset_id}/transforms",
        "/platform/v1/datasets/orders/transforms",
        params={"client_id": "{client_id}"},
    ),
    Row(
        "POST",
        "/platform/v1/datasets/{dataset_id}/transforms/preview",
        "/platform/v1/datasets/orders/transforms/preview",
        params={"client_id": "{client_id}"},
        body={"records": [{"order_id": "S-1", "amount": 1}]},
    ),
    Row(
        "GET",
        "/platform/v1/data/file_upload_url",
        "/platform/v1/data/file_upload_url",
        params={
            "client_id": "{client_id}",
            "dataset_id": "orders",
            "file_name": "x.csv",
            "content_type": "text/csv",
        },
    ),
    Row(
        "POST",
        "/platform/v1/data/json",
        "/platform/v1/data/json",
        body={"client_id": "{client_id}", "dataset_id": "orders", "data": {"order_id": "X"}},
    ),
    Row(
        "GET",
        "/platform/v1/transactions",
        "/platform/v1/transactions",
        params={"client_id": "{client_id}"},
    ),
    Row(
        "GET",
        "/platform/v1/datasets",
        "/platform/v1/datasets",
        params={"client_id": "{client_id}"},
    ),
    Row(
        "POST",
        "/app/v1/activities/search",
        "/app/v1/activities/search",
        body={"filter": {"resource_id": "{category}"}},
    ),
    Row(
        "GET",
        "/platform/v1/webhook_endpoints/{endpoint_id}",
        "/platform/v1/webhook_endpoints/{hook}",
    ),
    Row(
        "PATCH",
        "/platform/v1/webhook_endpoints/{endpoint_id}",
        "/platform/v1/webhook_endpoints/{hook}",
        body={"description": "Taken over"},
    ),
    Row(
        "DELETE",
        "/platform/v1/webhook_endpoints/{endpoint_id}",
        "/platform/v1/webhook_endpoints/{hook}",
    ),
    Row(
        "POST",
        "/platform/v1/webhook_endpoints/{endpoint_id}/rotate_secret",
        "/platform/v1/webhook_endpoints/{hook}/rotate_secret",
    ),
    Row(
        "GET",
        "/platform/v1/webhook_endpoints/{endpoint_id}/deliveries",
        "/platform/v1/webhook_endpoints/{hook}/deliveries",
    ),
    Row(
        "POST",
        "/platform/v1/webhook_endpoints/{endpoint_id}/test",
        "/platform/v1/webhook_endpoints/{hook}/test",
    ),
    Row(
        "POST",
        "/platform/v1/webhook_endpoints/{endpoint_id}/replay",
        "/platform/v1/webhook_endpoints/{hook}/replay",
        body={"since": "2026-01-01T00:00:00Z"},
    ),
    Row(
        "GET",
        "/platform/v1/data/changes",
        "/platform/v1/data/changes",
        params={"client_id": "{client_id}", "dataset_id": "orders"},
    ),
    Row(
        "POST",
        "/platform/v1/exports",
        "/platform/v1/exports",
        body={"client_id": "{client_id}", "dataset_id": "orders", "format": "parquet"},
    ),
    Row("GET", "/platform/v1/exports/{export_id}", "/platform/v1/exports/{export}"),
    Row("GET", "/platform/v1/exports", "/platform/v1/exports", params={"client_id": "{client_id}"}),
    Row(
        "POST",
        "/platform/v1/erasures",
        "/platform/v1/erasures",
        body={"subjects": ["S-1"], "client_id": "{client_id}", "suppress": True},
    ),
    Row("GET", "/platform/v1/erasures/{erasure_id}", "/platform/v1/erasures/{erasure}"),
    Row(
        "DELETE",
        "/platform/v1/suppressions/{suppression_id}",
        "/platform/v1/suppressions/{suppression}",
    ),
]

# Operations that name no company resource: lists of one's own company (checked below),
# creates without references, the operator API (admin scope), and the public endpoints.
NOT_IN_MATRIX = re.compile(
    r"^(/admin/|/oauth/|/\.well-known/|/healthz|/readyz|/metrics|/uploads/|/downloads/|/hooks/"
    r"|/platform/v1/whoami$|/app/v1/workflow_categories$|/app/v1/workflow_templates$"
    r"|/platform/v1/events$|/platform/v1/webhook_endpoints$|/platform/v1/erasures$"
    r"|/platform/v1/suppressions$)"
)


def _fill(value: Any, ids: dict[str, str]) -> Any:
    if isinstance(value, str):
        return value.format(**ids)
    if isinstance(value, dict):
        return {k: _fill(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, ids) for v in value]
    return value


def _ids(company: Company) -> dict[str, str]:
    return {
        name: getattr(company, name)
        for name in (
            "category",
            "template",
            "workflow",
            "task",
            "pushed",
            "file",
            "client_id",
            "hook",
            "export",
            "erasure",
            "suppression",
        )
    }


MISSING = {
    **dict.fromkeys(
        (
            "category",
            "template",
            "workflow",
            "task",
            "pushed",
            "file",
            "hook",
            "export",
            "erasure",
            "suppression",
        ),
        MISSING_UUID,
    ),
    "client_id": MISSING_CLIENT,
}


def _call(client: TestClient, row: Row, ids: dict[str, str], headers: dict[str, str]) -> Any:
    return client.request(
        row.method,
        _fill(row.path, ids),
        params=_fill(row.params, ids),
        json=_fill(row.body, ids),
        headers=headers,
    )


def _comparable(response: Any, ids: dict[str, str]) -> tuple[int, str]:
    """Status and body with the named ids (A's, or the missing ones) made alike."""
    text = response.text
    for value in sorted(ids.values(), key=len, reverse=True):
        text = text.replace(value, "<id>")
    return response.status_code, re.sub(r'"request_id":"[^"]*"', "", text)


@pytest.fixture
def fresh(client: TestClient, admin: dict[str, str]) -> Company:
    """A company of its own, for a test whose checks count what the company holds."""
    return Company(client, admin, f"A {uuid.uuid4().hex[:6]}")


@pytest.fixture(scope="module")
def a_and_b(client: TestClient) -> tuple[Company, Company]:
    """A and B, made once for this file: its tests check what B is refused or never
    shown, and that A's resources stay as they were (each matrix row checks it), so a
    test that changed them fails there. A pair for each of some 170 tests was the
    largest set-up of the in-process step (0.9 s a pair at load, 60 s in all)."""
    return company_pair(client, auth(get_token(client, OPERATOR_ID, OPERATOR_SECRET)))


def company_pair(client: TestClient, admin: dict[str, str]) -> tuple[Company, Company]:
    suffix = uuid.uuid4().hex[:6]
    return Company(client, admin, f"A {suffix}"), Company(client, admin, f"B {suffix}")


def test_the_matrix_covers_every_operation(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    covered = {(row.method, row.operation) for row in MATRIX}
    missing = [
        f"{method.upper()} {path}"
        for path, operations in spec["paths"].items()
        for method in operations
        if not NOT_IN_MATRIX.match(path) and (method.upper(), path) not in covered
    ]
    assert not missing, f"operations without an isolation row: {missing}"


@pytest.mark.parametrize("row", MATRIX, ids=lambda row: f"{row.method} {row.operation}")
def test_another_company_gets_what_a_missing_resource_gets(
    client: TestClient, a_and_b: tuple[Company, Company], row: Row
) -> None:
    a, b = a_and_b
    before = (
        client.get(f"/app/v1/workflow_categories/{a.category}", headers=a.headers).json(),
        client.get(f"/platform/v1/transactions/{a.file}", headers=a.headers).json(),
    )

    crossed = _call(client, row, _ids(a), b.headers)
    missing = _call(client, row, MISSING, b.headers)

    assert crossed.status_code < 500
    if crossed.status_code == 200 and row.method in ("GET", "POST") and "data" in crossed.json():
        # a list or search filtered by another company's id: nothing of it, ever
        assert crossed.json()["data"] == [] and crossed.json()["total_entries"] == 0
        assert missing.json()["data"] == []
    else:
        assert crossed.status_code in (400, 403, 404), crossed.text
        assert _comparable(crossed, _ids(a)) == _comparable(missing, MISSING)
    # and A's resources are as they were
    after = (
        client.get(f"/app/v1/workflow_categories/{a.category}", headers=a.headers).json(),
        client.get(f"/platform/v1/transactions/{a.file}", headers=a.headers).json(),
    )
    assert after == before
    for path in (
        f"/app/v1/workflow_templates/{a.template}",
        f"/app/v1/workflows/{a.workflow}",
        f"/app/v1/workflow_tasks/actions/{a.task}",
    ):
        assert client.get(path, headers=a.headers).status_code == 200


def test_own_lists_hold_nothing_of_another_company(
    client: TestClient, a_and_b: tuple[Company, Company]
) -> None:
    a, b = a_and_b
    everything_of_a = [*_ids(a).values(), a.workflows.company_id]
    for path in (
        "/app/v1/workflow_categories",
        "/app/v1/workflow_templates",
        "/app/v1/workflows",
        "/platform/v1/transactions",
        "/platform/v1/datasets",
        "/platform/v1/webhook_endpoints",
        "/platform/v1/erasures",
        "/platform/v1/suppressions",
    ):
        listed = client.get(path, params={"page_size": 100}, headers=b.headers)
        assert listed.status_code == 200, listed.text
        assert listed.json()["data"], path  # B's own things are listed
        shown = json.dumps(listed.json())
        assert not [value for value in everything_of_a if value in shown], path
    search = client.post("/app/v1/activities/search", json={"page_size": 100}, headers=b.headers)
    assert search.json()["data"]
    shown = json.dumps(search.json())
    assert not [value for value in everything_of_a if value in shown]
    events = client.get("/platform/v1/events", params={"limit": 1000}, headers=b.headers).json()
    assert events["data"]
    shown = json.dumps(events)
    assert not [value for value in everything_of_a if value in shown]


@pytest.mark.parametrize(
    "widening",
    [
        {"company_id": MISSING_UUID},
        {"resource_id": {"$ne": MISSING_UUID}},
        {"resource_id": {"$in": []}},
        {"$or": [{"action": "create"}]},
        {"author_id": {"$regex": ".*"}},
        {"timestamp": {"$exists": True}},
    ],
)
def test_activity_search_cannot_be_widened(
    client: TestClient, a_and_b: tuple[Company, Company], widening: dict[str, Any]
) -> None:
    _, b = a_and_b
    response = client.post(
        "/app/v1/activities/search", json={"filter": widening}, headers=b.headers
    )
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"


@pytest.mark.parametrize("member", ["id", "company_id", "author_id", "created_at", "created_by"])
@pytest.mark.parametrize(
    "path,body",
    [
        ("/app/v1/workflow_categories", {"name": "C"}),
        (
            "/app/v1/workflow_templates",
            {"category_id": "{category}", "name": "T", "steps": []},
        ),
        (
            "/app/v1/workflows",
            {"workflow_template_id": "{template}", "name": "W", "due_date": "2026-12-31T00:00:00Z"},
        ),
    ],
)
def test_server_set_members_cannot_be_assigned(
    client: TestClient, a_and_b: tuple[Company, Company], member: str, path: str, body: Any
) -> None:
    a, b = a_and_b
    value = b.workflows.company_id if member == "company_id" else MISSING_UUID
    if member == "created_at":
        value = "2020-01-01T00:00:00Z"
    response = client.post(path, json=_fill(body, _ids(a)) | {member: value}, headers=a.headers)
    assert response.status_code == 400, response.text
    assert member in response.text


SQL_METACHARACTERS = [
    "' OR '1'='1",
    "'; DROP TABLE workflow_categories; --",
    '" OR ""="',
    "%",
    "_",
    "\\",
    "%' --",
    "\x00",
]


@pytest.mark.parametrize("text", SQL_METACHARACTERS)
def test_sql_metacharacters_are_only_text(client: TestClient, fresh: Company, text: str) -> None:
    a = fresh
    for params in ({"name": text}, {"description": text}):
        listed = client.get("/app/v1/workflow_categories", params=params, headers=a.headers)
        assert listed.status_code in (200, 400), listed.text
        if listed.status_code == 200:
            assert listed.json()["data"] == []  # no category holds these
    for path, params in (
        ("/platform/v1/data", {"client_id": text, "dataset_id": text}),
        ("/platform/v1/datasets/orders", {"client_id": text}),
        ("/platform/v1/transactions", {"client_id": text}),
    ):
        answer = client.get(path, params=params, headers=a.headers)
        assert answer.status_code in (400, 403, 404), answer.text
    created = client.post("/app/v1/workflow_categories", json={"name": text}, headers=a.headers)
    if "\x00" in text:  # no database stores NUL in text: refused, naming the member
        assert created.status_code == 400, created.text
        assert created.json()["errors"][0]["field"] == "/name"
    else:
        assert created.status_code == 201, created.text
        assert created.json()["name"] == text
    # the table is still there, and holds what it held plus this one
    listed = client.get("/app/v1/workflow_categories", headers=a.headers).json()
    assert listed["total_entries"] == (1 if "\x00" in text else 2)
    # records are stored as they come, and a refusal quotes them safely; a string holding
    # NUL fails like a record that fails its schema (contract section 15: `characters`)
    stored = a.files.push([{"order_id": text, "amount": 1}])
    if "\x00" in text:
        assert stored.status_code == 422, stored.text
        assert stored.json()["errors"][0]["keyword"] == "characters"
        assert stored.json()["errors"][0]["path"] == "/order_id"
        return
    assert stored.status_code == 200, stored.text
    refused = a.files.push([{"order_id": "R", "amount": text}])
    assert refused.status_code == 422, refused.text
    assert (
        a.files.records(transaction_id=stored.json()["transaction_id"])[0]["data"]["order_id"]
        == text
    )


def _json_operations(client: TestClient) -> list[tuple[str, str]]:
    spec = client.get("/openapi.json").json()
    return [
        (method.upper(), path)
        for path, operations in spec["paths"].items()
        for method, operation in operations.items()
        if "application/json" in operation.get("requestBody", {}).get("content", {})
        # tokens take forms too; uploads and storage hooks are checked by signature first
        and not path.startswith(("/oauth/", "/hooks/", "/uploads/"))
    ]


def test_hostile_bodies_to_every_json_operation(
    client: TestClient, a_and_b: tuple[Company, Company], admin: dict[str, str]
) -> None:
    a, _ = a_and_b
    ids = _ids(a) | {"id": a.category, "company_id": a.workflows.company_id}
    deep = "[" * 5000 + "]" * 5000
    oversized = '{"x": "' + "a" * (6 * 1024 * 1024) + '"}'
    operations = _json_operations(client)
    assert len(operations) >= 10
    for method, path in operations:
        concrete = re.sub(r"\{(\w+)\}", lambda m: ids.get(m.group(1), "orders"), path)
        headers = (admin if path.startswith("/admin/") else a.headers) | {
            "Content-Type": "application/json"
        }
        for body, expected in ((deep, {400, 422}), (oversized, {413}), ("{", {400})):
            answer = client.request(method, concrete, content=body, headers=headers)
            assert answer.status_code in expected, (method, path, answer.status_code, answer.text)
            assert answer.headers["content-type"] == "application/problem+json"


def test_secrets_are_not_echoed_in_error_bodies(client: TestClient) -> None:
    secret = "s3cr3t-" + uuid.uuid4().hex
    refused = client.post(
        "/oauth/token",
        json={"client_id": "nobody", "client_secret": secret, "audience": "headwater-api"},
    )
    assert refused.status_code == 401
    assert secret not in refused.text
    forged = "eyJhbGciOiJSUzI1NiJ9." + uuid.uuid4().hex + ".sig"
    rejected = client.get("/platform/v1/whoami", headers={"Authorization": f"Bearer {forged}"})
    assert rejected.status_code == 401
    assert forged not in rejected.text


@pytest.mark.http
def test_tokens_and_secrets_are_not_logged(tmp_path: Path) -> None:
    """A real server at INFO: tokens, secrets and presigned signatures stay out of its log."""
    env = operated_env(tmp_path, HEADWATER_LOG_LEVEL="DEBUG")
    server = ServerProcess(env, log=tmp_path / "server.log").start()
    wrong = "wrong-" + uuid.uuid4().hex
    try:
        admin = operator_headers(server.url)
        token = admin["Authorization"].removeprefix("Bearer ")
        with httpx.Client(base_url=server.url) as http:
            company = http.post("/admin/v1/companies", json={"name": "L"}, headers=admin).json()
            credential = http.post(
                f"/admin/v1/companies/{company['id']}/credentials",
                json={"name": "l", "scopes": ["data:read"]},
                headers=admin,
            ).json()
            http.post(
                "/oauth/token",
                data={"grant_type": "client_credentials", "client_id": "x", "client_secret": wrong},
            )
            http.post(
                "/oauth/token",
                json={
                    "client_id": credential["client_id"],
                    "client_secret": credential["client_secret"],
                    "audience": "headwater-api",
                },
            )
            http.get("/platform/v1/whoami", headers={"Authorization": f"Bearer {token}x"})
            http.put("/uploads/k?expires=1&max_bytes=1&signature=deadbeefcafe", content=b"x")
    finally:
        server.stop()
    log = (tmp_path / "server.log").read_text()
    assert "request" in log  # the access log was written
    for secret in (token, OPERATOR_SECRET, credential["client_secret"], wrong, "deadbeefcafe"):
        assert secret not in log
