"""`headwater import`: YAML or JSON through the service code, all or nothing."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.factories import create_company, run_cli
from tests.tenants import Tenant

DOCUMENT = {
    "categories": [
        {
            "name": "Imported",
            "description": "from a file",
            "templates": [
                {
                    "name": "T",
                    "steps": [
                        {"step_id": "a-1", "name": "A", "type": "manual"},
                        {"step_id": "b_2", "name": "B", "type": "review"},
                    ],
                    "workflows": [
                        {"name": "W1", "due_date": "2027-01-01T00:00:00Z", "status": "paused"},
                        {"name": "W2", "due_date": "2027-02-01T00:00:00+01:00"},
                    ],
                }
            ],
        }
    ]
}


def _run(base_settings: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(
        *args, data_dir=base_settings["data_dir"], database_url=base_settings["database_url"]
    )


def _search(tenant: Tenant) -> list[dict[str, Any]]:
    return tenant.search({"page_size": 100, "sort_direction": "asc"})["data"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_import_writes_through_the_services(
    tenant: Tenant, base_settings: dict[str, Any], tmp_path: Path, suffix: str
) -> None:
    import yaml

    path = tmp_path / f"workflows{suffix}"
    path.write_text(json.dumps(DOCUMENT) if suffix == ".json" else yaml.safe_dump(DOCUMENT))
    done = _run(
        base_settings,
        "import",
        str(path),
        "--company-id",
        tenant.company_id,
        "--author-id",
        tenant.author_id,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"categories": 1, "templates": 1, "workflows": 2}
    categories = tenant.client.get(
        "/app/v1/workflow_categories", params={"name": "imported"}, headers=tenant.headers
    ).json()["data"]
    assert [c["name"] for c in categories] == ["Imported"]
    entries = _search(tenant)
    kinds = [(e["resource_type"], e["action"]) for e in entries]
    assert kinds.count(("workflow_task", "create")) == 4
    assert kinds.count(("workflow", "update")) == 2  # draft -> active -> paused
    assert {e["author_id"] for e in entries} == {tenant.author_id}
    w1 = [
        e["after"]
        for e in entries
        if e["resource_type"] == "workflow" and e["after"]["name"] == "W1"
    ]
    assert [w["status"] for w in w1] == ["draft", "active", "paused"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("categories: [{name: x, templates: [{name: t, steps: []}]}]", "steps"),
        ("categories: [{name: x, colour: red}]", "colour"),
        (
            "categories: [{name: x, templates: [{name: t, steps: [{step_id: a, name: A, "
            "type: manual}], workflows: [{name: w, due_date: soon}]}]}]",
            "due_date",
        ),
        (
            "categories: [{name: x, templates: [{name: t, steps: [{step_id: a, name: A, "
            "type: manual}], workflows: [{name: w, due_date: '2027-01-01T00:00:00Z', "
            "notification_date: '2028-01-01T00:00:00Z'}]}]}]",
            "notification_date",
        ),
        ("{not yaml", "cannot be read"),
    ],
)
def test_a_bad_file_stores_nothing(
    tenant: Tenant, base_settings: dict[str, Any], tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    done = _run(base_settings, "import", str(path), "--company-id", tenant.company_id)
    assert done.returncode == 1
    assert message in done.stderr and "Traceback" not in done.stderr
    assert _search(tenant) == []


def test_import_into_an_unknown_company_fails(
    base_settings: dict[str, Any], tmp_path: Path, client: TestClient, admin: dict[str, str]
) -> None:
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(DOCUMENT))
    done = _run(base_settings, "import", str(path), "--company-id", str(uuid.uuid4()))
    assert done.returncode == 1 and "No company" in done.stderr
    assert create_company(client, admin)  # the database is still usable


def test_a_failure_at_the_last_workflow_stores_nothing(
    tenant: Tenant, base_settings: dict[str, Any], tmp_path: Path
) -> None:
    """All or nothing: the first workflow was already written (with its tasks) when the
    last one failed; none of it may stay."""
    document = json.loads(json.dumps(DOCUMENT))
    workflows = document["categories"][0]["templates"][0]["workflows"]
    workflows.append(
        {
            "name": "W3",
            "due_date": "2027-01-01T00:00:00Z",
            "notification_date": "2028-01-01T00:00:00Z",  # after the due date: refused
        }
    )
    path = tmp_path / "late-failure.json"
    path.write_text(json.dumps(document))
    done = _run(base_settings, "import", str(path), "--company-id", tenant.company_id)
    assert done.returncode == 1, done.stdout
    assert "notification_date" in done.stderr
    assert _search(tenant) == []
    listed = tenant.client.get("/app/v1/workflows", headers=tenant.headers).json()
    assert listed["total_entries"] == 0
