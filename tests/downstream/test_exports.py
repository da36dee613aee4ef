"""Exports: queued, written by the worker, downloaded through a presigned GET, read by
pyarrow and DuckDB; formats, typed columns, bounds, events, failures, lifetime,
tampering, scopes and tenants (contract section 14)."""

from __future__ import annotations

import csv
import io
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import duckdb
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import update
from starlette.testclient import TestClient

from headwater import worker
from headwater.config import Settings
from headwater.exports import service as exports
from headwater.exports import writing
from headwater.exports.models import Export
from headwater.kit.clock import utcnow
from headwater.runtime import Runtime
from tests.downstream.conftest import FeedTenant
from tests.factories import assert_problem, auth, create_credential, database, get_token


def run_exports(client: TestClient) -> int:
    runtime: Runtime = client.app.state.runtime  # type: ignore[attr-defined]
    ran = 0
    while worker.export_one(runtime, "test-export-worker"):
        ran += 1
    return ran


def ask(tenant: FeedTenant, status: int = 202, **body: Any) -> Any:
    request = {"client_id": tenant.client_id, "dataset_id": "orders", "format": "parquet"} | body
    response = tenant.client.post("/platform/v1/exports", json=request, headers=tenant.headers)
    assert response.status_code == status, response.text
    return response.json()


def read(tenant: FeedTenant, export_id: str, status: int = 200) -> Any:
    response = tenant.client.get(f"/platform/v1/exports/{export_id}", headers=tenant.headers)
    assert response.status_code == status, response.text
    return response.json()


def fetch(client: TestClient, url: str) -> bytes:
    """GET a download URL of the embedded store through the test client."""
    parts = urlsplit(url)
    response = client.get(f"{parts.path}?{parts.query}")
    assert response.status_code == 200, response.text
    return response.content


def export(tenant: FeedTenant, **body: Any) -> tuple[dict[str, Any], bytes]:
    queued = ask(tenant, **body)
    assert queued["status"] == "queued"
    # other tests' exports may wait in the same queue: the worker runs them all
    assert run_exports(tenant.client) >= 1
    done = read(tenant, queued["export_id"])
    assert done["status"] == "completed", done
    return done, fetch(tenant.client, done["download_url"])


def expire(tenant: FeedTenant, export_id: str) -> int:
    """Move the export's lifetime into the past, then the worker's purge: how many files
    it deleted."""
    runtime: Runtime = tenant.client.app.state.runtime  # type: ignore[attr-defined]
    with runtime.db.begin() as connection:
        connection.execute(
            update(Export)
            .where(Export.id == uuid.UUID(export_id))
            .values(available_until=utcnow() - timedelta(seconds=1))
        )
    return exports.purge(runtime.db, runtime.store)


def push_mixed(tenant: FeedTenant) -> None:
    tenant.push_orders(1, 2)
    response = tenant.push(
        {
            "order_id": "A-3",
            "amount": 7,
            "quantity": 4,
            "paid": True,
            "placed_at": "2026-11-22T10:00:00+01:00",
            "customer-email": "ann@example.com",
        }
    )
    assert response.status_code == 200, response.text


