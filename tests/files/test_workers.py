"""The durable queue: several workers, a worker killed mid-file, attempts, restarts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from starlette.testclient import TestClient

from headwater import worker
from headwater.config import Settings
from headwater.files.models import FileJob, FileUpload
from headwater.ingestion.models import Record
from headwater.runtime import Runtime
from tests.factories import SEALING_KEY
from tests.files.conftest import CSV_HEADER, FileTenant, csv_rows, run_worker, served_files
from tests.http_server import same_database, start_server
from tests.preloaded import Process


def runtime_of(client: TestClient) -> Runtime:
    return client.app.state.runtime  # type: ignore[attr-defined,no-any-return]


def stored(runtime: Runtime, transaction: str) -> tuple[int, int]:
    """(records of the transaction, distinct order ids among them)."""
    transaction_id = uuid.UUID(transaction)
    order_id = Record.data["order_id"].as_string()
    with runtime.db.read_session() as session:
        count, distinct = session.execute(
            select(func.count(), func.count(func.distinct(order_id))).where(
                Record.transaction_id == transaction_id
            )
        ).one()
    return int(count), int(distinct)


def shown(tenant: FileTenant, transaction: str) -> tuple[int, int]:
    """(records of the transaction, records of the dataset) as `GET /platform/v1/data`
    counts them: what a reader sees."""
    query = {"client_id": tenant.client_id, "dataset_id": "orders", "page_size": 1}
    counts = []
    for params in (query | {"transaction_id": transaction}, query):
        response = tenant.client.get("/platform/v1/data", params=params, headers=tenant.headers)
        assert response.status_code == 200, response.text
        counts.append(response.json()["total_entries"])
    return counts[0], counts[1]


def job_of(runtime: Runtime, transaction: str) -> Any:
    transaction_id = uuid.UUID(transaction)
    with runtime.db.read_session() as session:
        return session.execute(
            select(FileJob.state, FileJob.attempts, FileJob.claimed_by)
            .join(FileUpload, FileUpload.id == FileJob.file_id)
            .where(FileUpload.transaction_id == transaction_id)
        ).one()


def uploaded(tenant: FileTenant, rows: int, start: int = 0) -> str:
    ticket = tenant.upload_url()
    body = (CSV_HEADER + csv_rows(rows, start)).encode()
    assert tenant.put(ticket, body).status_code == 200
    return str(ticket["transaction_id"])


@pytest.mark.http
def test_several_workers_share_the_queue_without_processing_a_file_twice(
    file_tenant: FileTenant, backend: str
) -> None:
    runtime = runtime_of(file_tenant.client)
    run_worker(file_tenant.client)  # an empty queue to start from
    transactions = [uploaded(file_tenant, 2000, start=i * 2000) for i in range(8)]
    errors: list[BaseException] = []

    def work(slot: int) -> None:
        try:
            while worker.process_one(runtime, f"worker-{slot}"):
                pass
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(slot,)) for slot in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    for transaction_id in transactions:
        assert file_tenant.transaction(transaction_id)["status"] == "completed"
        assert stored(runtime, transaction_id) == (2000, 2000)
        state, attempts, _ = job_of(runtime, transaction_id)
        assert (state, attempts) == ("done", 1)


@contextmanager
def worker_inside_file(
    tenant: FileTenant, settings: Settings, transaction_id: str, log_name: str, **env: str
) -> Iterator[tuple[Process, Path]]:
    """A `headwater worker` process, once it has claimed the job and committed some of
    the file's batches (status `processing`); killed at the end if it still runs."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")} | {
        **same_database(settings.data_dir, settings.database_url),
        "HEADWATER_WEBHOOK_SECRET_KEY": SEALING_KEY,  # as the tests' app seals
        "HEADWATER_FILE_BATCH_ROWS": "1000",
        # PostgreSQL's batches commit every 0.1 s, not every second: caught mid-file in a
        # file as short as SQLite's, whose batches commit one by one
        "HEADWATER_FILE_COMMIT_SECONDS": "0.1",
        "HEADWATER_LOG_LEVEL": "WARNING",
        **env,
    }
    log = Path(settings.data_dir) / log_name
    with log.open("wb") as out:
        process = start_server(
            [sys.executable, "-m", "headwater.cli", "worker"],
            env=full,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while tenant.transaction(transaction_id)["started_at"] is None:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the worker never claimed the job"
            time.sleep(0.05)
        # well into the file: some of its batches committed (hidden)
        runtime = runtime_of(tenant.client)
        while stored(runtime, transaction_id)[0] == 0:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the worker never committed a batch"
            time.sleep(0.02)
        assert tenant.transaction(transaction_id)["status"] == "processing"
        yield process, log
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


# A file long enough to be caught mid-way: on an idle machine a worker read 150,000 rows
# in little more than a second, and its first batch is seen committed within 0.1 s
# (`worker_inside_file`). With PostgreSQL's default commits a second apart it took
# 450,000 there (CI saw 150,000 completed before the test looked): 300,000 more rows for
# the run after the kill to read, in each PostgreSQL test, and a second of reading before
# the kill instead of a tenth.
MID_FILE_ROWS = 150_000


@pytest.mark.http
@pytest.mark.long
def test_a_worker_killed_mid_file_leaves_a_job_that_runs_again_once(
    file_tenant: FileTenant,
    settings: Settings,
    make_client: Callable[..., TestClient],
) -> None:
    rows = MID_FILE_ROWS
    transaction_id = uploaded(file_tenant, rows)
    runtime = runtime_of(file_tenant.client)
    with worker_inside_file(file_tenant, settings, transaction_id, "killed-worker.log") as (
        process,
        _log,
    ):
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    # the killed run had committed batches (short transactions), yet none of them is
    # visible, and the job is still claimed
    assert stored(runtime, transaction_id)[0] > 0
    assert shown(file_tenant, transaction_id) == (0, 0)
    state, attempts, claimed_by = job_of(runtime, transaction_id)
    assert (state, attempts) == ("running", 1)
    # a fresh worker takes the job over once the claim is stale
    fresh = make_client(file_job_stale_seconds=0.2)
    deadline = time.monotonic() + 30
    # (the killed worker's database session may take a moment to end and free its lock)
    while not run_worker(fresh):
        assert time.monotonic() < deadline, "the job was never taken over"
        time.sleep(0.2)
    assert file_tenant.transaction(transaction_id)["status"] == "completed"
    assert file_tenant.transaction(transaction_id)["records_accepted"] == rows
    assert stored(runtime, transaction_id) == (rows, rows)  # the dead run's batches gone
    assert shown(file_tenant, transaction_id) == (rows, rows)
    state, attempts, claimed_by = job_of(runtime, transaction_id)
    assert (state, attempts, claimed_by) == ("done", 2, "test-worker")


def test_a_claim_that_is_not_stale_is_left_alone(
    file_tenant: FileTenant, make_client: Callable[..., TestClient]
) -> None:
    run_worker(file_tenant.client)  # an empty queue to start from
    transaction_id = uploaded(file_tenant, 10)
    runtime = runtime_of(file_tenant.client)
    settings = worker.job_settings(runtime.settings)
    from headwater.files import processing

    job_id = processing.claim_next(runtime.db, worker="elsewhere", bucket="", settings=settings)
    assert job_id is not None
    assert run_worker(file_tenant.client) == 0  # claimed a moment ago by a live worker
    assert job_of(runtime, transaction_id)[0] == "running"
    # the claimant itself finishes it
    assert processing.run_job(
        runtime.db, runtime.store, job_id, worker="elsewhere", settings=settings
    )
    assert file_tenant.transaction(transaction_id)["status"] == "completed"
    # and a worker that lost its claim does nothing
    assert not processing.run_job(
        runtime.db, runtime.store, job_id, worker="elsewhere", settings=settings
    )


def _object_path(runtime: Runtime, settings: Settings, transaction_id: str) -> Path:
    with runtime.db.read_session() as session:
        key = session.scalar(
            select(FileUpload.object_key).where(
                FileUpload.transaction_id == uuid.UUID(transaction_id)
            )
        )
    return settings.data_dir / "store" / "objects" / str(key)


def test_a_job_that_keeps_failing_fails_its_transaction(
    file_tenant: FileTenant, make_client: Callable[..., TestClient], settings: Settings
) -> None:
    app = make_client(file_job_max_attempts=2)
    run_worker(file_tenant.client)  # an empty queue to start from
    transaction_id = uploaded(file_tenant, 10)
    runtime = runtime_of(app)
    path = _object_path(runtime, settings, transaction_id)
    path.unlink()
    path.mkdir()  # the object cannot be read: every attempt fails
    try:
        assert run_worker(app) == 2
    finally:
        path.rmdir()
    transaction = file_tenant.transaction(transaction_id)
    assert transaction["status"] == "failed"
    assert "failed 2 times" in transaction["errors"][0]["message"]
    assert job_of(runtime, transaction_id)[:2] == ("done", 2)
    assert run_worker(app) == 0


def test_a_job_whose_stored_file_is_gone_fails_at_once(
    file_tenant: FileTenant, settings: Settings
) -> None:
    """No transaction stays `processing` without its stored bytes (the store lost the
    object, or a crash came between the steps that wrote it)."""
    run_worker(file_tenant.client)
    transaction_id = uploaded(file_tenant, 10)
    runtime = runtime_of(file_tenant.client)
    _object_path(runtime, settings, transaction_id).unlink()
    assert run_worker(file_tenant.client) == 1
    transaction = file_tenant.transaction(transaction_id)
    assert transaction["status"] == "failed" and transaction["error_count"] == 1
    [error] = transaction["errors"]
    assert error["keyword"] == "file" and "missing" in error["message"]
    assert job_of(runtime, transaction_id)[:2] == ("done", 1)
    assert run_worker(file_tenant.client) == 0


@pytest.mark.http
def test_serve_processes_uploads_by_itself_over_real_http(
    tmp_path: Path, database_url: str | None
) -> None:
    import httpx

    with served_files(tmp_path, database_url) as served:
        ticket = served.upload_url(file_name="o.csv")
        base = str(served.client.base_url).rstrip("/")
        assert ticket["upload_url"].startswith(base + "/uploads/")

        def body() -> Any:  # streamed in pieces, with no Content-Length
            yield CSV_HEADER.encode()
            for start in range(0, 5000, 1000):
                yield csv_rows(1000, start).encode()

        response = httpx.put(ticket["upload_url"], content=body(), headers=ticket["headers"])
        assert response.status_code == 200, response.text
        transaction = served.settled(ticket["transaction_id"])
        assert transaction["status"] == "completed"
        assert transaction["records_accepted"] == 5000

        # a PUT cut off mid-body leaves nothing, and the URL can be used again
        second = served.upload_url(file_name="cut.csv")
        _cut_off_put(second["upload_url"], declared=10_000, sent=b"order_id,amount\nA,1\n")
        # the server drops the partial file when it sees the connection close, which on a
        # loaded machine can take more than a moment
        incoming = tmp_path / "store" / "incoming"
        deadline = time.monotonic() + 30
        while list(incoming.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert list(incoming.iterdir()) == []
        assert served.transaction(second["transaction_id"])["status"] == "awaiting_upload"
        again = httpx.put(
            second["upload_url"], content=b"order_id,amount\nB,2\n", headers=second["headers"]
        )
        assert again.status_code == 200


def _cut_off_put(url: str, *, declared: int, sent: bytes) -> None:
    """Declare a body of `declared` bytes, send fewer, then close the connection."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    request = (
        f"PUT {parts.path}?{parts.query} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        f"Content-Type: text/csv\r\nContent-Length: {declared}\r\n\r\n"
    ).encode()
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(request + sent)
        time.sleep(0.3)


@pytest.mark.http
def test_a_worker_stopped_with_sigterm_mid_file_hands_the_job_back(
    file_tenant: FileTenant, settings: Settings
) -> None:
    """SIGTERM (contract section 15): the worker stops taking work, rolls the file back,
    hands the job back without counting the attempt, and exits within its timeout; the
    job then runs once."""
    rows = MID_FILE_ROWS
    transaction_id = uploaded(file_tenant, rows)
    runtime = runtime_of(file_tenant.client)
    with worker_inside_file(
        file_tenant,
        settings,
        transaction_id,
        "stopped-worker.log",
        HEADWATER_SHUTDOWN_TIMEOUT_SECONDS="10",
    ) as (process, log):
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
    assert code == 0, log.read_text()
    assert "Traceback" not in log.read_text()
    assert shown(file_tenant, transaction_id) == (0, 0)
    state, attempts, claimed_by = job_of(runtime, transaction_id)
    assert (state, attempts, claimed_by) == ("queued", 0, None)  # handed back, not counted
    run_worker(file_tenant.client)
    done = file_tenant.transaction(transaction_id)
    assert done["status"] == "completed", done
    assert stored(runtime, transaction_id) == (rows, rows)
    assert job_of(runtime, transaction_id)[1] == 1


def test_stored_objects_nothing_refers_to_are_swept(
    file_tenant: FileTenant, settings: Settings
) -> None:
    """The bytes of a channel's file whose process died between storing them and the
    commit of their transaction: removed once an hour old; every object a transaction
    refers to stays."""
    import asyncio
    import os

    runtime = runtime_of(file_tenant.client)
    transaction_id = uploaded(file_tenant, 5)
    kept = _object_path(runtime, settings, transaction_id)
    objects = kept.parent
    stray, fresh = objects / uuid.uuid4().hex, objects / uuid.uuid4().hex
    stray.write_bytes(b"order_id,amount\nA,1\n")
    fresh.write_bytes(b"order_id,amount\nB,1\n")
    hour_ago = time.time() - worker.ORPHAN_SECONDS - 60
    for path in (kept, stray):
        os.utime(path, (hour_ago, hour_ago))
    asyncio.run(worker.sweep_orphans(runtime))
    assert kept.exists() and fresh.exists() and not stray.exists()
    fresh.unlink()
