"""Workflow configuration API (interface document 2.2-2.5, 3, 4.4-4.7; contract section 7)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.factories import assert_problem, auth, create_credential, get_token
from tests.tenants import Tenant

ISO_MS_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
CATEGORY_FIELDS = {
    "id",
    "company_id",
    "name",
    "description",
    "created_at",
    "updated_at",
    "created_by",
    "updated_by",
}
TASK_FIELDS = {
    "id",
    "company_id",
    "workflow_id",
    "step_id",
    "name",
    "description",
    "type",
    "created_at",
}
WORKFLOW_FIELDS = {
    "id",
    "name",
    "description",
    "company_id",
    "workflow_template_id",
    "status",
    "due_date",
    "notification_date",
    "created_at",
    "updated_at",
    "created_by",
    "updated_by",
}


# --- categories (4.4, 4.5) ---------------------------------------------------------------


def test_category_has_the_fields_of_2_2(tenant: Tenant) -> None:
    created = tenant.category("Onboarding", "New suppliers")
    assert set(created) == CATEGORY_FIELDS
    assert created["company_id"] == tenant.company_id
    assert created["created_by"] == created["updated_by"] == tenant.author_id
    assert ISO_MS_Z.match(created["created_at"]) and ISO_MS_Z.match(created["updated_at"])
    response = tenant.client.get(
        f"/app/v1/workflow_categories/{created['id']}", headers=tenant.headers
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == created


def test_another_companys_or_a_missing_category_is_404(
    tenant: Tenant, other_tenant: Tenant
) -> None:
    theirs = other_tenant.category()
    for category_id in (theirs["id"], str(uuid.uuid4())):
        for method in ("GET", "PATCH", "DELETE"):
            response = tenant.client.request(
                method,
                f"/app/v1/workflow_categories/{category_id}",
                json={"name": "x"},
                headers=tenant.headers,
            )
            assert_problem(response, 404, "workflow_category_not_found")


@pytest.mark.parametrize(
    "path",
    [
        "/app/v1/workflow_categories/nope",
        "/app/v1/workflow_tasks/actions/12",
        "/app/v1/workflows/not-a-uuid",
        "/app/v1/workflow_templates/x",
    ],
)
def test_path_id_that_is_not_a_uuid_is_400(tenant: Tenant, path: str) -> None:
    problem = assert_problem(
        tenant.client.get(path, headers=tenant.headers), 400, "invalid_parameter"
    )
    assert problem["errors"][0]["location"] == "path"


def test_list_filters_by_case_insensitive_substring(tenant: Tenant) -> None:
    tenant.category("Supplier Onboarding", "Getting started")
    tenant.category("Offboarding", "When a SUPPLIER leaves")
    tenant.category("100% done_list", "literal wildcards")
    listing = _list(tenant, name="ONBOARD")
    assert [c["name"] for c in listing["data"]] == ["Supplier Onboarding"]
    assert [c["name"] for c in _list(tenant, description="supplier")["data"]] == ["Offboarding"]
    assert [c["name"] for c in _list(tenant, name="%")["data"]] == ["100% done_list"]
    assert [c["name"] for c in _list(tenant, name="e_l")["data"]] == ["100% done_list"]
    assert _list(tenant, name="board", description="leaves")["total_entries"] == 1


def _list(tenant: Tenant, **params: Any) -> Any:
    response = tenant.client.get(
        "/app/v1/workflow_categories", params=params, headers=tenant.headers
    )
    assert response.status_code == 200, response.text
    return response.json()


def test_list_page_shape_sorting_and_ties(tenant: Tenant) -> None:
    names = ["delta", "alpha", "charlie", "bravo", "alpha", "alpha"]
    for name in names:
        tenant.category(name, f"about {name}")
    page = _list(tenant, page_size=4)
    assert set(page) == {"page_number", "page_size", "total_entries", "total_pages", "data"}
    assert (page["page_number"], page["page_size"], page["total_entries"], page["total_pages"]) == (
        0,
        4,
        6,
        2,
    )
    assert [c["name"] for c in page["data"]] == names[:4]  # default: created_at asc
    by_name = [
        c for p in (0, 1, 2) for c in _list(tenant, sort_by="name", page_size=2, page=p)["data"]
    ]
    assert [c["name"] for c in by_name] == sorted(names)
    alphas = [c["id"] for c in by_name if c["name"] == "alpha"]
    assert alphas == sorted(alphas)  # ties broken by id: pages never overlap or skip
    assert len({c["id"] for c in by_name}) == 6
    desc = _list(tenant, sort_by="name", sort_direction="desc", page_size=100)["data"]
    assert [c["name"] for c in desc] == sorted(names, reverse=True)
    assert [c["id"] for c in desc if c["name"] == "alpha"] == sorted(alphas, reverse=True)
    for field in ("description", "created_at", "updated_at"):
        ordered = _list(tenant, sort_by=field, page_size=100)["data"]
        assert [c[field] for c in ordered] == sorted(c[field] for c in ordered)
    past = _list(tenant, page=5)
    assert past["data"] == [] and past["total_entries"] == 6 and past["total_pages"] == 1


def test_list_shows_only_the_callers_company(tenant: Tenant, other_tenant: Tenant) -> None:
    other_tenant.category("Secret plans")
    tenant.category("Mine")
    assert [c["name"] for c in _list(tenant, page_size=100)["data"]] == ["Mine"]


@pytest.mark.parametrize(
    ("params", "name"),
    [
        ({"sort_by": "password"}, "sort_by"),
        ({"sort_direction": "up"}, "sort_direction"),
        ({"page": -1}, "page"),
        ({"page": 10**32}, "page"),
        ({"page_size": 0}, "page_size"),
        ({"page_size": 101}, "page_size"),
        ({"page": "abc"}, "page"),
        ({"page_size": "ten"}, "page_size"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_list_bad_parameters_are_400_naming_them(
    tenant: Tenant, params: dict[str, Any], name: str
) -> None:
    response = tenant.client.get(
        "/app/v1/workflow_categories", params=params, headers=tenant.headers
    )
    problem = assert_problem(response, 400, "invalid_parameter")
    assert [e["field"] for e in problem["errors"]] == [name]
    assert name in problem["detail"]


def test_category_update_and_delete(tenant: Tenant) -> None:
    created = tenant.category("Old", "desc")
    url = f"/app/v1/workflow_categories/{created['id']}"
    response = tenant.client.patch(url, json={"name": "New"}, headers=tenant.headers)
    assert response.status_code == 200
    updated = response.json()
    assert updated["name"] == "New" and updated["description"] == "desc"
    assert updated["created_at"] == created["created_at"]
    assert updated["updated_at"] >= created["updated_at"]
    assert tenant.client.delete(url, headers=tenant.headers).status_code == 204
    assert_problem(tenant.client.get(url, headers=tenant.headers), 404)


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"name": None},
        {"name": ""},
        {"id": str(uuid.uuid4())},
        {"company_id": str(uuid.uuid4())},
        {"created_at": "2026-01-01T00:00:00Z"},
        {"updated_by": str(uuid.uuid4())},
        {"name": "x", "colour": "red"},
        ["name"],
    ],
)
def test_category_update_bad_bodies(tenant: Tenant, body: Any) -> None:
    created = tenant.category()
    response = tenant.client.patch(
        f"/app/v1/workflow_categories/{created['id']}", json=body, headers=tenant.headers
    )
    assert_problem(response, 400)
    unchanged = tenant.client.get(
        f"/app/v1/workflow_categories/{created['id']}", headers=tenant.headers
    ).json()
    assert unchanged == created


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"name": "x", "id": str(uuid.uuid4())},
        {"name": "x", "company_id": "y"},
        {"name": "x", "created_by": str(uuid.uuid4())},
        {"name": 5},
        {"name": "x" * 201},
    ],
)
def test_category_create_bad_bodies(tenant: Tenant, body: Any) -> None:
    tenant.post("/app/v1/workflow_categories", body, status=400)
    assert _list(tenant)["total_entries"] == 0


def test_category_in_use_cannot_be_deleted(tenant: Tenant) -> None:
    template = tenant.template()
    response = tenant.client.delete(
        f"/app/v1/workflow_categories/{template['category_id']}", headers=tenant.headers
    )
    assert_problem(response, 409, "resource_in_use")


# --- templates ----------------------------------------------------------------------------


def test_template_create_read_update_delete(tenant: Tenant) -> None:
    template = tenant.template(steps=3)
    assert [s["step_id"] for s in template["steps"]] == ["step_0-x", "step_1-x", "step_2-x"]
    url = f"/app/v1/workflow_templates/{template['id']}"
    assert tenant.client.get(url, headers=tenant.headers).json() == template
    listed = tenant.client.get(
        "/app/v1/workflow_templates",
        params={"category_id": template["category_id"]},
        headers=tenant.headers,
    ).json()
    assert [t["id"] for t in listed["data"]] == [template["id"]]
    steps = [{"step_id": "only", "name": "Only", "type": "manual"}]
    patched = tenant.client.patch(url, json={"steps": steps}, headers=tenant.headers).json()
    assert patched["steps"] == [
        {"step_id": "only", "name": "Only", "description": "", "type": "manual"}
    ]
    assert tenant.client.delete(url, headers=tenant.headers).status_code == 204


@pytest.mark.parametrize(
    ("steps", "field"),
    [
        ([], "/steps"),
        ([{"step_id": "a", "name": "A", "type": "dance"}], "/steps/0/type"),
        (
            [
                {"step_id": "a", "name": "A", "type": "manual"},
                {"step_id": "a", "name": "B", "type": "manual"},
            ],
            "/steps",
        ),
        ([{"name": "A", "type": "manual"}], "/steps/0/step_id"),
        ([{"step_id": "a", "name": "A", "type": "manual", "extra": 1}], "/steps/0/extra"),
    ],
)
def test_template_bad_steps(tenant: Tenant, steps: list[Any], field: str) -> None:
    category = tenant.category()
    problem = tenant.post(
        "/app/v1/workflow_templates",
        {"category_id": category["id"], "name": "T", "steps": steps},
        status=400,
    )
    assert field in [e["field"] for e in problem["errors"]]


def test_template_in_another_companys_category_is_refused(
    tenant: Tenant, other_tenant: Tenant
) -> None:
    theirs = other_tenant.category()
    problem = tenant.post(
        "/app/v1/workflow_templates",
        {
            "category_id": theirs["id"],
            "name": "T",
            "steps": [{"step_id": "a", "name": "A", "type": "manual"}],
        },
        status=400,
    )
    assert problem["code"] == "unknown_reference"
    assert problem["errors"][0]["field"] == "/category_id"


def test_template_in_use_cannot_be_deleted(tenant: Tenant) -> None:
    workflow = tenant.workflow()
    response = tenant.client.delete(
        f"/app/v1/workflow_templates/{workflow['workflow_template_id']}", headers=tenant.headers
    )
    assert_problem(response, 409, "resource_in_use")


# --- workflows and tasks (4.6, 4.7) -------------------------------------------------------


def test_workflow_from_template_has_one_task_per_step(tenant: Tenant) -> None:
    template = tenant.template(steps=3)
    workflow = tenant.workflow(
        template["id"],
        due_date="2026-12-31T19:00:00+02:00",
        notification_date="2026-12-24T09:00:00.123456Z",
    )
    assert set(workflow) == WORKFLOW_FIELDS
    assert workflow["status"] == "draft"
    assert workflow["due_date"] == "2026-12-31T17:00:00.000Z"
    assert workflow["notification_date"] == "2026-12-24T09:00:00.123Z"
    fetched = tenant.client.get(f"/app/v1/workflows/{workflow['id']}", headers=tenant.headers)
    assert fetched.status_code == 200 and fetched.json() == workflow
    tasks = tenant.client.get(
        "/app/v1/workflow_tasks", params={"workflow_id": workflow["id"]}, headers=tenant.headers
    ).json()
    assert tasks["total_entries"] == 3
    assert [t["step_id"] for t in tasks["data"]] == [s["step_id"] for s in template["steps"]]
    task = tasks["data"][1]
    assert set(task) >= TASK_FIELDS
    assert task["type"] == template["steps"][1]["type"]
    assert task["workflow_id"] == workflow["id"]
    single = tenant.client.get(
        f"/app/v1/workflow_tasks/actions/{task['id']}", headers=tenant.headers
    )
    assert single.status_code == 200 and single.json() == task


def test_workflow_without_notification_date(tenant: Tenant) -> None:
    workflow = tenant.workflow()
    assert workflow["notification_date"] is None


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"due_date": None}, "/due_date"),
        ({"due_date": "2026-12-31T17:00:00"}, "/due_date"),
        ({"due_date": "tomorrow"}, "/due_date"),
        ({"due_date": 1767200400}, "/due_date"),
        ({"notification_date": "2027-01-05T00:00:00Z"}, "/notification_date"),
        ({"status": "active"}, "/status"),
        ({"company_id": str(uuid.uuid4())}, "/company_id"),
        ({"workflow_template_id": "nope"}, "/workflow_template_id"),
    ],
)
def test_workflow_create_bad_bodies(tenant: Tenant, change: dict[str, Any], field: str) -> None:
    template = tenant.template()
    body = {
        "workflow_template_id": template["id"],
        "name": "W",
        "due_date": "2026-12-31T17:00:00Z",
    } | change
    problem = tenant.post("/app/v1/workflows", body, status=400)
    assert field in [e["field"] for e in problem["errors"]], problem


def test_workflow_from_another_companys_template_is_refused(
    tenant: Tenant, other_tenant: Tenant
) -> None:
    theirs = other_tenant.template()
    problem = tenant.post(
        "/app/v1/workflows",
        {"workflow_template_id": theirs["id"], "name": "W", "due_date": "2026-12-31T17:00:00Z"},
        status=400,
    )
    assert problem["code"] == "unknown_reference"


ALLOWED = {
    ("draft", "active"),
    ("draft", "cancelled"),
    ("active", "paused"),
    ("paused", "active"),
    ("active", "completed"),
    ("active", "cancelled"),
    ("paused", "cancelled"),
}
PATHS = {
    "draft": [],
    "active": ["active"],
    "paused": ["active", "paused"],
    "completed": ["active", "completed"],
    "cancelled": ["cancelled"],
}
STATES = list(PATHS)


@pytest.mark.parametrize("current", STATES)
def test_status_state_machine(tenant: Tenant, current: str) -> None:
    """From every state, every target: allowed moves answer 200, all others 409."""
    for target in STATES:
        workflow = tenant.workflow()
        url = f"/app/v1/workflows/{workflow['id']}"
        for step in PATHS[current]:
            moved = tenant.client.patch(url, json={"status": step}, headers=tenant.headers)
            assert moved.status_code == 200, moved.text
        response = tenant.client.patch(url, json={"status": target}, headers=tenant.headers)
        if (current, target) in ALLOWED:
            assert response.status_code == 200, (current, target, response.text)
            assert response.json()["status"] == target
        else:
            problem = assert_problem(response, 409, "illegal_status_transition")
            assert problem["from"] == current and problem["to"] == target
            assert current in problem["detail"] and target in problem["detail"]
            after = tenant.client.get(url, headers=tenant.headers).json()
            assert after["status"] == current


def test_workflow_field_updates(tenant: Tenant) -> None:
    workflow = tenant.workflow(notification_date="2026-12-20T00:00:00Z")
    url = f"/app/v1/workflows/{workflow['id']}"
    patched = tenant.client.patch(
        url, json={"name": "Renamed", "notification_date": None}, headers=tenant.headers
    )
    assert patched.status_code == 200
    assert patched.json()["name"] == "Renamed" and patched.json()["notification_date"] is None
    bad = tenant.client.patch(
        url, json={"notification_date": "2027-06-01T00:00:00Z"}, headers=tenant.headers
    )
    assert_problem(bad, 400, "invalid_dates")
    for body in (
        {"name": None},
        {"due_date": None},
        {"status": "done"},
        {"workflow_template_id": str(uuid.uuid4())},
        {},
    ):
        assert_problem(tenant.client.patch(url, json=body, headers=tenant.headers), 400)


def test_task_update(tenant: Tenant, other_tenant: Tenant) -> None:
    workflow = tenant.workflow()
    tasks = tenant.client.get(
        "/app/v1/workflow_tasks", params={"workflow_id": workflow["id"]}, headers=tenant.headers
    ).json()["data"]
    url = f"/app/v1/workflow_tasks/actions/{tasks[0]['id']}"
    response = tenant.client.patch(
        url, json={"type": "automated", "name": "Auto"}, headers=tenant.headers
    )
    assert response.status_code == 200
    assert response.json()["type"] == "automated" and response.json()["name"] == "Auto"
    for body in ({"type": "dance"}, {"step_id": "new"}, {"workflow_id": workflow["id"]}, {}):
        assert_problem(tenant.client.patch(url, json=body, headers=tenant.headers), 400)
    assert_problem(
        other_tenant.client.get(url, headers=other_tenant.headers), 404, "workflow_task_not_found"
    )
    assert_problem(
        other_tenant.client.patch(url, json={"name": "x"}, headers=other_tenant.headers), 404
    )


def test_tasks_of_unknown_workflow_and_missing_parameter(
    tenant: Tenant, other_tenant: Tenant
) -> None:
    theirs = other_tenant.workflow()
    response = tenant.client.get(
        "/app/v1/workflow_tasks", params={"workflow_id": theirs["id"]}, headers=tenant.headers
    )
    assert_problem(response, 404, "workflow_not_found")
    problem = assert_problem(
        tenant.client.get("/app/v1/workflow_tasks", headers=tenant.headers),
        400,
        "invalid_parameter",
    )
    assert problem["errors"][0]["field"] == "workflow_id"
    assert_problem(
        tenant.client.get(f"/app/v1/workflows/{theirs['id']}", headers=tenant.headers),
        404,
        "workflow_not_found",
    )


# --- scopes -------------------------------------------------------------------------------


def test_scopes(client: TestClient, admin: dict[str, str], company: str) -> None:
    reader = create_credential(client, admin, company, scopes=["workflows:read"])
    headers = auth(get_token(client, reader["client_id"], reader["client_secret"]))
    assert client.get("/app/v1/workflow_categories", headers=headers).status_code == 200
    assert_problem(
        client.post("/app/v1/workflow_categories", json={"name": "x"}, headers=headers),
        403,
        "insufficient_scope",
    )
    assert_problem(
        client.post("/app/v1/activities/search", json={}, headers=headers),
        403,
        "insufficient_scope",
    )
    nobody = create_credential(client, admin, company, scopes=["data:read"])
    headers = auth(get_token(client, nobody["client_id"], nobody["client_secret"]))
    for path in (
        "/app/v1/workflow_categories",
        f"/app/v1/workflows/{uuid.uuid4()}",
        f"/app/v1/workflow_tasks/actions/{uuid.uuid4()}",
    ):
        assert_problem(client.get(path, headers=headers), 403, "insufficient_scope")
        assert_problem(client.get(path), 401, "missing_token")


def test_operator_tokens_are_not_a_company(client: TestClient, admin: dict[str, str]) -> None:
    assert_problem(client.get("/app/v1/workflow_categories", headers=admin), 403)


def test_totals_follow_every_change(tenant: Tenant) -> None:
    """Totals may be answered from a cache; a write must never leave them stale."""
    tenant.category("Audit one")
    assert _list(tenant, name="audit")["total_entries"] == 1
    second = tenant.category("Audit two")
    assert _list(tenant, name="audit")["total_entries"] == 2
    tenant.client.patch(
        f"/app/v1/workflow_categories/{second['id']}",
        json={"name": "Other"},
        headers=tenant.headers,
    )
    assert _list(tenant, name="audit")["total_entries"] == 1
    tenant.client.delete(f"/app/v1/workflow_categories/{second['id']}", headers=tenant.headers)
    assert _list(tenant)["total_entries"] == 1
