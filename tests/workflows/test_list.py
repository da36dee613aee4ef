"""`GET /app/v1/workflows` (contract section 7): filters, sorting, ties, paging, tenancy."""

from __future__ import annotations

from typing import Any

import pytest

from tests.factories import assert_problem
from tests.tenants import Tenant


def _list(tenant: Tenant, **params: Any) -> Any:
    response = tenant.client.get("/app/v1/workflows", params=params, headers=tenant.headers)
    assert response.status_code == 200, response.text
    return response.json()


def _names(page: Any) -> list[str]:
    return [w["name"] for w in page["data"]]


@pytest.fixture
def workflows(tenant: Tenant) -> dict[str, Any]:
    first, second = tenant.template()["id"], tenant.template()["id"]
    made = {
        "Alpha": tenant.workflow(first, name="Alpha", due_date="2026-12-01T00:00:00Z"),
        "beta": tenant.workflow(first, name="beta", due_date="2026-12-10T00:00:00Z"),
        "Gamma alpha": tenant.workflow(second, name="Gamma alpha", due_date="2026-12-20T00:00:00Z"),
        "Delta": tenant.workflow(second, name="Delta", due_date="2026-12-20T00:00:00Z"),
    }
    tenant.client.patch(
        f"/app/v1/workflows/{made['beta']['id']}", json={"status": "active"}, headers=tenant.headers
    )
    tenant.client.patch(
        f"/app/v1/workflows/{made['Delta']['id']}",
        json={"status": "cancelled"},
        headers=tenant.headers,
    )
    return {"made": made, "templates": (first, second)}


def test_the_list_answers_the_page_shape_in_creation_order(
    tenant: Tenant, workflows: dict[str, Any]
) -> None:
    page = _list(tenant)
    assert set(page) == {"page_number", "page_size", "total_entries", "total_pages", "data"}
    assert page["total_entries"] == 4
    assert _names(page) == ["Alpha", "beta", "Gamma alpha", "Delta"]
    assert (
        page["data"][0]
        == tenant.client.get(
            f"/app/v1/workflows/{page['data'][0]['id']}", headers=tenant.headers
        ).json()
    )


def test_filters(tenant: Tenant, workflows: dict[str, Any]) -> None:
    first, second = workflows["templates"]
    assert _names(_list(tenant, status="draft")) == ["Alpha", "Gamma alpha"]
    assert _names(_list(tenant, status="active,cancelled")) == ["beta", "Delta"]
    assert _names(_list(tenant, workflow_template_id=second)) == ["Gamma alpha", "Delta"]
    assert _names(_list(tenant, name="ALPHA")) == ["Alpha", "Gamma alpha"]
    assert _names(_list(tenant, due_after="2026-12-10T00:00:00Z")) == [
        "beta",
        "Gamma alpha",
        "Delta",
    ]
    assert _names(_list(tenant, due_before="2026-12-10T00:00:00Z")) == ["Alpha"]
    assert _names(_list(tenant, name="%")) == []  # wildcards are literal
    assert _list(tenant, status="draft", workflow_template_id=first)["total_entries"] == 1


def test_sorting_with_ties_broken_by_id_never_overlaps_pages(
    tenant: Tenant, workflows: dict[str, Any]
) -> None:
    assert _names(_list(tenant, sort_by="name")) == ["Alpha", "Delta", "Gamma alpha", "beta"]
    by_due = _list(tenant, sort_by="due_date", sort_direction="desc")
    assert _names(by_due)[2:] == ["beta", "Alpha"]
    tied = sorted(
        (w for w in workflows["made"].values() if w["due_date"].startswith("2026-12-20")),
        key=lambda w: w["id"],
        reverse=True,
    )
    assert [w["id"] for w in by_due["data"][:2]] == [w["id"] for w in tied]
    pages = [
        _list(tenant, sort_by="due_date", page_size=1, page=n)["data"][0]["id"] for n in range(4)
    ]
    assert pages == [w["id"] for w in _list(tenant, sort_by="due_date")["data"]]
    assert len(set(pages)) == 4


def test_only_the_callers_company(
    tenant: Tenant, other_tenant: Tenant, workflows: dict[str, Any]
) -> None:
    assert _list(other_tenant)["total_entries"] == 0
    other_tenant.workflow()
    assert _list(other_tenant)["total_entries"] == 1
    assert _list(tenant)["total_entries"] == 4


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"status": "done"}, "status"),
        ({"status": "active,"}, "status"),
        ({"sort_by": "description"}, "sort_by"),
        ({"sort_direction": "up"}, "sort_direction"),
        ({"due_after": "tomorrow"}, "due_after"),
        ({"workflow_template_id": "x"}, "workflow_template_id"),
        ({"page_size": "101"}, "page_size"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_parameters_are_400_naming_them(
    tenant: Tenant, params: dict[str, str], field: str
) -> None:
    response = tenant.client.get("/app/v1/workflows", params=params, headers=tenant.headers)
    problem = assert_problem(response, 400)
    assert any(field in e["field"] for e in problem["errors"]), problem


def test_the_list_needs_workflows_read(tenant: Tenant) -> None:
    response = tenant.client.get("/app/v1/workflows", headers={})
    assert_problem(response, 401)
