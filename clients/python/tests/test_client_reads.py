"""Typed reads: every page of a list, single resources, records streamed, activity search
with `$in` and time ranges; another company's resources are not found."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from conftest import Tenant, orders
from headwater_client import (
    ActivityEntry,
    Category,
    NotFound,
    Page,
    Workflow,
    one_of,
    time_range,
)

pytestmark = pytest.mark.http


def create(tenant: Tenant, path: str, body: dict[str, Any]) -> dict[str, Any]:
    with tenant.api() as api:
        response = api.post(path, json=body)
    assert response.status_code == 201, response.text
    answer: dict[str, Any] = response.json()
    return answer


def categories(tenant: Tenant, count: int) -> list[dict[str, Any]]:
    return [
        create(
            tenant,
            "/app/v1/workflow_categories",
            {"name": f"Category {n:03d}", "description": "even" if n % 2 == 0 else "odd"},
        )
        for n in range(count)
    ]


def workflow(tenant: Tenant) -> dict[str, Any]:
    category = create(tenant, "/app/v1/workflow_categories", {"name": "Onboarding"})
    template = create(
        tenant,
        "/app/v1/workflow_templates",
        {
            "category_id": category["id"],
            "name": "Supplier onboarding",
            "steps": [
                {"step_id": "collect", "name": "Collect documents", "type": "upload"},
                {"step_id": "approve", "name": "Approve", "type": "approval"},
            ],
        },
    )
    return create(
        tenant,
        "/app/v1/workflows",
        {
            "workflow_template_id": template["id"],
            "name": "Onboard Globex",
            "due_date": "2026-12-01T09:00:00Z",
        },
    )


def test_iterating_a_list_walks_every_page(tenant: Tenant) -> None:
    made = categories(tenant, 23)
    with tenant.client() as hw:
        pager = hw.list_categories(sort_by="name", sort_direction="desc", page_size=5)
        names = [c.name for c in pager]
        pages = list(pager.pages())
        third = pager.page(2)
    assert names == sorted((c["name"] for c in made), reverse=True)
    assert [len(p.data) for p in pages] == [5, 5, 5, 5, 3]
    assert [p.page_number for p in pages] == [0, 1, 2, 3, 4]
    assert isinstance(third, Page)
    assert (third.total_entries, third.total_pages) == (23, 5)
    assert [c.name for c in third.data] == names[10:15]


def test_list_filters_and_typed_fields(tenant: Tenant) -> None:
    categories(tenant, 6)
    with tenant.client() as hw:
        odd = list(hw.list_categories(description="ODD", page_size=2))
        one = hw.get_category(odd[0].id)
    assert len(odd) == 3 and {c.description for c in odd} == {"odd"}
    assert isinstance(one, Category)
    assert one == odd[0]
    assert one.company_id == tenant.company_id
    assert one.created_by == tenant.author_id
    assert isinstance(one.created_at, datetime) and one.created_at.tzinfo is not None
    assert one.to_json()["id"] == one.id


def test_a_page_past_the_end_is_empty(tenant: Tenant) -> None:
    categories(tenant, 3)
    with tenant.client() as hw:
        page = hw.list_categories(page_size=2).page(7)
    assert page.data == [] and page.total_entries == 3 and page.is_last


def test_workflows_tasks_and_templates(tenant: Tenant) -> None:
    made = workflow(tenant)
    with tenant.client() as hw:
        read = hw.get_workflow(made["id"])
        tasks = list(hw.list_workflow_tasks(read.id))
        task = hw.get_workflow_task(tasks[1].id)
        template = hw.get_template(read.workflow_template_id)
        templates = list(hw.list_templates(category_id=template.category_id))
    assert isinstance(read, Workflow)
    assert (read.name, read.status) == ("Onboard Globex", "draft")
    assert read.due_date == datetime(2026, 12, 1, 9, tzinfo=UTC)
    assert read.notification_date is None
    assert [(t.step_id, t.type) for t in tasks] == [("collect", "upload"), ("approve", "approval")]
    assert task == tasks[1] and task.workflow_id == read.id
    assert [s.step_id for s in template.steps] == ["collect", "approve"]
    assert templates == [template]


def test_another_companys_resources_are_not_found(server: str, tenant: Tenant) -> None:
    theirs = workflow(Tenant(server))
    with tenant.client() as hw:
        for read, ident in (
            (hw.get_workflow, theirs["id"]),
            (hw.get_workflow, str(uuid.uuid4())),
            (hw.get_category, str(uuid.uuid4())),
            (hw.get_transaction, str(uuid.uuid4())),
        ):
            with pytest.raises(NotFound) as missing:
                read(ident)
            assert missing.value.status == 404
        with pytest.raises(NotFound):
            hw.get_dataset("no-such-dataset", client_id=tenant.client_id)


def test_activity_search_with_in_and_time_ranges(tenant: Tenant) -> None:
    start = datetime.now(UTC) - timedelta(seconds=5)
    made = workflow(tenant)
    categories(tenant, 12)
    with tenant.client() as hw:
        everything = list(hw.search_activities(page_size=4))
        kinds = list(
            hw.search_activities(
                resource_type=one_of("workflow", "workflow_task"),
                action="create",
                timestamp=time_range(since=start),
                sort_direction="asc",
                page_size=2,
            )
        )
        one = list(hw.search_activities(resource_id=made["id"]))
        none = list(hw.search_activities(timestamp=time_range(before=start)))
        by_author = hw.search_activities(author_id=[tenant.author_id], page_size=1).page(0)
    # the dataset and its schema (registered with the tenant), 1 category, 1 template,
    # 1 workflow, 2 tasks, 12 categories
    assert len(everything) == 19
    stamps = [e.timestamp for e in everything]
    assert stamps == sorted(stamps, reverse=True)
    assert all(isinstance(e, ActivityEntry) for e in everything)
    assert [e.resource_type for e in kinds] == ["workflow", "workflow_task", "workflow_task"]
    assert [e.resource_id for e in one] == [made["id"]]
    assert one[0].before is None and one[0].after is not None
    assert none == []
    assert by_author.total_entries == 17 and len(by_author.data) == 1


def test_records_stream_and_page_and_transactions_list(tenant: Tenant) -> None:
    with tenant.client() as hw:
        pushed = hw.push(tenant.client_id, tenant.dataset_id, orders(2300))
        streamed = list(hw.stream_records(tenant.client_id, tenant.dataset_id))
        lines = list(
            hw.stream_record_lines(
                tenant.client_id, tenant.dataset_id, transaction_id=pushed.transaction_ids[2]
            )
        )
        matching = list(
            hw.list_records(tenant.client_id, tenant.dataset_id, filter={"order_id": "O-42"})
        )
        paged = list(hw.list_records(tenant.client_id, tenant.dataset_id, page_size=100))
        transactions = list(hw.list_transactions(client_id=tenant.client_id, page_size=2))
        dataset = hw.get_dataset(tenant.dataset_id, client_id=tenant.client_id)
        datasets = list(hw.list_datasets(client_id=tenant.client_id))
    assert [r.data["order_id"] for r in streamed] == [f"O-{n}" for n in range(2300)]
    assert len(lines) == 300 and all(line.startswith(b"{") for line in lines)
    assert [r.data for r in matching] == [{"order_id": "O-42", "amount": 42.5}]
    assert [r.record_id for r in paged] == [r.record_id for r in streamed]
    assert {t.transaction_id for t in transactions} == set(pushed.transaction_ids)
    assert (dataset.schema_version, dataset.schema["required"]) == (1, ["order_id", "amount"])
    assert [d.dataset_id for d in datasets] == [tenant.dataset_id]


def test_the_async_client_reads_too(tenant: Tenant) -> None:
    categories(tenant, 7)

    async def run() -> tuple[list[str], int, list[str]]:
        async with tenant.async_client() as hw:
            names = [c.name async for c in hw.list_categories(page_size=3, sort_by="name")]
            await hw.push(tenant.client_id, tenant.dataset_id, orders(5))
            records = [
                r.data["order_id"]
                async for r in hw.stream_records(tenant.client_id, tenant.dataset_id)
            ]
            entries = [e async for e in hw.search_activities(page_size=2)]
            return names, len(entries), records

    names, entries, records = asyncio.run(run())
    assert names == [f"Category {n:03d}" for n in range(7)]
    assert entries == 9  # 7 categories, the dataset and its schema
    assert records == [f"O-{n}" for n in range(5)]
