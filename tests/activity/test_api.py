"""The activity log: entries for every change, and search (contract section 8, 4.8)."""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.factories import assert_problem, database
from tests.tenants import Tenant, record_entry

ISO_MS_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
ENTRY_FIELDS = {
    "resource_type",
    "resource_id",
    "author_id",
    "action",
    "before",
    "after",
    "timestamp",
}


def _all(tenant: Tenant, **filters: Any) -> list[dict[str, Any]]:
    body = {"page": 0, "page_size": 100, "sort_by": "timestamp", "sort_direction": "asc"}
    if filters:
        body["filter"] = filters
    return tenant.search(body)["data"]  # type: ignore[no-any-return]


def test_create_update_delete_write_entries_with_before_and_after(tenant: Tenant) -> None:
    category = tenant.category("Old", "d")
    url = f"/app/v1/workflow_categories/{category['id']}"
    updated = tenant.client.patch(url, json={"name": "New"}, headers=tenant.headers).json()
    tenant.client.delete(url, headers=tenant.headers)
    entries = _all(tenant, resource_id=category["id"])
    assert [e["action"] for e in entries] == ["create", "update", "delete"]
    for entry in entries:
        assert set(entry) >= ENTRY_FIELDS
        assert entry["resource_type"] == "workflow_category"
        assert entry["author_id"] == tenant.author_id
        assert ISO_MS_Z.match(entry["timestamp"])
    create, update, delete = entries
    assert create["before"] is None and create["after"] == category
    assert update["before"] == category and update["after"] == updated
    assert delete["before"] == updated and delete["after"] is None


def test_workflow_creation_logs_the_workflow_and_each_task(tenant: Tenant) -> None:
    template = tenant.template(steps=3)
    workflow = tenant.workflow(template["id"])
    tenant.client.patch(
        f"/app/v1/workflows/{workflow['id']}", json={"status": "active"}, headers=tenant.headers
    )
    entries = _all(tenant, resource_type={"$in": ["workflow", "workflow_task"]})
    assert [(e["resource_type"], e["action"]) for e in entries] == [
        ("workflow", "create"),
        *[("workflow_task", "create")] * 3,
        ("workflow", "update"),
    ]
    status_change = entries[-1]
    assert status_change["before"]["status"] == "draft"
    assert status_change["after"]["status"] == "active"
    kinds = {e["resource_type"] for e in _all(tenant)}
    assert kinds == {"workflow_category", "workflow_template", "workflow", "workflow_task"}


def test_failed_writes_leave_no_entry(tenant: Tenant) -> None:
    workflow = tenant.workflow()
    before = len(_all(tenant))
    url = f"/app/v1/workflows/{workflow['id']}"
    assert (
        tenant.client.patch(url, json={"status": "completed"}, headers=tenant.headers).status_code
        == 409
    )
    assert (
        tenant.client.patch(
            url, json={"notification_date": "2030-01-01T00:00:00Z"}, headers=tenant.headers
        ).status_code
        == 400
    )
    template = tenant.client.get(
        f"/app/v1/workflow_templates/{workflow['workflow_template_id']}", headers=tenant.headers
    ).json()
    assert (
        tenant.client.delete(
            f"/app/v1/workflow_categories/{template['category_id']}", headers=tenant.headers
        ).status_code
        == 409
    )
    tenant.post(
        "/app/v1/workflows",
        {
            "workflow_template_id": str(uuid.uuid4()),
            "name": "x",
            "due_date": "2026-12-31T00:00:00Z",
        },
        status=400,
    )
    assert len(_all(tenant)) == before


def test_rolled_back_transaction_leaves_no_entry(tenant: Tenant, settings: Any) -> None:

    before = len(_all(tenant))
    with database(settings) as db, db.unit_of_work() as session:
        record_entry(session, tenant)
        session.rollback()
    assert len(_all(tenant)) == before


