"""upload_file(): the two-step upload streamed from disk with progress, then the
transaction, waited for or not."""

from __future__ import annotations

import asyncio
import gzip
from pathlib import Path

import pytest
from test_client_cli import json_lines, run

from conftest import Tenant, upload_in_own_process, write_wide_csv
from headwater_client import HeadwaterError, InvalidRequest, Transaction
from headwater_client.files import guess_content_type

pytestmark = pytest.mark.http

HERE = Path(__file__).parent


def test_a_100_mb_file_streams_with_bounded_client_memory(tenant: Tenant, tmp_path: Path) -> None:
    rows = 104_000
    path = tmp_path / "orders.csv"
    size = write_wide_csv(path, rows)
    assert size > 100 * 1024 * 1024

    report = upload_in_own_process(tenant, path)
    grown_mib = (report["after_kib"] - report["before_kib"]) / 1024
    # the file is over 100 MiB; the client holds a 1 MiB piece at a time
    assert grown_mib < 16, f"the client's peak memory grew by {grown_mib:.1f} MiB"
    sent = [s for s, _ in report["progress"]]
    assert sent == sorted(sent) and sent[-1] == size
    assert {total for _, total in report["progress"]} == {size}
    assert len(sent) == -(-size // (1024 * 1024))

    with tenant.client() as hw:
        transaction = hw.wait_for_transaction(report["transaction_id"], timeout=600)
    assert (transaction.status, transaction.records_accepted) == ("completed", rows)
    assert transaction.file_size == size


def test_upload_and_wait_for_the_outcome(tenant: Tenant, tmp_path: Path) -> None:
    path = tmp_path / "orders.ndjson.gz"
    with gzip.open(path, "wt") as out:
        out.write('{"order_id": "A-1", "amount": 1}\n{"order_id": "A-2", "amount": "2.5"}\n')
    with tenant.client() as hw:
        transaction = hw.upload_file(path, tenant.client_id, tenant.dataset_id, wait=True)
        records = [r.data for r in hw.stream_records(tenant.client_id, tenant.dataset_id)]
    assert isinstance(transaction, Transaction)
    assert (transaction.status, transaction.kind) == ("completed", "file")
    assert transaction.content_type == "application/x-ndjson"
    assert transaction.file_name == "orders.ndjson.gz"
    assert transaction.completed_at is not None
    assert records == [{"order_id": "A-1", "amount": 1}, {"order_id": "A-2", "amount": 2.5}]


def test_without_waiting_the_transaction_is_answered_as_it_is(
    tenant: Tenant, tmp_path: Path
) -> None:
    path = tmp_path / "export.txt"
    path.write_text('[{"order_id": "A-1", "amount": 1}]')
    with tenant.client() as hw:
        transaction = hw.upload_file(
            path, tenant.client_id, tenant.dataset_id, "application/json", file_name="x.json"
        )
        assert transaction.status in ("awaiting_upload", "processing", "completed")
        assert transaction.file_name == "x.json"
        final = hw.wait_for_transaction(transaction.transaction_id, timeout=60)
    assert final.status == "completed"


def test_a_rejected_file_reports_its_lines(tenant: Tenant, tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("order_id,amount\nA-1,1\nA-2,lots\nA-3,3\n")
    with tenant.client() as hw:
        transaction = hw.upload_file(path, tenant.client_id, tenant.dataset_id, wait=True)
    assert transaction.status == "rejected"
    assert transaction.records_accepted == 0
    assert [(e.line, e.record, e.path) for e in transaction.errors] == [(3, 1, "/amount")]


def test_the_async_client_uploads(tenant: Tenant, tmp_path: Path) -> None:
    path = tmp_path / "orders.csv"
    path.write_text("order_id,amount\n" + "".join(f"O-{n},{n}\n" for n in range(3000)))
    seen: list[int] = []

    async def run() -> Transaction:
        async with tenant.async_client() as hw:
            return await hw.upload_file(
                path,
                tenant.client_id,
                tenant.dataset_id,
                progress=lambda sent, total: seen.append(sent),
                wait=True,
            )

    transaction = asyncio.run(run())
    assert (transaction.status, transaction.records_accepted) == ("completed", 3000)
    assert seen[-1] == path.stat().st_size


def test_content_types_from_names() -> None:
    assert guess_content_type("a.CSV") == "text/csv"
    assert guess_content_type("a.csv.gz") == "text/csv"
    assert guess_content_type("dir.v2/a.jsonl") == "application/x-ndjson"
    assert guess_content_type("a.json") == "application/json"
    with pytest.raises(HeadwaterError, match="cannot tell the content type"):
        guess_content_type("a.xlsx")


def test_refusals_before_and_at_the_service(tenant: Tenant, tmp_path: Path) -> None:
    with tenant.client() as hw:
        with pytest.raises(HeadwaterError, match="is not a file"):
            hw.upload_file(tmp_path / "missing.csv", tenant.client_id, tenant.dataset_id)
        path = tmp_path / "a.xml"
        path.write_text("<a/>")
        with pytest.raises(InvalidRequest) as refused:
            hw.upload_file(path, tenant.client_id, tenant.dataset_id, "application/xml")
    assert refused.value.status == 415


def test_quarantined_rows_are_listed_and_corrected(server: str, tmp_path: Path) -> None:
    tenant = Tenant(server, invalid_rows="quarantine")
    path = tmp_path / "some-bad.csv"
    path.write_text("order_id,amount\nA-1,1\nA-2,lots\nA-3,many\n")
    with tenant.client() as hw:
        first = hw.upload_file(path, tenant.client_id, tenant.dataset_id, wait=True)
        assert (first.status, first.records_accepted, first.records_rejected) == (
            "completed",
            1,
            2,
        )
        held = list(hw.list_quarantine(first.transaction_id))
        assert [(r.line, r.data) for r in held] == [
            (3, {"order_id": "A-2", "amount": "lots"}),
            (4, {"order_id": "A-3", "amount": "many"}),
        ]
        assert held[0].errors[0]["path"] == "/amount" and held[0].resolved_by is None
        fixed = hw.resubmit(first.transaction_id, {3: {"order_id": "A-2", "amount": 2}})
        assert fixed.resubmit_of == first.transaction_id
        assert (fixed.records_received, fixed.records_accepted) == (1, 1)
        assert [r.line for r in hw.list_quarantine(first.transaction_id)] == [4]
        resolved = list(hw.list_quarantine(first.transaction_id, status="resolved"))
        assert [r.resolved_by for r in resolved] == [fixed.transaction_id]
        with pytest.raises(InvalidRequest):
            hw.resubmit(first.transaction_id, {2: {"order_id": "A-1", "amount": 1}})
    # the same from the command line
    shown = run(tenant.env(), "transactions", "quarantine", first.transaction_id)
    assert shown.returncode == 0 and "/amount" in shown.stdout, shown.stderr
    corrections = tmp_path / "fix.json"
    corrections.write_text('[{"line": 4, "data": {"order_id": "A-3", "amount": 3}}]')
    done = run(
        tenant.env(),
        "transactions", "resubmit", first.transaction_id,
        "--corrections", str(corrections), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json_lines(done.stdout)[0]["records_accepted"] == 1
