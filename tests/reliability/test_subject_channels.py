"""Data subjects on every door (contract section 17): a suppressed subject's records are
refused whether they are pushed, uploaded, put over SFTP, mailed or resubmitted, and an
erasure removes a subject's records of every door and the raw files they came in."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.factories import auth, create_company, create_credential, get_token
from tests.files.conftest import FileTenant, run_worker
from tests.inbox.conftest import message, send, start_smtp
from tests.ingestion.conftest import SCHEMA, register_dataset
from tests.reliability.test_transform_channels import CSV, HEADER, PLACED, ROWS, as_json, as_text
from tests.sftp.conftest import create_account, openssh_batch, start_sftp
from tests.subjects.conftest import run_erasures

pytestmark = pytest.mark.http

SUPPRESSED, ERASED = "C1@Example.com", "C3@Example.com"
NAMES = ["push", "upload", "sftp", "email", "resubmit"]


def test_every_door_refuses_a_suppressed_subject_and_an_erasure_reaches_every_door(
    client: TestClient,
    admin: dict[str, str],
    base_settings: dict[str, Any],
    tmp_path: Path,
) -> None:
    company = create_company(client, admin, f"Subjects {uuid.uuid4().hex[:6]}")
    tenant = FileTenant(client, admin, company)
    for name in NAMES:
        options = {"subject_key": "/customer-email", "invalid_rows": "quarantine"}
        register_dataset(client, admin, tenant.client_id, name, schema=SCHEMA, options=options)
    credential = create_credential(client, admin, company, scopes=["data:erase"])
    eraser = auth(get_token(client, credential["client_id"], credential["client_secret"]))

    def erase(subject: str, suppress: bool) -> Any:
        made = client.post(
            "/platform/v1/erasures",
            json={"subjects": [subject], "suppress": suppress},
            headers=eraser,
        )
        assert made.status_code == 202, made.text
        run_erasures(client)
        done = client.get(f"/platform/v1/erasures/{made.json()['erasure_id']}", headers=eraser)
        assert done.json()["status"] == "completed"
        return done.json()

    erase(SUPPRESSED, suppress=True)
    transactions: dict[str, dict[str, Any]] = {}
    pushed = tenant.push([as_json(row) for row in ROWS], dataset_id="push")
    transactions["push"] = tenant.transaction(pushed.json()["transaction_id"])
    transactions["upload"] = tenant.upload(CSV, dataset_id="upload")
    (tmp_path / "sftp").mkdir()
    (tmp_path / "smtp").mkdir()
    sftp = start_sftp(base_settings, tmp_path / "sftp")
    try:
        account = create_account(tenant, tmp_path)
        local = tmp_path / "orders.csv"
        local.write_bytes(CSV)
        done = openssh_batch(
            sftp.port, account, f"put {local} /{tenant.client_id}/sftp/\n", tmp_path
        )
        assert done.returncode == 0, done.stderr
    finally:
        sftp.stop()
    smtp = start_smtp(base_settings, tmp_path / "smtp")
    try:
        inbox = client.post(
            f"/admin/v1/clients/{tenant.client_id}/datasets/email/inboxes",
            json={"allowed_senders": ["ann@example.com"]},
            headers=admin,
        ).json()
        send(smtp.port, message(inbox["address"], attachments=[("orders.csv", "text/csv", CSV)]))
    finally:
        smtp.stop()
    run_worker(client)
    for name in ("sftp", "email"):
        [transactions[name]] = tenant.transactions(channel=name, dataset_id=name)["data"]
    broken = (HEADER + "".join(f"{o},{e},x,{q},{p},{PLACED}\n" for o, e, _, q, p in ROWS)).encode()
    source = tenant.upload(broken, dataset_id="resubmit")
    corrected = client.post(
        f"/platform/v1/transactions/{source['transaction_id']}/resubmit",
        json={"rows": [{"line": n + 2, "data": as_text(row)} for n, row in enumerate(ROWS)]},
        headers=tenant.headers,
    )
    assert corrected.status_code == 201, corrected.text
    transactions["resubmit"] = corrected.json()

    counts = {
        name: (t["records_received"], t["records_accepted"], t["records_suppressed"])
        for name, t in transactions.items()
    }
    assert set(counts.values()) == {(7, 6, 1)}, counts

    def emails(name: str) -> list[str]:
        return [r["data"]["customer-email"] for r in tenant.records(dataset_id=name)]

    for name in NAMES:
        assert SUPPRESSED not in emails(name) and ERASED in emails(name), name

    done = erase(ERASED, suppress=False)
    assert done["counts"]["records"] == 5  # one on each door
    assert done["counts"]["files"] == 4  # the upload, SFTP and email files, and the broken one
    for name in NAMES:
        assert ERASED not in emails(name), name
        assert len(emails(name)) == 5, name
    for name in ("upload", "sftp", "email"):
        transaction = tenant.transaction(transactions[name]["transaction_id"])
        assert transaction["file_erased"] is True, name
    assert tenant.transaction(source["transaction_id"])["file_erased"] is True