def test_a_parquet_export_has_typed_columns_and_reads_in_pyarrow_and_duckdb(
    feed_tenant: FeedTenant, tmp_path: Path
) -> None:
    push_mixed(feed_tenant)
    done, body = export(feed_tenant)
    assert done["record_count"] == 3
    assert done["file_size"] == len(body)
    assert set(done) >= {
        "export_id", "client_id", "dataset_id", "format", "status", "record_count",
        "file_size", "download_url", "expires_at", "created_at", "completed_at",
    }  # fmt: skip
    table = pq.read_table(io.BytesIO(body))
    schema = table.schema
    assert schema.field("record_id").type == pa.string()
    assert schema.field("schema_version").type == pa.int32()
    assert schema.field("ingested_at").type == pa.timestamp("us", tz="UTC")
    assert schema.field("amount").type == pa.float64()
    assert schema.field("quantity").type == pa.int64()
    assert schema.field("paid").type == pa.bool_()
    assert schema.field("placed_at").type == pa.timestamp("us", tz="UTC")
    assert schema.field("order_id").type == pa.string()
    rows = {row["order_id"]: row for row in table.to_pylist()}
    assert rows["A-3"]["quantity"] == 4 and rows["A-3"]["paid"] is True
    assert rows["A-3"]["placed_at"].isoformat() == "2026-11-22T09:00:00+00:00"
    assert rows["A-1"]["quantity"] is None
    records = {r["record_id"]: r for r in feed_tenant.records()}
    for row in table.to_pylist():
        assert records[row["record_id"]]["transaction_id"] == row["transaction_id"]
    path = tmp_path / "orders.parquet"
    path.write_bytes(body)
    found = duckdb.sql(
        f"SELECT order_id, amount, quantity FROM read_parquet('{path}') ORDER BY order_id"
    ).fetchall()
    assert found == [("A-1", 11.0, None), ("A-2", 12.0, None), ("A-3", 7.0, 4)]


def test_ndjson_and_csv_exports_hold_every_record(feed_tenant: FeedTenant) -> None:
    push_mixed(feed_tenant)
    done, body = export(feed_tenant, format="ndjson")
    lines = [orjson.loads(line) for line in body.splitlines()]
    by_id = {r["record_id"]: r for r in feed_tenant.records()}
    assert len(lines) == 3 == done["record_count"]
    for line in lines:
        assert line == by_id[line["record_id"]]
    done, body = export(feed_tenant, format="csv")
    table = list(csv.DictReader(io.StringIO(body.decode())))
    assert len(table) == 3
    assert list(table[0]) == [
        "record_id", "transaction_id", "schema_version", "ingested_at", "transform_version",
        "amount", "channel", "customer-email", "order_id", "paid", "placed_at", "quantity",
    ]  # fmt: skip
    third = next(row for row in table if row["order_id"] == "A-3")
    assert third["paid"] == "true" and third["quantity"] == "4"
    assert third["ingested_at"] == by_id[third["record_id"]]["ingested_at"]
    assert third["placed_at"] == "2026-11-22T09:00:00.000Z"


FORMULAS = ["=cmd|' /C calc'!A0", "@SUM(1+1)", "+1+2", "-2+3", '=HYPERLINK("x")']


def test_csv_cells_that_a_spreadsheet_would_run_are_escaped(feed_tenant: FeedTenant) -> None:
    records = [
        {
            "order_id": text,
            "amount": 5,
            "quantity": -5,
            "channel": "\t=1+1",
            "customer-email": "a@b.example",
        }
        for text in FORMULAS
    ]
    assert feed_tenant.push(records).status_code == 200
    stored = {r["data"]["order_id"]: r["data"] for r in feed_tenant.records()}
    _, body = export(feed_tenant, format="csv")
    table = {row["record_id"]: row for row in csv.DictReader(io.StringIO(body.decode()))}
    by_id = {r["record_id"]: r["data"] for r in feed_tenant.records()}
    assert len(table) == len(FORMULAS)
    for record_id, row in table.items():
        sent = by_id[record_id]
        assert row["order_id"] == "'" + sent["order_id"]
        assert row["channel"] == "'" + sent["channel"]  # the tab kept, and escaped
        assert row["quantity"] == "-5"  # a number is not a formula
    assert set(stored) == set(FORMULAS)

    done, body = export(feed_tenant, format="csv", csv_formulas="as_sent")
    assert done["csv_formulas"] == "as_sent"
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    assert sorted(row["order_id"] for row in rows) == sorted(FORMULAS)
    _, body = export(feed_tenant, format="ndjson")
    assert sorted(orjson.loads(line)["data"]["order_id"] for line in body.splitlines()) == sorted(
        FORMULAS
    )
    assert ask(feed_tenant, format="csv", csv_formulas="run", status=400)