@pytest.fixture
def history(tenant: Tenant) -> list[dict[str, Any]]:
    """A few entries of several kinds and actions, oldest first."""
    category = tenant.category("A")
    tenant.client.patch(
        f"/app/v1/workflow_categories/{category['id']}", json={"name": "B"}, headers=tenant.headers
    )
    workflow = tenant.workflow()
    tenant.client.patch(
        f"/app/v1/workflows/{workflow['id']}", json={"name": "W2"}, headers=tenant.headers
    )
    return _all(tenant)


def test_exact_and_in_filters(tenant: Tenant, history: list[dict[str, Any]]) -> None:
    updates = [e for e in history if e["action"] == "update"]
    assert _all(tenant, action="update") == updates
    assert _all(tenant, action={"$in": ["update", "delete"]}) == updates
    wf = [e for e in history if e["resource_type"] == "workflow"]
    assert _all(tenant, resource_type="workflow") == wf
    assert _all(tenant, resource_type="workflow", action="update") == [wf[-1]]
    rid = history[0]["resource_id"]
    assert _all(tenant, resource_id=rid) == [e for e in history if e["resource_id"] == rid]
    two = [history[0]["resource_id"], wf[0]["resource_id"]]
    assert _all(tenant, resource_id={"$in": two}) == [e for e in history if e["resource_id"] in two]
    assert _all(tenant, author_id=tenant.author_id) == history
    assert _all(tenant, author_id={"$in": [str(uuid.uuid4())]}) == []


def test_timestamp_bounds_are_exact_to_the_millisecond(
    tenant: Tenant, history: list[dict[str, Any]]
) -> None:
    pivot = history[2]["timestamp"]
    at = [e for e in history if e["timestamp"] == pivot]
    older = [e for e in history if e["timestamp"] < pivot]
    newer = [e for e in history if e["timestamp"] > pivot]
    assert _all(tenant, timestamp={"$gt": pivot}) == newer
    assert _all(tenant, timestamp={"$gte": pivot}) == at + newer
    assert _all(tenant, timestamp={"$lt": pivot}) == older
    assert _all(tenant, timestamp={"$lte": pivot}) == older + at
    assert _all(tenant, timestamp={"$gte": pivot, "$lte": pivot}) == at
    one_ms = (datetime.fromisoformat(pivot) + timedelta(milliseconds=1)).isoformat()
    assert _all(tenant, timestamp={"$gte": pivot, "$lt": one_ms}) == at
    offset = (
        datetime.fromisoformat(pivot)
        .astimezone(datetime.fromisoformat("2026-01-01T00:00:00+05:30").tzinfo)
        .isoformat()
    )
    assert _all(tenant, timestamp={"$gte": offset, "$lte": offset}) == at


