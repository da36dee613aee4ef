"""Contract section 10: a file is processed in short database transactions, its records
shown together when it completes; a crash or a takeover at any step leaves nothing
shown, and the next run stores the file once."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, text
from starlette.testclient import TestClient

from headwater import worker
from headwater.config import Settings
from headwater.files import processing
from headwater.ingestion import api as ingestion_api
from headwater.ingestion.models import Record, StagedTransaction
from headwater.runtime import Runtime
from tests import preloaded
from tests.factories import create_credential
from tests.files.conftest import CSV_HEADER, FileTenant, csv_rows, run_worker
from tests.files.test_workers import job_of, shown, stored, uploaded
from tests.http_server import process_env, same_database
from tests.ingestion.conftest import order


def _runtime(client: TestClient) -> Runtime:
    return client.app.state.runtime  # type: ignore[attr-defined,no-any-return]


def _staged(runtime: Runtime) -> int:
    with runtime.db.read_session() as session:
        return int(session.scalar(select(func.count()).select_from(StagedTransaction)) or 0)


def test_writes_made_while_a_file_is_processed_succeed_without_503(
    file_tenant: FileTenant,
    other_file_tenant: FileTenant,
    admin: dict[str, str],
    make_client: Callable[..., TestClient],
    backend: str,
) -> None:
    """Another company's pushes and an operator's credential revocation, made while a
    file is processed (on SQLite, between its batches), all succeed; none answers 503."""
    app = make_client(file_batch_rows=1000)
    tenant, other = file_tenant.via(app), other_file_tenant.via(app)
    run_worker(app)  # an empty queue to start from
    # PostgreSQL writes a file's progress every 2 s or so: on an idle machine 100,000 rows
    # were read before the first (CI found the worker done before the test looked)
    rows = 400_000 if backend == "postgresql" else 100_000
    transaction_id = uploaded(tenant, rows)
    processing_thread = threading.Thread(target=run_worker, args=(app,))
    processing_thread.start()
    try:
        deadline = time.monotonic() + 120
        while not tenant.transaction(transaction_id)["records_processed"]:
            assert processing_thread.is_alive(), tenant.transaction(transaction_id)
            assert time.monotonic() < deadline, "the file never showed progress"
            time.sleep(0.02)
        answers = [other.push([order(i)]).status_code for i in range(10)]
        credential = create_credential(app, admin, other.company_id)
        revoked = app.delete(f"/admin/v1/credentials/{credential['client_id']}", headers=admin)
    finally:
        processing_thread.join(timeout=300)
    assert answers == [200] * 10
    assert revoked.status_code == 204, revoked.text
    assert len(other.records()) == 10
    done = tenant.transaction(transaction_id)
    assert (done["status"], done["records_accepted"]) == ("completed", rows)
    assert shown(tenant, transaction_id) == (rows, rows)


def test_writes_commit_between_a_files_batches(
    file_tenant: FileTenant,
    other_file_tenant: FileTenant,
    admin: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between two of a file's batches, other writes commit at once: the file holds no
    database transaction there (with one held, SQLite's writer would be busy and each
    write would wait for the file's end, or answer 503)."""
    run_worker(file_tenant.client)
    transaction_id = uploaded(file_tenant, 12_000)
    monkeypatch.setattr(processing, "HOLD_SECONDS", 0.0)
    commit = processing._Stager.commit
    seen: list[Any] = []

    def between(self: processing._Stager) -> None:
        commit(self)
        if not seen:  # the first batch committed; the file is mid-way
            pushed = other_file_tenant.push([order(1)])
            credential = create_credential(file_tenant.client, admin, other_file_tenant.company_id)
            revoked = file_tenant.client.delete(
                f"/admin/v1/credentials/{credential['client_id']}", headers=admin
            )
            seen.append(
                (
                    pushed.status_code,
                    revoked.status_code,
                    file_tenant.transaction(transaction_id)["status"],
                )
            )

    monkeypatch.setattr(processing._Stager, "commit", between)
    run_worker(file_tenant.client)
    assert seen == [(200, 204, "processing")]
    assert len(other_file_tenant.records()) == 1
    assert shown(file_tenant, transaction_id) == (12_000, 12_000)