def test_an_empty_dataset_exports_an_empty_file(feed_tenant: FeedTenant) -> None:
    for format in ("parquet", "csv", "ndjson"):
        done, body = export(feed_tenant, format=format)
        assert done["record_count"] == 0
        if format == "parquet":
            assert pq.read_table(io.BytesIO(body)).num_rows == 0
        elif format == "csv":
            assert body.decode().splitlines()[0].startswith('"record_id"')
        else:
            assert body == b""


def test_bounds_select_by_ingestion_time(feed_tenant: FeedTenant) -> None:
    feed_tenant.push_orders(1)
    time.sleep(0.02)
    middle = utcnow()
    time.sleep(0.02)
    feed_tenant.push_orders(2)
    bound = middle.isoformat().replace("+00:00", "Z")
    _, body = export(feed_tenant, format="ndjson", ingested_after=bound)
    assert [orjson.loads(x)["data"]["order_id"] for x in body.splitlines()] == ["A-2"]
    _, body = export(feed_tenant, format="ndjson", ingested_before=bound)
    assert [orjson.loads(x)["data"]["order_id"] for x in body.splitlines()] == ["A-1"]


def test_columns_follow_every_schema_version(feed_tenant: FeedTenant) -> None:
    feed_tenant.push_orders(1)
    schema = {
        "type": "object",
        "properties": {
            "order_id": {"type": "string"},
            "amount": {"type": "integer"},  # was number: stays number
            "quantity": {"type": "string"},  # was integer: JSON text
            "tags": {"type": "array", "items": {"type": "string"}},
            "record_id": {"type": "string"},  # one of the record's own names
        },
    }
    response = feed_tenant.client.put(
        f"/admin/v1/clients/{feed_tenant.client_id}/datasets/orders/options",
        json={"options": {"compatibility": "none"}},
        headers=feed_tenant.admin,
    )
    assert response.status_code == 200, response.text
    feed_tenant.add_schema_version(schema)
    pushed = feed_tenant.push(
        {"order_id": "B-1", "amount": 3, "quantity": "many", "tags": ["x"], "record_id": "mine"}
    )
    assert pushed.status_code == 200, pushed.text
    _, body = export(feed_tenant)
    table = pq.read_table(io.BytesIO(body))
    assert table.schema.field("amount").type == pa.float64()
    assert table.schema.field("quantity").type == pa.string()
    assert table.schema.field("tags").type == pa.string()
    assert table.schema.field("data.record_id").type == pa.string()
    # properties of every version, in the order of their names
    assert table.schema.names[5:] == [
        "amount", "channel", "customer-email", "order_id", "paid", "placed_at", "quantity",
        "data.record_id", "tags",
    ]  # fmt: skip
    rows = {row["order_id"]: row for row in table.to_pylist()}
    assert rows["B-1"]["quantity"] == '"many"' and rows["B-1"]["tags"] == '["x"]'
    assert rows["B-1"]["data.record_id"] == "mine"
    assert rows["A-1"]["amount"] == 11.0 and rows["B-1"]["amount"] == 3.0
    assert [v for v in (rows["A-1"]["schema_version"], rows["B-1"]["schema_version"])] == [1, 2]


def test_completed_and_failed_exports_write_their_events(
    client: TestClient, admin: dict[str, str], settings: Settings, feed_tenant: FeedTenant
) -> None:
    reader = create_credential(client, admin, feed_tenant.company_id, scopes=["events:read"])
    headers = auth(get_token(client, reader["client_id"], reader["client_secret"]))
    feed_tenant.push_orders(1)
    done, _ = export(feed_tenant, format="csv")
    failing = ask(feed_tenant)
    with database(settings) as db, db.begin() as connection:  # as if three attempts had died
        connection.execute(
            update(Export).where(Export.id == uuid.UUID(failing["export_id"])).values(attempts=3)
        )
    run_exports(feed_tenant.client)
    failed = read(feed_tenant, failing["export_id"])
    assert failed["status"] == "failed" and "3 times" in failed["error"]
    assert failed["download_url"] is None
    events = client.get("/platform/v1/events", params={"limit": 1000}, headers=headers).json()
    mine = [e for e in events["data"] if e["type"].startswith("export.")]
    assert [e["type"] for e in mine] == ["export.completed", "export.failed"]
    assert mine[0]["data"] == done | {"download_url": None, "expires_at": None}
    assert mine[1]["data"] == failed


