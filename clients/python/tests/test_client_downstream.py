"""The record feed and exports from the client's side, against a real server:
`follow()` resumes from a saved cursor, `export(wait=True, path=...)` downloads a file
pyarrow reads, and the `records follow` and `exports` commands."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_client_cli import json_lines, run

from conftest import Tenant, orders
from headwater_client import NotFound

pytestmark = pytest.mark.http


def test_follow_reads_every_record_once_and_resumes_from_a_saved_cursor(tenant: Tenant) -> None:
    with tenant.client() as hw:
        hw.push(tenant.client_id, "orders", list(orders(5)))
        pages = list(hw.follow(tenant.client_id, "orders", limit=2, until_idle=True))
        assert [len(p.records) for p in pages] == [2, 2, 1]
        seen = [r.data["order_id"] for p in pages for r in p.records]
        assert seen == [f"O-{n}" for n in range(5)]
        saved = pages[-1].next_cursor
        hw.push(tenant.client_id, "orders", list(orders(2, start=5)))
        resumed = list(hw.follow(tenant.client_id, "orders", after=saved, until_idle=True))
        assert [r.data["order_id"] for p in resumed for r in p.records] == ["O-5", "O-6"]


def test_follow_waits_for_a_commit(tenant: Tenant) -> None:
    with tenant.client() as hw:
        hw.push(tenant.client_id, "orders", list(orders(1)))
        cursor = list(hw.follow(tenant.client_id, "orders", until_idle=True))[-1].next_cursor
        pusher = threading.Timer(
            0.5, lambda: hw.push(tenant.client_id, "orders", list(orders(1, start=9)))
        )
        pusher.start()
        page = next(iter(hw.follow(tenant.client_id, "orders", after=cursor, wait=20)))
        pusher.join()
        assert [r.data["order_id"] for r in page.records] == ["O-9"]


def test_export_waits_and_downloads_with_progress(tenant: Tenant, tmp_path: Path) -> None:
    with tenant.client() as hw:
        hw.push(tenant.client_id, "orders", list(orders(30)))
        seen: list[tuple[int, int]] = []
        target = tmp_path / "orders.parquet"
        done = hw.export(
            tenant.client_id,
            "orders",
            "parquet",
            wait=True,
            path=target,
            progress=lambda got, total: seen.append((got, total)),
        )
        assert done.status == "completed" and done.record_count == 30
        assert seen and seen[-1] == (done.file_size, done.file_size)
        table = pq.read_table(target)
        assert sorted(table.column("order_id").to_pylist()) == sorted(f"O-{n}" for n in range(30))
        assert hw.get_export(done.export_id).download_url is not None
        queued = hw.export(tenant.client_id, "orders", "csv")
        assert queued.status == "queued" and queued.download_url is None
        with pytest.raises(NotFound):
            hw.get_export("00000000-0000-4000-8000-000000000000")
        listed = [e.export_id for e in hw.list_exports(dataset_id="orders")]
        assert listed == [queued.export_id, done.export_id]
        completed = list(hw.list_exports(status="completed"))  # the csv one may be too
        assert done.export_id in [e.export_id for e in completed]
        assert {e.status for e in completed} == {"completed"}


def test_cli_follows_with_a_cursor_file_and_exports_to_a_file(
    tenant: Tenant, tmp_path: Path
) -> None:
    with tenant.client() as hw:
        hw.push(tenant.client_id, "orders", list(orders(3)))
    cursor = tmp_path / "cursor"
    args = ["records", "follow", "-c", tenant.client_id, "-d", "orders"]
    done = run(tenant.env(), *args, "--cursor-file", str(cursor), "--until-idle")
    assert done.returncode == 0, done.stderr
    assert [r["data"]["order_id"] for r in json_lines(done.stdout)] == ["O-0", "O-1", "O-2"]
    assert cursor.read_text().strip()
    again = run(tenant.env(), *args, "--cursor-file", str(cursor), "--until-idle")
    assert again.returncode == 0 and json_lines(again.stdout) == []
    target = tmp_path / "orders.csv"
    exported = run(
        tenant.env(),
        "exports", "create", "-c", tenant.client_id, "-d", "orders",
        "--format", "csv", "--file", str(target), "--json",
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    answer = json_lines(exported.stdout)[0]
    assert answer["status"] == "completed" and answer["record_count"] == 3
    assert target.read_text().count("\n") == 4  # header and three records
    shown = run(tenant.env(), "exports", "show", answer["export_id"], "--json")
    assert json_lines(shown.stdout)[0]["export_id"] == answer["export_id"]
    listed = run(tenant.env(), "exports", "list", "-d", "orders", "--status", "completed")
    assert listed.returncode == 0, listed.stderr
    assert answer["export_id"] in listed.stdout and "completed" in listed.stdout
