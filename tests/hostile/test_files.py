"""Hostile files (contract section 15): expansion limits, blank lines at parser speed, deep
and NUL-holding rows as row errors, one file per company at a time, jobs handed back at
shutdown."""

from __future__ import annotations

import gzip
import io
import threading
import uuid
from typing import Any

import pytest
from sqlalchemy import event
from starlette.testclient import TestClient

from headwater import worker
from headwater.files import parsers, processing
from headwater.runtime import Runtime
from tests.factories import create_company
from tests.files.conftest import CSV_HEADER, FileTenant, csv_rows, run_worker


@pytest.fixture
def files(client: TestClient, admin: dict[str, str]) -> FileTenant:
    return FileTenant(client, admin, create_company(client, admin, f"F {uuid.uuid4().hex[:6]}"))


def _runtime(client: TestClient) -> Runtime:
    return client.app.state.runtime  # type: ignore[attr-defined,no-any-return]


def test_a_gzip_bomb_is_rejected_past_200_times_its_size(files: FileTenant) -> None:
    bomb = gzip.compress(b"\n" * (8 * 1024 * 1024), compresslevel=9)
    assert len(bomb) * 200 < 8 * 1024 * 1024  # the ratio is what refuses it
    transaction = files.upload(bomb, "application/x-ndjson", file_name="bomb.ndjson.gz")
    assert transaction["status"] == "rejected"
    assert transaction["records_accepted"] == 0
    error = transaction["errors"][0]
    assert error["keyword"] == "file"
    assert "200 times its compressed size" in error["message"]


def test_the_absolute_expansion_limit_rejects_too(
    make_client: object, admin: dict[str, str]
) -> None:
    small = make_client(max_expanded_bytes=10_000)  # type: ignore[operator]
    tenant = FileTenant(small, admin, create_company(small, admin, "Small"))
    body = gzip.compress((CSV_HEADER + csv_rows(400)).encode())
    transaction = tenant.upload(body, file_name="orders.csv.gz")
    assert transaction["status"] == "rejected"
    assert "HEADWATER_MAX_EXPANDED_BYTES" in transaction["errors"][0]["message"]


@pytest.mark.parametrize("content_type", ["text/csv", "application/x-ndjson"])
def test_blank_lines_are_passed_over_and_lines_keep_their_numbers(
    files: FileTenant, content_type: str
) -> None:
    blank = "\n" * 200_000
    if content_type == "text/csv":
        body = CSV_HEADER + blank + csv_rows(1) + "\r\n\r\n" + "A-9,bad,x,1,true,\n" + blank
    else:
        body = (
            blank + '{"order_id": "A-0", "amount": 1}\n' + "  \n\t\n" + '{"order_id": 5}\n' + blank
        )
    transaction = files.upload(body, content_type)
    assert transaction["status"] == "rejected"
    assert transaction["records_received"] == 2
    lines = {e["line"] for e in transaction["errors"]}
    assert lines == ({200_005} if content_type == "text/csv" else {200_004})


def test_a_quoted_csv_field_keeps_its_blank_lines(files: FileTenant) -> None:
    body = 'order_id,amount\n"A\n\n\nB",1\nC,2\n'
    transaction = files.upload(body)
    assert transaction["status"] == "completed", transaction
    records = files.client.get(
        "/platform/v1/data",
        params={"client_id": files.client_id, "dataset_id": "orders"},
        headers=files.headers,
    ).json()["data"]
    assert sorted(r["data"]["order_id"] for r in records) == ["A\n\n\nB", "C"]


@pytest.mark.parametrize("content_type", ["application/json", "application/x-ndjson"])
@pytest.mark.parametrize("levels", [33, 2000])
def test_a_deep_record_is_a_row_error_not_a_failed_job(
    make_client: object, admin: dict[str, str], content_type: str, levels: int
) -> None:
    quarantining = make_client()  # type: ignore[operator]
    tenant = FileTenant(
        quarantining, admin, create_company(quarantining, admin, "Deep"), invalid_rows="quarantine"
    )
    deep = '{"order_id": "D", "amount": 1, "x": ' + "[" * levels + "]" * levels + "}"
    good = '{"order_id": "G", "amount": 2}'
    body = f"[{good},\n{deep}]" if content_type == "application/json" else f"{good}\n{deep}\n"
    transaction = tenant.upload(body, content_type)
    assert transaction["status"] == "completed", transaction
    assert transaction["records_accepted"] == 1
    assert transaction["records_rejected"] == 1
    assert transaction["errors"][0]["keyword"] == "depth"
    assert transaction["errors"][0]["line"] == 2


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("text/csv", "order_id,amount\nA\x00,1\nB,2\n"),
        ("application/x-ndjson", '{"order_id": "A\\u0000", "amount": 1}\n{"order_id": "B"}\n'),
        ("application/json", '[{"order_id": "A", "amount": 1, "n\\u0000": 1}]'),
    ],
)
def test_nul_in_a_row_is_a_row_error_with_keyword_characters(
    files: FileTenant, content_type: str, body: str
) -> None:
    transaction = files.upload(body, content_type)
    assert transaction["status"] == "rejected"
    assert transaction["errors"][0]["keyword"] == "characters"
    assert transaction["errors"][0]["line"] in (1, 2)


