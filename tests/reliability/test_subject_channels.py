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
from tests.files.conftest import FileTenant
from tests.ingestion.conftest import SCHEMA, register_dataset
from tests.reliability.test_transform_channels import through_every_door
from tests.subjects.conftest import run_erasures

pytestmark = pytest.mark.http

SUPPRESSED, ERASED = "C1@Example.com", "C3@Example.com"
NAMES = ["push", "upload", "sftp", "email", "resubmit"]


@pytest.mark.long
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
    transactions, source = through_every_door(client, admin, tenant, base_settings, tmp_path)
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