def test_records_are_hidden_until_the_file_completes(
    file_tenant: FileTenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches commit as the file is read; reads, the record feed and exports see none
    of them until the transaction completes, then all of them at once."""
    runtime = _runtime(file_tenant.client)
    run_worker(file_tenant.client)
    transaction_id = uploaded(file_tenant, 12_000)
    seen: list[tuple[tuple[int, int], int, str]] = []
    publish = ingestion_api.publish

    def publish_watched(connection: Any, target: Any, records: int) -> None:
        # every batch committed, the transaction not completed yet: what do readers see?
        feed = file_tenant.client.get(
            "/platform/v1/data/changes",
            params={"client_id": file_tenant.client_id, "dataset_id": "orders"},
            headers=file_tenant.headers,
        )
        assert feed.status_code == 200, feed.text
        seen.append(
            (
                shown(file_tenant, transaction_id),
                stored(runtime, transaction_id)[0],
                feed.text,
            )
        )
        publish(connection, target, records)

    monkeypatch.setattr(processing.ingestion, "publish", publish_watched)
    monkeypatch.setattr(processing, "HOLD_SECONDS", 0.0)
    run_worker(file_tenant.client)
    [(visible, staged_rows, feed_text)] = seen
    assert visible == (0, 0)
    # all but the last batch committed, in short transactions; the last one is stored
    # in the transaction that publishes them all
    assert 5_000 <= staged_rows < 12_000
    assert '"data":[]' in feed_text
    assert shown(file_tenant, transaction_id) == (12_000, 12_000)
    assert _staged(runtime) == 0


# A worker that kills itself (SIGKILL: nothing of it runs after) at `step`: inside the
# transaction that reads the job ("read"), or stages the first batch ("stage"), or ends
# the file ("end"), each before its commit; or once its first batch ("staged") or the
# whole file ("ended") committed. Arguments: the step, then the file's transaction id.
KILLED_AT = """
import sys
from headwater import worker
from headwater.config import Settings
from headwater.files import processing
from headwater.runtime import build_runtime
from tests.kill_points import kill_after

step = sys.argv[1]
processing.HOLD_SECONDS = 0.0  # every batch commits (PostgreSQL would hold several)

kill_after(*{
    "read": (processing.ingestion, "stage_begun"),
    "stage": (processing.ingestion, "stage_rows"),
    "staged": (processing._Stager, "commit"),
    "end": (processing.ingestion, "finish"),
    "ended": (processing._Stager, "end"),
}[step])
worker.process_one(build_runtime(Settings()), "doomed")
sys.exit(3)  # never reached: the process died at its step
"""


def kill_at(step: str, settings: Settings) -> None:
    """Run a worker that kills itself at `step` (`KILLED_AT`) on the tests' database."""
    env = process_env(
        same_database(settings.data_dir, settings.database_url)
        | {"HEADWATER_FILE_BATCH_ROWS": "1000", "HEADWATER_LOG_LEVEL": "WARNING"}
    )
    doomed = preloaded.run_script(KILLED_AT, step, env=env)
    assert doomed.returncode == -signal.SIGKILL, doomed.stderr


def take_over(make_client: Callable[..., TestClient], runtime: Runtime, transaction: str) -> None:
    """A fresh worker runs the dead one's job (the transaction's) once its claim is stale.

    Until that job is no longer the dead worker's: the fresh worker may first run
    another job left in the worker's database by an earlier test (its claim stale at
    0.2 s) while the dead one's claim is still fresh, and stop there (a failure at
    load: the job still `running` under `doomed`)."""
    fresh = make_client(file_job_stale_seconds=0.2)
    deadline = time.monotonic() + 30
    while True:
        run_worker(fresh)
        if job_of(runtime, transaction)[2] != "doomed":
            return
        assert time.monotonic() < deadline, "the job was never taken over"
        time.sleep(0.2)


@pytest.mark.parametrize("step", ["read", "stage", "staged", "end", "ended"])
def test_a_worker_killed_at_any_step_shows_nothing_or_everything_once(
    file_tenant: FileTenant,
    settings: Settings,
    make_client: Callable[..., TestClient],
    monkeypatch: pytest.MonkeyPatch,
    step: str,
) -> None:
    """A worker process killed (SIGKILL) inside or between any of a file's short
    transactions leaves its records hidden, or (killed after the last) the file
    completed; a fresh worker takes the job over and the file is stored once."""
    runtime = _runtime(file_tenant.client)
    run_worker(file_tenant.client)  # an empty queue to start from
    rows = 9_000
    transaction_id = uploaded(file_tenant, rows)
    kill_at(step, settings)
    if step == "ended":
        assert file_tenant.transaction(transaction_id)["status"] == "completed"
    else:
        assert file_tenant.transaction(transaction_id)["status"] == "processing"
        assert shown(file_tenant, transaction_id) == (0, 0)
        assert (stored(runtime, transaction_id)[0] > 0) == (step in ("staged", "end"))
        take_over(make_client, runtime, transaction_id)
        assert job_of(runtime, transaction_id) == ("done", 2, "test-worker")
    done = file_tenant.transaction(transaction_id)
    assert (done["status"], done["records_accepted"]) == ("completed", rows)
    assert stored(runtime, transaction_id) == (rows, rows)
    assert shown(file_tenant, transaction_id) == (rows, rows)
    assert _staged(runtime) == 0


def test_a_worker_whose_job_was_taken_over_stops_and_the_file_is_stored_once(
    file_tenant: FileTenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Worker one stalls mid-file, between two of its short transactions, past its
    lease; worker two takes the job over and finishes it; worker one, waking, finds the
    claim gone at its next step and stops without storing anything more."""
    runtime = _runtime(file_tenant.client)
    run_worker(file_tenant.client)
    transaction_id = uploaded(file_tenant, 9_000)
    settings = worker.job_settings(runtime.settings)
    job_id = processing.claim_next(runtime.db, worker="one", bucket="", settings=settings)
    assert job_id is not None
    monkeypatch.setattr(processing, "HOLD_SECONDS", 0.0)
    commit = processing._Stager.commit
    took_over: list[bool] = []

    def stalling(self: processing._Stager) -> None:
        commit(self)
        if not took_over:  # worker one's first batch is committed: it stalls here
            took_over.append(True)
            stale = replace(settings, stale=timedelta(seconds=-1))
            taker = processing.claim_next(runtime.db, worker="two", bucket="", settings=stale)
            assert taker == job_id
            assert processing.run_job(
                runtime.db, runtime.store, job_id, worker="two", settings=settings
            )

    monkeypatch.setattr(processing._Stager, "commit", stalling)
    assert not processing.run_job(
        runtime.db, runtime.store, job_id, worker="one", settings=settings
    )
    assert took_over == [True]
    done = file_tenant.transaction(transaction_id)
    assert (done["status"], done["records_accepted"]) == ("completed", 9_000)
    assert stored(runtime, transaction_id) == (9_000, 9_000)
    assert shown(file_tenant, transaction_id) == (9_000, 9_000)
    assert job_of(runtime, transaction_id) == ("done", 2, "two")


def test_staged_records_of_a_file_that_failed_for_good_are_swept(
    file_tenant: FileTenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = _runtime(file_tenant.client)
    run_worker(file_tenant.client)
    transaction_id = uploaded(file_tenant, 6_000)
    monkeypatch.setattr(processing, "HOLD_SECONDS", 0.0)
    settings = worker.job_settings(runtime.settings)
    real = processing.ingestion.publish

    def crash(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("crash before publishing")

    monkeypatch.setattr(processing.ingestion, "publish", crash)
    one = replace(settings, max_attempts=1)
    job_id = processing.claim_next(runtime.db, worker="w", bucket="", settings=one)
    assert job_id is not None
    with pytest.raises(RuntimeError):
        processing.run_job(runtime.db, runtime.store, job_id, worker="w", settings=one)
    processing.release(runtime.db, job_id, worker="w")
    monkeypatch.setattr(processing.ingestion, "publish", real)
    # the next claim finds the job past its attempts: the transaction fails
    assert processing.claim_next(runtime.db, worker="w", bucket="", settings=one) is None
    assert file_tenant.transaction(transaction_id)["status"] == "failed"
    assert 5_000 <= stored(runtime, transaction_id)[0] < 6_000  # staged, hidden
    assert shown(file_tenant, transaction_id) == (0, 0)
    asyncio.run(worker.sweep_staged(runtime))
    assert stored(runtime, transaction_id)[0] == 0
    assert _staged(runtime) == 0


def test_on_postgresql_a_file_commits_in_several_database_transactions(
    file_tenant: FileTenant, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The records of one file carry several PostgreSQL transaction ids (`xmin`): no
    one transaction held them all."""
    if backend != "postgresql":
        pytest.skip("xmin is PostgreSQL's")
    runtime = _runtime(file_tenant.client)
    monkeypatch.setattr(processing, "HOLD_SECONDS", 0.0)
    run_worker(file_tenant.client)
    ticket = file_tenant.upload_url()
    assert file_tenant.put(ticket, (CSV_HEADER + csv_rows(20_000)).encode()).status_code == 200
    run_worker(file_tenant.client)
    with runtime.db.read_connection() as connection:
        transactions = connection.scalar(
            select(func.count(func.distinct(text("xmin::text")))).where(
                Record.transaction_id == uuid.UUID(ticket["transaction_id"])
            )
        )
    assert transactions is not None and transactions >= 4  # 20,000 rows, 5,000 a batch


def test_on_postgresql_a_file_of_one_batch_is_stored_and_shown_in_one_transaction(
    file_tenant: FileTenant, backend: str
) -> None:
    """A small file (one batch) is never staged: its records are stored in the database
    transaction that completes it (the records' `xmin` is the transaction row's)."""
    if backend != "postgresql":
        pytest.skip("xmin is PostgreSQL's")
    runtime = _runtime(file_tenant.client)
    run_worker(file_tenant.client)
    transaction_id = uploaded(file_tenant, 300)
    run_worker(file_tenant.client)
    assert shown(file_tenant, transaction_id) == (300, 300)
    with runtime.db.read_connection() as connection:
        xmins = (
            connection.execute(
                text(
                    "SELECT DISTINCT xmin::text FROM records WHERE transaction_id = :t"
                    " UNION ALL SELECT xmin::text FROM transactions WHERE id = :t"
                ),
                {"t": uuid.UUID(transaction_id)},
            )
            .scalars()
            .all()
        )
    assert len(xmins) == 2 and xmins[0] == xmins[1], xmins


@pytest.mark.parametrize("step", ["staged", "end"])
def test_a_killed_workers_dedupe_claims_go_with_its_staged_records(
    file_tenant: FileTenant,
    settings: Settings,
    make_client: Callable[..., TestClient],
    step: str,
) -> None:
    """The dataset dedupes on `order_id` (every row's is new). A worker killed after it
    staged batches had claimed their keys; the run that takes the job over finds none of
    its rows a duplicate of the dead run's hidden ones: every row is stored."""
    steps = {"steps": [{"op": "dedupe", "keys": ["/order_id"]}]}
    response = file_tenant.client.put(
        f"/admin/v1/clients/{file_tenant.client_id}/datasets/orders/transforms",
        json=steps,
        headers=file_tenant.admin,
    )
    assert response.status_code == 200, response.text
    run_worker(file_tenant.client)
    rows = 9_000
    transaction_id = uploaded(file_tenant, rows)
    kill_at(step, settings)
    take_over(make_client, _runtime(file_tenant.client), transaction_id)
    done = file_tenant.transaction(transaction_id)
    assert (done["status"], done["records_accepted"], done["records_duplicates"]) == (
        "completed",
        rows,
        0,
    )
    assert shown(file_tenant, transaction_id) == (rows, rows)