def test_nul_past_the_first_chunk_read_is_found_in_its_row(files: FileTenant) -> None:
    """The parser looks for U+0000 in each piece it reads (1 MiB), then only in the rows
    of a file that holds one: a NUL in a later piece is still its row's error."""
    rows = 20_000  # of 63 bytes, 1.26 MB: the NUL comes in the second piece read
    body = "order_id,amount\n" + f"{'A' * 60},1\n" * rows + "B\x00,2\nC,3\n"
    assert body.index("\x00") > 1024 * 1024
    transaction = files.upload(body, "text/csv")
    assert transaction["status"] == "rejected"
    assert transaction["errors"] == [
        {
            "record": rows,
            "line": rows + 2,
            "path": "/order_id",  # the field that holds it, as a push's error names it
            "keyword": "characters",
            "message": "holds a NUL (U+0000) character, which cannot be stored",
        }
    ]


def test_one_file_per_company_at_a_time_while_another_waits(
    client: TestClient, admin: dict[str, str]
) -> None:
    big = FileTenant(client, admin, create_company(client, admin, "Big"))
    small = FileTenant(client, admin, create_company(client, admin, "Small"))
    runtime = _runtime(client)
    run_worker(client)  # nothing else of this session's is queued
    tickets = []
    for tenant in (big, big, small):
        ticket = tenant.upload_url()
        assert tenant.put(ticket, (CSV_HEADER + csv_rows(3)).encode()).status_code == 200
        tickets.append((tenant, ticket))
    settings = worker.job_settings(runtime.settings)
    first = processing.claim_next(runtime.db, worker="w1", bucket="", settings=settings)
    second = processing.claim_next(runtime.db, worker="w2", bucket="", settings=settings)
    third = processing.claim_next(runtime.db, worker="w3", bucket="", settings=settings)
    assert first is not None and second is not None
    # the second worker passed over Big's second file for Small's, and nothing else of
    # Big's is claimed while its first runs
    assert third is None
    for job, name in ((first, "w1"), (second, "w2")):
        processing.run_job(runtime.db, runtime.store, job, worker=name, settings=settings)
    statuses = [t.transaction(k["transaction_id"])["status"] for t, k in tickets]
    assert statuses == ["completed", "processing", "completed"]
    run_worker(client)
    assert big.transaction(tickets[1][1]["transaction_id"])["status"] == "completed"


def _loops(plan: dict[str, Any]) -> list[int]:
    """Every node's `Actual Loops` in an `EXPLAIN (ANALYZE, FORMAT JSON)` plan."""
    return [plan["Actual Loops"]] + [n for child in plan.get("Plans", []) for n in _loops(child)]


def test_a_busy_companys_queued_files_are_passed_over_without_a_probe_each(
    client: TestClient, admin: dict[str, str]
) -> None:
    """With one of a company's files being processed, a claim passes over the rest of
    its queue. Which companies are busy is read once a claim, not once a queued file:
    asked a file at a time, a claim of 2,000 queued files of one company took 12.7 s of
    PostgreSQL (3.6 million index probes) on a table the planner had no statistics for."""
    big = FileTenant(client, admin, create_company(client, admin, "Big queue"))
    runtime = _runtime(client)
    run_worker(client)  # nothing else of this session's is queued
    for _ in range(12):
        ticket = big.upload_url()
        assert big.put(ticket, (CSV_HEADER + csv_rows(1)).encode()).status_code == 200
    settings = worker.job_settings(runtime.settings)
    claims: list[tuple[str, Any]] = []

    def seen(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.startswith("SELECT file_jobs.id"):
            claims.append((statement, parameters))

    event.listen(runtime.db.engine, "before_cursor_execute", seen)
    try:
        first = processing.claim_next(runtime.db, worker="w1", bucket="", settings=settings)
        assert first is not None
        assert processing.claim_next(runtime.db, worker="w2", bucket="", settings=settings) is None
    finally:
        event.remove(runtime.db.engine, "before_cursor_execute", seen)
    if runtime.db.engine.dialect.name != "postgresql":
        return
    statement, parameters = claims[-1]
    with runtime.db.engine.connect() as connection:
        cursor = connection.connection.driver_connection.execute(  # type: ignore[union-attr]
            "EXPLAIN (ANALYZE, FORMAT JSON) " + statement, parameters
        )
        [[[plan]]] = cursor.fetchall()
        connection.rollback()
    # the eleven files passed over, each without a look at the company's other files
    assert max(_loops(plan["Plan"])) == 1, plan


def test_a_job_is_handed_back_when_the_process_stops(files: FileTenant) -> None:
    runtime = _runtime(files.client)
    run_worker(files.client)
    ticket = files.upload_url()
    assert files.put(ticket, (CSV_HEADER + csv_rows(5000)).encode()).status_code == 200
    stop = threading.Event()
    stop.set()  # SIGTERM arrived: the job is handed back at its first check
    assert worker.process_one(runtime, "stopping-worker", stop) is True
    assert files.transaction(ticket["transaction_id"])["status"] == "processing"
    assert files.transaction(ticket["transaction_id"])["records_accepted"] == 0
    # it runs again elsewhere, once, with this attempt not counted
    run_worker(files.client)
    done = files.transaction(ticket["transaction_id"])
    assert done["status"] == "completed"
    assert done["records_accepted"] == 5000


def test_parsing_a_large_run_of_blank_lines_is_linear() -> None:
    """1 GiB of blank lines is one regex pass a MiB (the benchmark times it); here the
    parser must get through 16 MiB (16 pieces; a parser that went back over what it had
    read would make some 10^14 steps of it) and find the record at the end."""
    body = b"\n" * (16 * 1024 * 1024) + b'{"a": 1}\n'
    found = list(
        parsers.rows(
            io.BytesIO(body),
            "application/x-ndjson",
            max_depth=32,
            compressed_size=len(body),
            max_expanded=len(body),
        )
    )
    assert [(r.line, r.data) for r in found] == [(16 * 1024 * 1024 + 1, {"a": 1})]
