"""An erasure with an S3 store (a real S3 protocol server, moto, on loopback): the raw
file and the export file that held a subject are deleted from the bucket."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from botocore.exceptions import ClientError

from headwater import worker
from headwater.runtime import Runtime
from tests.downstream.test_exports import ask, read, run_exports
from tests.files.conftest import CSV_HEADER, run_worker
from tests.files.test_s3 import bucket, key_of, put, s3_app, s3_client, s3_endpoint
from tests.subjects.conftest import SubjectTenant, run_erasures

__all__ = ["bucket", "s3_app", "s3_endpoint"]  # fixtures

ADA, BOB = "ada@example.com", "bob@example.com"


def test_an_erasure_deletes_the_raw_file_and_the_export_from_s3(
    subject_tenant: SubjectTenant, s3_app: Any, bucket: str, s3_endpoint: str
) -> None:
    app = s3_app()
    tenant = subject_tenant.via(app)
    keys = {}
    for who in (ADA, BOB):
        ticket = tenant.upload_url()
        body = CSV_HEADER + f"A-1,{who},1.5,1,true,2026-11-22T10:00:00Z\n"
        assert put(ticket, body.encode()).status_code == 200
        keys[who] = (ticket["transaction_id"], key_of(ticket))
    runtime: Runtime = app.app.state.runtime  # type: ignore[attr-defined]
    asyncio.run(worker.poll_uploads(runtime))
    assert run_worker(app) == 2
    export = ask(tenant, format="ndjson")
    run_exports(app)
    done_export = read(tenant, export["export_id"])
    export_key = done_export["download_url"].split(f"/{bucket}/", 1)[1].split("?", 1)[0]
    s3 = s3_client(s3_endpoint)

    queued = tenant.erase(ADA)
    # (the session's database may hold other tests' queued erasures: run them all)
    assert run_erasures(app) >= 1
    done = tenant.erasure(queued["erasure_id"])
    assert done["status"] == "completed", done
    assert done["counts"] == {"records": 1, "quarantined_rows": 0, "files": 1, "exports": 1}
    for key in (keys[ADA][1], export_key):
        with pytest.raises(ClientError):
            s3.head_object(Bucket=bucket, Key=key)
    s3.head_object(Bucket=bucket, Key=keys[BOB][1])  # Bob's file stays
    assert tenant.transaction(keys[ADA][0])["file_erased"] is True
    assert read(tenant, export["export_id"])["status"] == "erased"
    assert [r["data"]["customer-email"] for r in tenant.all_records()] == [BOB]