def test_sorting_and_paging(tenant: Tenant, history: list[dict[str, Any]]) -> None:
    newest_first = tenant.search({"page": 0, "page_size": 100})["data"]
    assert newest_first == list(reversed(history))  # defaults: timestamp, desc
    by_type = tenant.search(
        {"page_size": 100, "sort_by": "resource_type", "sort_direction": "asc"}
    )["data"]
    assert [e["resource_type"] for e in by_type] == sorted(e["resource_type"] for e in history)
    pages = [tenant.search({"page": p, "page_size": 3, "sort_direction": "asc"}) for p in range(4)]
    total = len(history)
    assert all(p["total_entries"] == total and p["total_pages"] == -(-total // 3) for p in pages)
    assert [e for p in pages for e in p["data"]] == history
    past = tenant.search({"page": 50, "page_size": 3})
    assert past["data"] == [] and past["total_entries"] == total and past["page_number"] == 50


def test_search_request_from_the_interface_document(tenant: Tenant) -> None:
    """The request shape of 4.8 as shown, with an update-type action filter."""
    workflow = tenant.workflow()
    tenant.client.patch(
        f"/app/v1/workflows/{workflow['id']}", json={"status": "active"}, headers=tenant.headers
    )
    result = tenant.search(
        {
            "page": 0,
            "page_size": 10,
            "sort_by": "timestamp",
            "sort_direction": "desc",
            "filter": {
                "resource_type": "workflow",
                "resource_id": workflow["id"],
                "author_id": tenant.author_id,
                "action": "update",
                "timestamp": {"$gt": "2000-01-01T00:00:00.000Z", "$lt": "2100-01-01T00:00:00.000Z"},
            },
        }
    )
    assert set(result) == {"page_number", "page_size", "total_entries", "total_pages", "data"}
    assert result["total_entries"] == 1
    assert result["data"][0]["after"]["status"] == "active"


def test_only_the_callers_company_whatever_the_filter(tenant: Tenant, other_tenant: Tenant) -> None:
    theirs = other_tenant.category("Theirs")
    tenant.category("Mine")
    assert _all(tenant, resource_id=theirs["id"]) == []
    assert _all(tenant, author_id=other_tenant.author_id) == []
    assert [e["after"]["name"] for e in _all(tenant)] == ["Mine"]
    assert [e["after"]["name"] for e in _all(other_tenant)] == ["Theirs"]


def test_an_integer_past_64_bits_is_refused_by_the_strict_reading(tenant: Tenant) -> None:
    problem = tenant.search({"page": 10**32}, status=400)
    assert problem["code"] == "malformed_json"
    assert "out of the 64-bit range" in problem["detail"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"filter": {"colour": "red"}}, "/filter/colour"),
        ({"filter": {"timestamp": {"$between": "x"}}}, "/filter/timestamp/$between"),
        ({"filter": {"timestamp": {"$gt": "yesterday"}}}, "/filter/timestamp/$gt"),
        ({"filter": {"timestamp": {"$gt": "2026-01-01T00:00:00"}}}, "/filter/timestamp/$gt"),
        ({"filter": {"timestamp": "2026-01-01T00:00:00Z"}}, "/filter/timestamp"),
        ({"filter": {"action": {"$nin": ["update"]}}}, "/filter/action"),
        ({"filter": {"action": {"$in": []}}}, "/filter/action"),
        ({"filter": {"action": {"$in": "update"}}}, "/filter/action"),
        ({"filter": {"action": "upsert"}}, "/filter/action"),
        ({"filter": {"resource_type": "company"}}, "/filter/resource_type"),
        ({"filter": {"resource_id": "not-a-uuid"}}, "/filter/resource_id"),
        ({"filter": {"author_id": {"$in": ["x"]}}}, "/filter/author_id"),
        ({"filter": {"resource_id": 5}}, "/filter/resource_id"),
        ({"filter": []}, "/filter"),
        ({"sort_by": "before"}, "/sort_by"),
        ({"sort_direction": "up"}, "/sort_direction"),
        ({"page": -1}, "/page"),
        ({"page": 10**15}, "/page"),
        ({"page_size": 0}, "/page_size"),
        ({"page_size": 101}, "/page_size"),
        ({"page": "1"}, "/page"),
        ({"colour": "red"}, "/colour"),
    ],
)
def test_bad_search_requests_are_400(tenant: Tenant, body: dict[str, Any], field: str) -> None:
    problem = tenant.search(body, status=400)
    assert problem["status"] == 400
    assert field in [e["field"] for e in problem["errors"]], problem


def test_malformed_json_and_wrong_content_type(tenant: Tenant) -> None:
    response = tenant.client.post(
        "/app/v1/activities/search",
        content=b'{"page": ',
        headers=tenant.headers | {"Content-Type": "application/json"},
    )
    assert_problem(response, 400, "malformed_json")


def test_search_totals_follow_new_entries(tenant: Tenant) -> None:
    body = {"page": 0, "page_size": 1, "filter": {"action": "create"}}
    tenant.category("a")
    assert tenant.search(body)["total_entries"] == 1
    assert tenant.search({"page": 0, "page_size": 1})["total_entries"] == 1
    tenant.category("b")
    assert tenant.search(body)["total_entries"] == 2
    assert tenant.search({"page": 0, "page_size": 1})["total_entries"] == 2
