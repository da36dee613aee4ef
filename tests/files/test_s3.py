"""The S3 backend against a real S3 protocol server (moto) on loopback: presigned PUT,
bucket notifications, the poller, the size check. moto does not enforce presigned-URL
security, so URL tampering is tested on the embedded store (test_embedded_put)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from starlette.testclient import TestClient

from headwater import worker
from tests.files.conftest import CSV_HEADER, FileTenant, csv_rows, run_worker
from tests.files.moto import ACCESS_KEY, REGION, SECRET_KEY, moto_server

SECRET = "notification-secret-for-tests"
BODY = (CSV_HEADER + csv_rows(20)).encode()


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with moto_server(tmp_path_factory.mktemp("moto")) as url:
        yield url


@pytest.fixture
def bucket(s3_endpoint: str) -> str:
    name = f"hw-{uuid.uuid4().hex[:12]}"
    s3_client(s3_endpoint).create_bucket(Bucket=name)
    return name


def s3_client(endpoint: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    )


@pytest.fixture
def s3_app(make_client: Callable[..., TestClient], s3_endpoint: str, bucket: str) -> Any:
    def make(**overrides: Any) -> TestClient:
        return make_client(
            storage_url=f"s3://{bucket}",
            s3_endpoint_url=s3_endpoint,
            s3_region=REGION,
            s3_access_key_id=ACCESS_KEY,
            s3_secret_access_key=SECRET_KEY,
            storage_notification_secret=SECRET,
            **overrides,
        )

    return make


def put(ticket: dict[str, Any], body: bytes) -> httpx.Response:
    return httpx.put(ticket["upload_url"], content=body, headers=ticket["headers"], timeout=30)


def event(bucket: str, key: str, etag: str = "abc") -> dict[str, Any]:
    return {
        "Records": [
            {
                "eventVersion": "2.1",
                "eventSource": "aws:s3",
                "eventName": "ObjectCreated:Put",
                "s3": {
                    "bucket": {"name": bucket},
                    "object": {"key": key, "size": 1, "eTag": etag},
                },
            }
        ]
    }


def notify(client: TestClient, body: Any, secret: str = SECRET) -> httpx.Response:
    return client.post(
        "/hooks/v1/storage/events", json=body, headers={"Authorization": f"Bearer {secret}"}
    )


def key_of(ticket: dict[str, Any]) -> str:
    from urllib.parse import unquote, urlsplit

    path = unquote(urlsplit(ticket["upload_url"]).path)
    return path.split("/", 2)[2]


def test_presigned_put_then_notification_processes_once(
    file_tenant: FileTenant, s3_app: Any, bucket: str, s3_endpoint: str
) -> None:
    app = s3_app()
    tenant = file_tenant.via(app)
    ticket = tenant.upload_url(file_name="../../etc/passwd")
    assert ticket["upload_url"].startswith(f"{s3_endpoint}/{bucket}/uploads/")
    assert "passwd" not in ticket["upload_url"]
    assert "X-Amz-Signature" in ticket["upload_url"]
    assert put(ticket, BODY).status_code == 200
    key = key_of(ticket)
    stored = s3_client(s3_endpoint).head_object(Bucket=bucket, Key=key)
    assert stored["ContentType"] == "text/csv"
    assert tenant.transaction(ticket["transaction_id"])["status"] == "awaiting_upload"

    first = notify(app, event(bucket, key))
    assert first.status_code == 200 and first.json() == {"queued": 1}
    assert tenant.transaction(ticket["transaction_id"])["status"] == "processing"
    # notifications come at least once: repeats (and other buckets) queue nothing
    assert notify(app, event(bucket, key)).json() == {"queued": 0}
    assert notify(app, event("another-bucket", key)).json() == {"queued": 0}
    assert run_worker(app) == 1
    transaction = tenant.transaction(ticket["transaction_id"])
    assert transaction["status"] == "completed", transaction["errors"]
    assert transaction["records_accepted"] == 20
    assert transaction["file_size"] == len(BODY)
    assert notify(app, event(bucket, key)).json() == {"queued": 0}
    assert run_worker(app) == 0
    assert len(tenant.records(transaction_id=ticket["transaction_id"])) == 20


def test_an_object_the_bucket_lost_fails_its_transaction(
    file_tenant: FileTenant, s3_app: Any, bucket: str, s3_endpoint: str
) -> None:
    app = s3_app()
    tenant = file_tenant.via(app)
    ticket = tenant.upload_url()
    assert put(ticket, BODY).status_code == 200
    assert notify(app, event(bucket, key_of(ticket))).json() == {"queued": 1}
    s3_client(s3_endpoint).delete_object(Bucket=bucket, Key=key_of(ticket))
    assert run_worker(app) == 1
    transaction = tenant.transaction(ticket["transaction_id"])
    assert transaction["status"] == "failed"
    assert "missing" in transaction["errors"][0]["message"]


def test_objects_nothing_refers_to_are_swept_from_the_bucket(
    file_tenant: FileTenant, s3_app: Any, bucket: str, s3_endpoint: str
) -> None:
    import asyncio

    from headwater import worker

    app = s3_app()
    tenant = file_tenant.via(app)
    ticket = tenant.upload_url()
    assert put(ticket, BODY).status_code == 200
    client = s3_client(s3_endpoint)
    stray = f"uploads/{uuid.uuid4().hex}/{uuid.uuid4().hex}"
    client.put_object(Bucket=bucket, Key=stray, Body=b"x")
    runtime = app.app.state.runtime  # type: ignore[attr-defined]
    listed = dict(runtime.store.stored_files(older_than=-60))  # everything is old enough
    assert key_of(ticket) in listed and stray in listed
    assert listed[stray] == uuid.UUID(stray.rsplit("/", 1)[1])
    original, worker.ORPHAN_SECONDS = worker.ORPHAN_SECONDS, -60
    try:
        asyncio.run(worker.sweep_orphans(runtime))
    finally:
        worker.ORPHAN_SECONDS = original
    names = {o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])}
    assert key_of(ticket) in names and stray not in names


def test_the_poller_notices_uploads_without_notifications(
    file_tenant: FileTenant, s3_app: Any
) -> None:
    app = s3_app()
    tenant = file_tenant.via(app)
    ticket = tenant.upload_url("application/x-ndjson", file_name="o.ndjson")
    assert put(ticket, b'{"order_id": "P-1", "amount": 1}\n').status_code == 200
    runtime = app.app.state.runtime  # type: ignore[attr-defined]
    import asyncio

    asyncio.run(worker.poll_uploads(runtime))
    asyncio.run(worker.poll_uploads(runtime))  # a second pass finds nothing new
    assert run_worker(app) == 1
    transaction = tenant.transaction(ticket["transaction_id"])
    assert transaction["status"] == "completed"
    assert transaction["records_accepted"] == 1


def test_an_object_over_the_limit_is_refused_before_processing(
    file_tenant: FileTenant, s3_app: Any, bucket: str, s3_endpoint: str
) -> None:
    app = s3_app(max_file_bytes=100)
    tenant = file_tenant.via(app)
    ticket = tenant.upload_url()
    assert put(ticket, BODY).status_code == 200  # S3 cannot cap a presigned PUT
    assert notify(app, event(bucket, key_of(ticket))).json() == {"queued": 1}
    assert run_worker(app) == 0
    transaction = tenant.transaction(ticket["transaction_id"])
    assert transaction["status"] == "rejected"
    assert transaction["file_size"] == len(BODY)
    assert "limit is 100" in transaction["errors"][0]["message"]
    assert tenant.records(transaction_id=ticket["transaction_id"]) == []
    listed = s3_client(s3_endpoint).list_objects_v2(Bucket=bucket, Prefix=key_of(ticket))
    assert listed.get("KeyCount", 0) == 0


def test_an_object_of_another_content_type_is_refused(
    file_tenant: FileTenant, s3_app: Any, bucket: str
) -> None:
    app = s3_app()
    tenant = file_tenant.via(app)
    ticket = tenant.upload_url()
    # moto accepts a PUT whose Content-Type differs from the signed one; the platform not
    response = httpx.put(ticket["upload_url"], content=BODY, headers={"Content-Type": "text/plain"})
    assert response.status_code == 200
    assert notify(app, event(bucket, key_of(ticket))).json() == {"queued": 1}
    transaction = tenant.transaction(ticket["transaction_id"])
    assert transaction["status"] == "rejected"
    assert "text/plain" in transaction["errors"][0]["message"]
    assert run_worker(app) == 0


@pytest.mark.parametrize("secret", ["", "wrong"])
def test_notifications_need_the_shared_secret(
    file_tenant: FileTenant, s3_app: Any, bucket: str, secret: str
) -> None:
    app = s3_app()
    ticket = file_tenant.via(app).upload_url()
    assert put(ticket, BODY).status_code == 200
    response = notify(app, event(bucket, key_of(ticket)), secret=secret)
    assert response.status_code == 401
    assert SECRET not in response.text
    assert file_tenant.via(app).transaction(ticket["transaction_id"])["status"] == (
        "awaiting_upload"
    )


def test_notifications_that_are_not_json_or_not_events(s3_app: Any) -> None:
    app = s3_app()
    bad = app.post(
        "/hooks/v1/storage/events",
        content=b"{nope",
        headers={"Authorization": f"Bearer {SECRET}", "Content-Type": "application/json"},
    )
    assert bad.status_code == 400
    for body in ({}, {"Records": "x"}, {"Records": [1, {"eventName": "ObjectRemoved:Delete"}]}, []):
        assert notify(app, body).json() == {"queued": 0}


def test_no_secret_configured_refuses_every_notification(
    make_client: Callable[..., TestClient],
) -> None:
    app = make_client()
    assert notify(app, {"Records": []}, secret="").status_code == 401


def test_the_embedded_route_is_absent_and_readiness_checks_s3(
    file_tenant: FileTenant, s3_app: Any
) -> None:
    app = s3_app()
    response = app.put(f"/uploads/{uuid.uuid4().hex}?expires=1&max_bytes=1&signature=x")
    assert response.status_code == 404
    ready = app.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "storage": "ok"}


def test_readiness_reports_a_missing_bucket(
    make_client: Callable[..., TestClient], s3_endpoint: str, tmp_path: Path
) -> None:
    app = make_client(
        storage_url="s3://no-such-bucket-here",
        s3_endpoint_url=s3_endpoint,
        s3_access_key_id=ACCESS_KEY,
        s3_secret_access_key=SECRET_KEY,
    )
    ready = app.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["checks"]["storage"] == "unreachable"
