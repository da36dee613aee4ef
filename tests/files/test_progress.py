"""A file's progress while it is processing (`records_processed`), and
`GET /platform/v1/transactions/{id}?wait=` answering when the status changes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError
from starlette.testclient import TestClient

from headwater.config import Settings
from headwater.files import processing
from headwater.worker import job_settings
from tests.factories import assert_problem
from tests.files.conftest import CSV_HEADER, FileTenant, csv_rows, run_worker


def _get(tenant: FileTenant, transaction_id: str, **params: Any) -> Any:
    return tenant.client.get(
        f"/platform/v1/transactions/{transaction_id}", params=params, headers=tenant.headers
    )


def test_wait_answers_when_the_status_changes(file_tenant: FileTenant) -> None:
    run_worker(file_tenant.client)
    ticket = file_tenant.upload_url()
    answered: dict[str, Any] = {}

    def waiting() -> None:
        start = time.monotonic()
        answered["body"] = _get(file_tenant, ticket["transaction_id"], wait=30).json()
        answered["seconds"] = time.monotonic() - start

    waiter = threading.Thread(target=waiting)
    waiter.start()
    time.sleep(0.5)
    assert file_tenant.put(ticket, (CSV_HEADER + csv_rows(3)).encode()).status_code == 200
    waiter.join(timeout=40)
    assert answered["body"]["status"] == "processing"
    assert answered["seconds"] < 25  # the change, not the end of the wait, answered it
    run_worker(file_tenant.client)
    final = _get(file_tenant, ticket["transaction_id"], wait=30).json()
    assert final["status"] == "completed"  # a final status answers at once
    assert final["records_processed"] == final["records_received"] == 3


@pytest.mark.parametrize("wait", ["-1", "31", "soon"])
def test_a_bad_wait_is_400(file_tenant: FileTenant, wait: str) -> None:
    ticket = file_tenant.upload_url()
    problem = assert_problem(_get(file_tenant, ticket["transaction_id"], wait=wait), 400)
    assert problem["errors"][0]["field"] == "wait"


def test_records_processed_grows_while_a_file_is_processing(
    file_tenant: FileTenant,
    make_client: Callable[..., TestClient],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On both databases: a file is processed in short database transactions, and its
    progress is written in them (on PostgreSQL every `HEADWATER_FILE_COMMIT_SECONDS`)."""
    monkeypatch.setattr(processing, "PROGRESS_SECONDS", 0.05)
    working = make_client(file_commit_seconds=0.05)
    run_worker(working)
    ticket = file_tenant.upload_url()
    body = (CSV_HEADER + csv_rows(60_000)).encode()
    assert file_tenant.put(ticket, body).status_code == 200
    seen: list[int] = []
    worker = threading.Thread(target=run_worker, args=(working,))
    worker.start()
    while worker.is_alive():
        view = _get(file_tenant, ticket["transaction_id"]).json()
        if view["status"] == "processing" and view["records_processed"]:
            seen.append(view["records_processed"])
        time.sleep(0.02)
    worker.join()
    assert seen, "no progress was visible while the file was processing"
    assert seen == sorted(seen) and 0 < seen[0] < 60_000
    final = _get(file_tenant, ticket["transaction_id"]).json()
    assert final["status"] == "completed"
    assert final["records_processed"] == 60_000


@pytest.mark.parametrize("seconds", [-0.1, 10.5])
def test_a_commit_time_out_of_bounds_is_refused(seconds: float) -> None:
    """At most the 10 s contract section 10 allows a file's transaction to stay open."""
    with pytest.raises(ValidationError, match="file_commit_seconds"):
        Settings(file_commit_seconds=seconds)


def test_the_commit_time_reaches_the_file_jobs() -> None:
    assert job_settings(Settings(file_commit_seconds=0.25)).hold == 0.25
    assert job_settings(Settings()).hold is None  # processing.HOLD_SECONDS, 1 s
