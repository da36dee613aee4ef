"""`headwater-client`, run as a process against a real server: what it prints, and its
exit codes on every kind of failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.http_server import free_port

from conftest import Tenant, orders

pytestmark = pytest.mark.http


def run(
    env: dict[str, str], *args: str, stdin: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}
    full |= {"HEADWATER_PROFILES_FILE": "/nonexistent/profiles.toml", "COLUMNS": "200", **env}
    return subprocess.run(
        [sys.executable, "-m", "headwater_client.cli", *args],
        env=full,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def json_lines(text: str) -> list[Any]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_token_prints_a_bearer_token(tenant: Tenant) -> None:
    done = run(tenant.env(), "token")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(".") == 2 and done.stdout.startswith("ey")
    details = json.loads(run(tenant.env(), "token", "--json").stdout)
    assert details["token_type"] == "Bearer" and details["expires_in"] > 0


def test_push_ndjson_json_and_csv(server: str, tmp_path: Path) -> None:
    tenant = Tenant(server, coerce_types=True)
    ndjson = tmp_path / "a.ndjson"
    ndjson.write_text("".join(json.dumps(r) + "\n" for r in orders(2500)))
    array = tmp_path / "b.json"
    array.write_text(json.dumps(list(orders(3, start=5000)), indent=2))
    table = tmp_path / "c.csv"
    table.write_text("order_id,amount\nC-1,1.5\nC-2,2\n")
    target = ["-c", tenant.client_id, "-d", tenant.dataset_id]

    done = run(tenant.env(), "push", str(ndjson), *target)
    assert done.returncode == 0, done.stderr
    assert "pushed 2,500 records in 3 batches" in done.stdout
    summary = json.loads(run(tenant.env(), "push", str(array), *target, "--json").stdout)
    assert summary["records_accepted"] == 3
    assert [b["first_record"] for b in summary["batches"]] == [0]
    done = run(tenant.env(), "push", "-", "--format", "csv", *target, stdin=table.read_text())
    assert done.returncode == 0, done.stderr

    exported = run(tenant.env(), "records", "export", *target)
    assert exported.returncode == 0, exported.stderr
    records = json_lines(exported.stdout)
    assert len(records) == 2505
    assert records[-1]["data"] == {"order_id": "C-2", "amount": 2}
    assert "exported 2,505 records" in exported.stderr


def test_a_rejected_push_lists_its_errors_and_exits_1(tenant: Tenant, tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{"order_id": "A", "amount": 1}, {"order_id": "B"}]))
    done = run(tenant.env(), "push", str(path), "-c", tenant.client_id, "-d", tenant.dataset_id)
    assert done.returncode == 1
    assert "rejected: 1 error in the batch" in done.stderr
    assert "record 1 /amount" in done.stderr and "(required)" in done.stderr


def test_upload_shows_the_outcome(tenant: Tenant, tmp_path: Path) -> None:
    good = tmp_path / "good.csv"
    good.write_text("order_id,amount\nA-1,1.5\nA-2,2.5\n")
    bad = tmp_path / "bad.csv"
    bad.write_text("order_id,amount\nA-1,one\n")
    target = ["-c", tenant.client_id, "-d", tenant.dataset_id]

    done = run(tenant.env(), "upload", str(good), *target)
    assert done.returncode == 0, done.stderr
    assert "completed" in done.stdout and "good.csv" in done.stdout
    rejected = run(tenant.env(), "upload", str(bad), *target, "--json")
    assert rejected.returncode == 1
    outcome = json.loads(rejected.stdout)
    assert outcome["status"] == "rejected"
    assert outcome["errors"][0]["line"] == 2
    assert "the file was rejected" in rejected.stderr

    shown = run(tenant.env(), "transactions", "show", outcome["transaction_id"])
    assert shown.returncode == 0
    assert "rejected" in shown.stdout and "/amount" in shown.stdout
    listed = json_lines(run(tenant.env(), "transactions", "list", "--json").stdout)
    assert {t["status"] for t in listed} == {"completed", "rejected"}


def test_categories_workflow_and_activities(tenant: Tenant) -> None:
    with tenant.api() as api:
        category = api.post("/app/v1/workflow_categories", json={"name": "Onboarding"}).json()
        api.post("/app/v1/workflow_categories", json={"name": "Offboarding"})
        template = api.post(
            "/app/v1/workflow_templates",
            json={
                "category_id": category["id"],
                "name": "T",
                "steps": [{"step_id": "sign", "name": "Sign", "type": "approval"}],
            },
        ).json()
        workflow = api.post(
            "/app/v1/workflows",
            json={
                "workflow_template_id": template["id"],
                "name": "Onboard Initech",
                "due_date": "2026-12-24T12:00:00Z",
            },
        ).json()

    table = run(tenant.env(), "categories", "list", "--sort-by", "name")
    assert table.returncode == 0
    assert table.stdout.index("Offboarding") < table.stdout.index("Onboarding")
    assert [
        c["name"]
        for c in json_lines(
            run(tenant.env(), "categories", "list", "--name", "ONB", "--json").stdout
        )
    ] == ["Onboarding"]
    assert (
        len(json_lines(run(tenant.env(), "categories", "list", "--limit", "1", "--json").stdout))
        == 1
    )

    shown = run(tenant.env(), "workflow", "show", workflow["id"])
    assert shown.returncode == 0
    assert "Onboard Initech" in shown.stdout and "sign" in shown.stdout
    as_json = json.loads(run(tenant.env(), "workflow", "show", workflow["id"], "--json").stdout)
    assert [t["step_id"] for t in as_json["tasks"]] == ["sign"]
    listed = json_lines(
        run(tenant.env(), "workflow", "list", "--status", "draft,active", "--json").stdout
    )
    assert [w["id"] for w in listed] == [workflow["id"]]
    assert (
        json_lines(run(tenant.env(), "workflow", "list", "--status", "paused", "--json").stdout)
        == []
    )
    table = run(tenant.env(), "workflow", "list", "--name", "initech")
    assert table.returncode == 0 and "Onboard Initech" in table.stdout

    search = [
        "activities",
        "search",
        "--resource-type",
        "workflow",
        "--resource-type",
        "workflow_task",
        "--json",
    ]
    entries = json_lines(run(tenant.env(), *search).stdout)
    assert sorted(e["resource_type"] for e in entries) == ["workflow", "workflow_task"]
    table = run(
        tenant.env(),
        "activities",
        "search",
        "--action",
        "create",
        "--since",
        "2020-01-01T00:00:00Z",
    )
    assert table.returncode == 0 and "workflow_category" in table.stdout


def test_failures_have_clear_messages_and_exit_codes(tenant: Tenant, tmp_path: Path) -> None:
    missing = run({"HEADWATER_URL": tenant.url}, "whoami")
    assert missing.returncode == 2
    assert "HEADWATER_CLIENT_ID" in missing.stderr and "HEADWATER_CLIENT_SECRET" in missing.stderr

    refused = run(tenant.env(HEADWATER_CLIENT_SECRET="wrong"), "whoami")
    assert refused.returncode == 3
    assert "invalid_client" in refused.stderr and "wrong" not in refused.stderr

    unknown = run(tenant.env(), "transactions", "show", "0b5b7a3e-8f0e-4a8e-9d35-5f4a3c2b1a00")
    assert unknown.returncode == 1 and "404" in unknown.stderr

    invalid = run(tenant.env(), "transactions", "show", "not-a-uuid")
    assert invalid.returncode == 1 and "400" in invalid.stderr

    nowhere = f"http://127.0.0.1:{free_port()}"
    down = run(tenant.env(HEADWATER_URL=nowhere), "--retries", "0", "whoami")
    assert down.returncode == 4 and "ConnectError" in down.stderr

    usage = run(tenant.env(), "push", "x.json")
    assert usage.returncode == 2 and "--client-id" in usage.stderr

    unreadable = tmp_path / "broken.ndjson"
    unreadable.write_text('{"order_id": "A", "amount": 1}\n{"order_id": \n')
    broken = run(tenant.env(), "push", str(unreadable), "-c", tenant.client_id, "-d", "orders")
    assert broken.returncode == 1 and "broken.ndjson, line 2" in broken.stderr


def test_credentials_from_a_profile_file(tenant: Tenant, tmp_path: Path) -> None:
    profiles = tmp_path / "profiles.toml"
    profiles.write_text(
        f'[staging]\nurl = "{tenant.url}"\nclient_id = "{tenant.credential_id}"\n'
        f'client_secret = "{tenant.credential_secret}"\n'
    )
    env = {"HEADWATER_PROFILES_FILE": str(profiles)}
    done = run(env, "--profile", "staging", "whoami", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["subject"] == tenant.credential_id
    assert run(env | {"HEADWATER_PROFILE": "staging"}, "whoami").returncode == 0
    absent = run(env, "--profile", "production", "whoami")
    assert absent.returncode == 2 and "has no profile [production]" in absent.stderr


def test_piped_output_is_tsv_with_whole_ids_and_output_chooses(tenant: Tenant) -> None:
    with tenant.api() as api:
        for name in ("Onboarding", "Offboarding\tand more"):
            api.post("/app/v1/workflow_categories", json={"name": name})
    piped = run(tenant.env(), "categories", "list", "--sort-by", "name")
    assert piped.returncode == 0, piped.stderr
    lines = piped.stdout.splitlines()
    assert lines[0].split("\t") == ["id", "name", "description", "created_at", "updated_at"]
    rows = [line.split("\t") for line in lines[1:]]
    assert [r[1] for r in rows] == ["Offboarding and more", "Onboarding"]  # tab made a space
    assert all(len(r) == 5 and len(r[0]) == 36 for r in rows)  # a UUID is never split
    as_json = json_lines(run(tenant.env(), "categories", "list", "--output", "json").stdout)
    assert sorted(c["name"] for c in as_json) == ["Offboarding\tand more", "Onboarding"]
    table = run(tenant.env(), "categories", "list", "--output", "table").stdout
    assert "┃" in table or "│" in table  # a drawn table even when piped, when asked for
    fields = run(tenant.env(), "whoami").stdout.splitlines()
    assert fields[0].split("\t")[0] == "subject"
