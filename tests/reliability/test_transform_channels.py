"""One steps document, every door (contract section 16): the same records pushed as
JSON, uploaded through a presigned URL, put over SFTP, mailed to an inbox, and
resubmitted from quarantine are stored the same, with the same counts. Five datasets of
one company hold the same steps, so the hashes agree and no channel's records are
duplicates of another's."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.factories import create_company
from tests.files.conftest import FileTenant, run_worker
from tests.inbox.conftest import message, send, start_smtp
from tests.ingestion.conftest import SCHEMA, register_dataset
from tests.sftp.conftest import create_account, openssh_batch, start_sftp

pytestmark = pytest.mark.http

STEPS = [
    {"op": "filter", "path": "/quantity", "equals": 0},
    {"op": "dedupe", "keys": ["/order_id"]},
    {"op": "hash", "path": "/customer-email", "lowercase": True},
    {"op": "mask", "path": "/order_id", "keep_last": 1},
    {"op": "set", "path": "/channel", "value": "transformed"},
    {"op": "rename", "from": "/paid", "to": "/settled"},
    {"op": "truncate", "path": "/placed_at", "max_length": 10},
    {"op": "drop", "path": "/amount"},
]
HEADER = "order_id,customer-email,amount,quantity,paid,placed_at\n"
# i = 0 has quantity 0 (filtered); A-2 comes twice (a duplicate)
ROWS = [(f"A-{i}", f"C{i}@Example.com", f"{i}.5", str(i), "true") for i in [0, 1, 2, 3, 4, 5, 2]]
PLACED = "2026-11-22T10:00:00Z"
CSV = (HEADER + "".join(f"{o},{e},{a},{q},{p},{PLACED}\n" for o, e, a, q, p in ROWS)).encode()


def as_json(row: tuple[str, ...]) -> dict[str, Any]:
    order_id, email, amount, quantity, _ = row
    return {
        "order_id": order_id,
        "customer-email": email,
        "amount": float(amount),
        "quantity": int(quantity),
        "paid": True,
        "placed_at": PLACED,
    }


def as_text(row: tuple[str, ...]) -> dict[str, Any]:
    order_id, email, amount, quantity, paid = row
    return dict(
        zip(
            HEADER.strip().split(","),
            [order_id, email, amount, quantity, paid, PLACED],
            strict=True,
        )
    )


def through_every_door(
    client: TestClient,
    admin: dict[str, str],
    tenant: FileTenant,
    base_settings: dict[str, Any],
    tmp_path: Path,
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """`ROWS` through each door into the dataset named after it (push, upload, sftp,
    email, resubmit): the transaction of each door; and the resubmit's source, an upload
    quarantined whole (every amount unreadable), then corrected row by row."""
    transactions: dict[str, dict[str, Any]] = {}
    pushed = tenant.push([as_json(row) for row in ROWS], dataset_id="push")
    assert pushed.status_code == 200, pushed.text
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
    return transactions, source


@pytest.mark.long
def test_every_channel_stores_the_same_output_with_the_same_counts(
    client: TestClient,
    admin: dict[str, str],
    base_settings: dict[str, Any],
    tmp_path: Path,
) -> None:
    company = create_company(client, admin, f"Doors {uuid.uuid4().hex[:6]}")
    tenant = FileTenant(client, admin, company)
    names = ["push", "upload", "sftp", "email", "resubmit"]
    for name in names:
        options = {"invalid_rows": "quarantine"} if name == "resubmit" else None
        register_dataset(client, admin, tenant.client_id, name, schema=SCHEMA, options=options)
        response = client.put(
            f"/admin/v1/clients/{tenant.client_id}/datasets/{name}/transforms",
            json={"steps": STEPS},
            headers=admin,
        )
        assert response.status_code == 200, response.text

    transactions, source = through_every_door(client, admin, tenant, base_settings, tmp_path)
    # the resubmit's source: quarantined whole (every amount unreadable)
    assert (source["records_accepted"], source["records_rejected"]) == (0, len(ROWS))

    counts = {
        name: (
            t["status"],
            t["records_received"],
            t["records_accepted"],
            t["records_filtered"],
            t["records_duplicates"],
            t["transform_version"],
        )
        for name, t in transactions.items()
    }
    assert set(counts.values()) == {("completed", 7, 5, 1, 1, 1)}, counts
    stored = {
        name: sorted(
            (r["data"] for r in tenant.records(dataset_id=name)), key=lambda d: d["order_id"]
        )
        for name in names
    }
    assert len(stored["push"]) == 5
    for name in names[1:]:
        assert stored[name] == stored["push"], name
    first = stored["push"][0]
    assert first["order_id"] == "**1" and first["channel"] == "transformed"
    assert first["settled"] is True and "amount" not in first and "paid" not in first
    assert first["placed_at"] == "2026-11-22" and len(first["customer-email"]) == 64