def test_a_failing_attempt_is_retried_then_fails(
    settings: Settings, feed_tenant: FeedTenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    feed_tenant.push_orders(1)
    run_exports(feed_tenant.client)  # other tests' exports, first
    queued = ask(feed_tenant)

    def broken(*args: Any, **kwargs: Any) -> int:
        raise OSError("disk full")

    monkeypatch.setattr("headwater.exports.writing.write", broken)
    runtime: Runtime = feed_tenant.client.app.state.runtime  # type: ignore[attr-defined]
    for _ in range(3):
        assert worker.export_one(runtime, "w")
        assert read(feed_tenant, queued["export_id"])["status"] == "queued"
    assert not worker.export_one(runtime, "w")  # the fourth claim fails it
    assert read(feed_tenant, queued["export_id"])["status"] == "failed"


def test_a_file_is_deleted_after_its_lifetime(settings: Settings, feed_tenant: FeedTenant) -> None:
    feed_tenant.push_orders(1)
    done, _ = export(feed_tenant)
    assert expire(feed_tenant, done["export_id"]) >= 1
    problem = assert_problem(
        feed_tenant.client.get(
            f"/platform/v1/exports/{done['export_id']}", headers=feed_tenant.headers
        ),
        410,
        "export_expired",
    )
    assert "HEADWATER_EXPORT_RETENTION_HOURS" in problem["detail"]
    parts = urlsplit(done["download_url"])
    assert feed_tenant.client.get(f"{parts.path}?{parts.query}").status_code == 404


def test_a_tampered_or_expired_download_is_refused(feed_tenant: FeedTenant) -> None:
    feed_tenant.push_orders(1)
    done, _ = export(feed_tenant)
    parts = urlsplit(done["download_url"])
    query = dict(parse_qsl(parts.query))
    other_key = "0" * 32
    for path, changed in (
        (parts.path, query | {"filename": "other.parquet"}),
        (parts.path, query | {"expires": str(int(query["expires"]) + 60)}),
        (parts.path, query | {"signature": "0" * 64}),
        (parts.path, query | {"extra": "1"}),
        (parts.path, {k: v for k, v in query.items() if k != "signature"}),
        (f"/downloads/{other_key}", query),
    ):
        response = feed_tenant.client.get(f"{path}?{urlencode(changed)}")
        assert_problem(response, 403, "download_refused")
    runtime: Runtime = feed_tenant.client.app.state.runtime  # type: ignore[attr-defined]
    store: Any = runtime.store
    key = parts.path.rsplit("/", 1)[1]
    past = int(time.time()) - 10
    signature = store.download_signature(key=key, expires=past, filename=query["filename"])
    expired = query | {"expires": str(past), "signature": signature}
    response = feed_tenant.client.get(f"{parts.path}?{urlencode(expired)}")
    assert "expired" in assert_problem(response, 403, "download_refused")["detail"]
    # the untampered URL works, with the file's name and type
    good = feed_tenant.client.get(f"{parts.path}?{parts.query}")
    assert good.status_code == 200
    assert good.headers["content-type"] == "application/vnd.apache.parquet"
    assert query["filename"] in good.headers["content-disposition"]


def test_bad_requests_answer_400_naming_the_member(feed_tenant: FeedTenant) -> None:
    for body, member in (
        ({"format": "xlsx"}, "format"),
        ({"ingested_after": "yesterday"}, "ingested_after"),
        (
            {
                "ingested_after": "2026-11-24T00:00:00Z",
                "ingested_before": "2026-11-23T00:00:00Z",
            },
            "ingested_after",
        ),
        ({"dataset_id": "no such id!"}, "dataset_id"),
        ({"extra": 1}, "extra"),
    ):
        response = feed_tenant.client.post(
            "/platform/v1/exports",
            json={"client_id": feed_tenant.client_id, "dataset_id": "orders", "format": "csv"}
            | body,
            headers=feed_tenant.headers,
        )
        assert_problem(response, 400)
        assert member in response.text, (body, response.text)
    response = feed_tenant.client.get(
        "/platform/v1/exports/not-a-uuid", headers=feed_tenant.headers
    )
    assert_problem(response, 400)


def test_exports_are_the_callers_companys_alone(
    client: TestClient,
    admin: dict[str, str],
    feed_tenant: FeedTenant,
    other_feed_tenant: FeedTenant,
) -> None:
    theirs = ask(other_feed_tenant)
    assert_problem(
        feed_tenant.client.get(
            f"/platform/v1/exports/{theirs['export_id']}", headers=feed_tenant.headers
        ),
        404,
        "export_not_found",
    )
    response = feed_tenant.client.post(
        "/platform/v1/exports",
        json={"client_id": other_feed_tenant.client_id, "dataset_id": "orders", "format": "csv"},
        headers=feed_tenant.headers,
    )
    assert_problem(response, 403)
    response = feed_tenant.client.post(
        "/platform/v1/exports",
        json={"client_id": feed_tenant.client_id, "dataset_id": "nope", "format": "csv"},
        headers=feed_tenant.headers,
    )
    assert_problem(response, 404)
    writer = create_credential(client, admin, feed_tenant.company_id, scopes=["data:write"])
    token = get_token(client, writer["client_id"], writer["client_secret"])
    response = client.post(
        "/platform/v1/exports",
        json={"client_id": feed_tenant.client_id, "dataset_id": "orders", "format": "csv"},
        headers=auth(token),
    )
    assert_problem(response, 403)
    assert client.get(f"/platform/v1/exports/{theirs['export_id']}").status_code == 401


def listed(tenant: FeedTenant, **params: Any) -> Any:
    response = tenant.client.get("/platform/v1/exports", params=params, headers=tenant.headers)
    assert response.status_code == 200, response.text
    return response.json()


def test_the_list_answers_the_companys_exports_newest_first(
    feed_tenant: FeedTenant, other_feed_tenant: FeedTenant
) -> None:
    feed_tenant.push_orders(1)
    done, _ = export(feed_tenant, format="csv")
    gone, _ = export(feed_tenant, format="ndjson")
    queued = ask(feed_tenant)
    ask(other_feed_tenant)
    assert expire(feed_tenant, gone["export_id"]) >= 1

    page = listed(feed_tenant)
    # the deleted one is left out, and the other company's is never seen
    assert [e["export_id"] for e in page["data"]] == [queued["export_id"], done["export_id"]]
    assert page["total_entries"] == 2
    # each as the item answers it, with a download URL once completed
    first, second = page["data"]
    assert first["status"] == "queued" and first["download_url"] is None
    item = read(feed_tenant, done["export_id"])
    assert {k: v for k, v in second.items() if k not in ("download_url", "expires_at")} == {
        k: v for k, v in item.items() if k not in ("download_url", "expires_at")
    }
    assert fetch(feed_tenant.client, second["download_url"]).startswith(b'"record_id",')
    # filters and paging
    completed = listed(feed_tenant, status="completed")["data"]
    assert [e["export_id"] for e in completed] == [done["export_id"]]
    assert listed(feed_tenant, dataset_id="other")["data"] == []
    mine = listed(feed_tenant, client_id=feed_tenant.client_id, page_size=1, page=1)
    assert [e["export_id"] for e in mine["data"]] == [done["export_id"]]
    assert mine["total_pages"] == 2


def test_the_list_refuses_what_it_cannot_answer(
    client: TestClient,
    admin: dict[str, str],
    feed_tenant: FeedTenant,
    other_feed_tenant: FeedTenant,
) -> None:
    assert_problem(
        feed_tenant.client.get(
            "/platform/v1/exports",
            params={"client_id": other_feed_tenant.client_id},
            headers=feed_tenant.headers,
        ),
        403,
    )
    for params, member in (
        ({"status": "done"}, "status"),
        ({"page_size": 0}, "page_size"),
        ({"format": "csv"}, "format"),
    ):
        response = feed_tenant.client.get(
            "/platform/v1/exports", params=params, headers=feed_tenant.headers
        )
        assert member in assert_problem(response, 400)["detail"] + response.text
    writer = create_credential(client, admin, feed_tenant.company_id, scopes=["data:write"])
    token = get_token(client, writer["client_id"], writer["client_secret"])
    assert_problem(client.get("/platform/v1/exports", headers=auth(token)), 403)
    assert client.get("/platform/v1/exports").status_code == 401


def test_the_api_does_not_load_pyarrow() -> None:
    """pyarrow is the worker's (exports/runner.py): the API's start-up never pays for it."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", "import sys, headwater.main; print('pyarrow' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "False"


def test_a_look_at_an_empty_export_queue_does_not_load_pyarrow(tmp_path: Path) -> None:
    """An API process runs an export worker of its own; its polls of an empty queue
    leave pyarrow (about 30 MB) unloaded until it has an export to run."""
    import os
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from headwater import worker\n"
        "from headwater.config import Settings\n"
        "from headwater.migrations import upgrade\n"
        "from headwater.runtime import build_runtime\n"
        "settings = Settings(data_dir=sys.argv[1])\n"
        "upgrade(settings)\n"
        "print(worker.export_one(build_runtime(settings), 'w'), 'pyarrow' in sys.modules)\n"
    )
    env = {name: value for name, value in os.environ.items() if not name.startswith("HEADWATER_")}
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    assert done.stdout.split() == ["False", "False"]


def test_an_attempt_that_fails_mid_file_leaves_nothing_and_the_next_completes(
    feed_tenant: FeedTenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer fails after reading began (PostgreSQL: while COPY streams on its
    thread): the attempt ends, no file is left, and the next attempt writes it whole."""
    feed_tenant.push_orders(*range(50))
    run_exports(feed_tenant.client)  # other tests' exports, first
    queued = ask(feed_tenant)
    calls = {"n": 0}
    real = writing.typed

    def failing_once(batch: Any, props: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError("disk full")
        return real(batch, props)

    monkeypatch.setattr(writing, "typed", failing_once)
    runtime: Runtime = feed_tenant.client.app.state.runtime  # type: ignore[attr-defined]
    assert worker.export_one(runtime, "w")
    assert read(feed_tenant, queued["export_id"])["status"] == "queued"
    assert worker.export_one(runtime, "w")
    done = read(feed_tenant, queued["export_id"])
    assert done["status"] == "completed" and done["record_count"] == 50
    assert pq.read_table(io.BytesIO(fetch(feed_tenant.client, done["download_url"]))).num_rows == 50


def test_the_feed_and_every_export_format_name_the_transform_version(
    feed_tenant: FeedTenant,
) -> None:
    """A record stored before the dataset had steps names none; one stored through
    version 1 names it, with the steps' output, in the feed and in each format."""
    feed_tenant.push_orders(1)
    response = feed_tenant.client.put(
        f"/admin/v1/clients/{feed_tenant.client_id}/datasets/orders/transforms",
        json={"steps": [{"op": "mask", "path": "/order_id", "keep_last": 1}]},
        headers=feed_tenant.admin,
    )
    assert response.status_code == 200, response.text
    feed_tenant.push_orders(2)
    fed, _ = feed_tenant.follow()
    assert [(r["data"]["order_id"], r["transform_version"]) for r in fed] == [
        ("A-1", None),
        ("**2", 1),
    ]
    _, body = export(feed_tenant, format="ndjson")
    lines = [orjson.loads(line) for line in body.splitlines()]
    assert {line["data"]["order_id"]: line["transform_version"] for line in lines} == {
        "A-1": None,
        "**2": 1,
    }
    _, body = export(feed_tenant)
    table = pq.read_table(io.BytesIO(body)).to_pylist()
    assert {row["order_id"]: row["transform_version"] for row in table} == {"A-1": None, "**2": 1}
    _, body = export(feed_tenant, format="csv")
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    assert {row["order_id"]: row["transform_version"] for row in rows} == {"A-1": "", "**2": "1"}
