"""A worker killed (SIGKILL) at any step of an erasure: a fresh worker takes it over
once its claim is stale and completes it, nothing erased twice or missed, every count
exact."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
from starlette.testclient import TestClient

from headwater.config import Settings
from tests import preloaded
from tests.downstream.test_exports import ask, read, run_exports
from tests.files.conftest import CSV_HEADER
from tests.http_server import process_env, same_database
from tests.subjects.conftest import SubjectTenant, customer, run_erasures

ADA, BOB = "ada@example.com", "bob@example.com"

# A worker that kills itself at `step` of the first erasure it claims: after the first
# batch of records committed ("records", batches of 2), inside the transaction that
# removes quarantined rows ("rows"), after removing a raw file but before marking it
# ("files"), inside the transaction that marks exports erased ("exports"), or inside
# the one that completes the erasure ("complete").
KILLED_AT = """
import sys
from headwater import worker
from headwater.config import Settings
from headwater.runtime import build_runtime
from headwater.subjects import runner
from tests.kill_points import kill_after

step = sys.argv[1]
runner.RECORD_BATCH = 2

runtime = build_runtime(Settings())
if step == "records":
    kill_after(runner.ingestion, "remove_subjects", passing=1)
elif step == "rows":
    kill_after(runner.quarantine, "remove_rows")
elif step == "files":
    kill_after(runtime.store, "delete")
elif step == "exports":
    kill_after(runner.exports, "mark_erased")
elif step == "complete":
    kill_after(runner.outbox, "write")
worker.erase_one(runtime, "doomed")
sys.exit(3)  # never reached: the process died at its step
"""


def _kill_at(step: str, settings: Settings) -> None:
    env = process_env(
        same_database(settings.data_dir, settings.database_url) | {"HEADWATER_LOG_LEVEL": "WARNING"}
    )
    doomed = preloaded.run_script(KILLED_AT, step, env=env)
    assert doomed.returncode == -signal.SIGKILL, doomed.stderr


def _everywhere(tenant: SubjectTenant) -> dict[str, Any]:
    for n in range(5):  # five transactions: three batches of two
        tenant.push([customer(n, ADA), customer(100 + n, BOB)])
    csv = CSV_HEADER + f"A-7,{ADA},7.5,7,true,2026-11-22T10:00:00Z\n"
    csv += f"A-8,{ADA},oops,8,true,2026-11-22T10:00:00Z\n"
    upload = tenant.upload(csv)
    export = ask(tenant, format="ndjson")
    run_exports(tenant.client)
    return {"upload": upload, "export": export}


@pytest.mark.parametrize("step", ["records", "rows", "files", "exports", "complete"])
def test_an_erasure_killed_at_any_step_completes_once_after_a_restart(
    subject_tenant: SubjectTenant,
    settings: Settings,
    make_client: Callable[..., TestClient],
    step: str,
) -> None:
    run_erasures(subject_tenant.client)  # an empty queue to start from
    made = _everywhere(subject_tenant)
    queued = subject_tenant.erase(ADA)
    _kill_at(step, settings)
    assert subject_tenant.erasure(queued["erasure_id"])["status"] == "running"

    fresh = make_client(erasure_job_stale_seconds=0.2)
    deadline = time.monotonic() + 30
    while not run_erasures(fresh):
        assert time.monotonic() < deadline, "the erasure was never taken over"
        time.sleep(0.2)
    done = subject_tenant.erasure(queued["erasure_id"])
    assert done["status"] == "completed"
    assert done["counts"] == {"records": 6, "quarantined_rows": 1, "files": 1, "exports": 1}
    assert sorted({r["data"]["customer-email"] for r in subject_tenant.all_records()}) == [BOB]
    assert len(subject_tenant.all_records()) == 5
    assert subject_tenant.transaction(made["upload"]["transaction_id"])["file_erased"] is True
    assert read(subject_tenant, made["export"]["export_id"])["status"] == "erased"
    feed, _ = subject_tenant.follow()
    tombstones = [e["record_id"] for e in feed if e.get("erased")]
    assert len(tombstones) == len(set(tombstones)) == 6  # each erased record once
