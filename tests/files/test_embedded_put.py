"""The embedded store's signed PUT: what it accepts, and every way it refuses."""

from __future__ import annotations

import hashlib
import http.client
import json
import signal
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from starlette.testclient import TestClient

from headwater.config import Settings
from tests import preloaded
from tests.files.conftest import CSV_HEADER, FileTenant, csv_rows, run_worker, served_files
from tests.http_server import process_env, same_database

BODY = (CSV_HEADER + csv_rows(3)).encode()


def store_root(settings: Settings) -> Path:
    return settings.data_dir / "store"


def leftovers(settings: Settings) -> list[Path]:
    return list((store_root(settings) / "incoming").iterdir())


def with_query(ticket: dict[str, Any], **changes: str) -> str:
    parts = urlsplit(ticket["upload_url"])
    query = {k: v[0] for k, v in parse_qs(parts.query).items()} | changes
    return f"{parts.path}?{urlencode(query)}"


def test_put_stores_the_file_and_queues_processing(
    file_tenant: FileTenant, settings: Settings
) -> None:
    ticket = file_tenant.upload_url()
    response = file_tenant.put(ticket, BODY)
    assert response.status_code == 200
    assert response.headers["etag"] == f'"{hashlib.md5(BODY, usedforsecurity=False).hexdigest()}"'
    stored = store_root(settings) / "objects" / ticket["file_id"].replace("-", "")
    assert stored.read_bytes() == BODY
    transaction = file_tenant.transaction(ticket["transaction_id"])
    assert transaction["status"] == "processing"
    assert transaction["file_size"] == len(BODY)
    assert transaction["uploaded_at"] is not None
    run_worker(file_tenant.client)
    done = file_tenant.transaction(ticket["transaction_id"])
    assert done["status"] == "completed"
    assert done["records_accepted"] == 3
    assert done["started_at"] is not None and done["completed_at"] is not None


def test_a_used_url_is_refused(file_tenant: FileTenant) -> None:
    ticket = file_tenant.upload_url()
    assert file_tenant.put(ticket, BODY).status_code == 200
    again = file_tenant.put(ticket, b"order_id,amount\nX,1\n")
    assert again.status_code == 403
    assert "used" in again.json()["detail"]
    run_worker(file_tenant.client)
    assert [r["data"]["order_id"] for r in file_tenant.records()] == ["A-0", "A-1", "A-2"]


@pytest.mark.parametrize(
    "change",
    [
        {"signature": "0" * 64},
        {"expires": "9999999999"},
        {"max_bytes": "99999999999"},
    ],
)
def test_a_changed_query_is_refused(file_tenant: FileTenant, change: dict[str, str]) -> None:
    ticket = file_tenant.upload_url()
    response = file_tenant.client.put(
        with_query(ticket, **change), content=BODY, headers=ticket["headers"]
    )
    assert response.status_code == 403
    assert response.json()["code"] == "upload_refused"
    assert file_tenant.transaction(ticket["transaction_id"])["status"] == "awaiting_upload"


@pytest.mark.parametrize("missing", ["signature", "expires", "max_bytes"])
def test_a_url_without_its_parameters_is_refused(file_tenant: FileTenant, missing: str) -> None:
    ticket = file_tenant.upload_url()
    parts = urlsplit(ticket["upload_url"])
    query = {k: v[0] for k, v in parse_qs(parts.query).items() if k != missing}
    response = file_tenant.client.put(
        f"{parts.path}?{urlencode(query)}", content=BODY, headers=ticket["headers"]
    )
    assert response.status_code == 403


def test_a_copied_signature_on_another_path_is_refused(file_tenant: FileTenant) -> None:
    first, second = file_tenant.upload_url(), file_tenant.upload_url()
    second_path = urlsplit(second["upload_url"]).path
    copied = second_path + "?" + urlsplit(first["upload_url"]).query
    response = file_tenant.client.put(copied, content=BODY, headers=first["headers"])
    assert response.status_code == 403
    for ticket in (first, second):
        assert file_tenant.transaction(ticket["transaction_id"])["status"] == "awaiting_upload"


@pytest.mark.parametrize("path", ["/uploads/not-a-key", "/uploads/" + "0" * 32])
def test_an_unknown_path_is_refused(file_tenant: FileTenant, path: str) -> None:
    ticket = file_tenant.upload_url()
    query = urlsplit(ticket["upload_url"]).query
    response = file_tenant.client.put(f"{path}?{query}", content=BODY, headers=ticket["headers"])
    assert response.status_code == 403


@pytest.mark.parametrize("content_type", ["application/json", "text/plain", None])
def test_another_content_type_is_refused(file_tenant: FileTenant, content_type: str | None) -> None:
    ticket = file_tenant.upload_url()
    parts = urlsplit(ticket["upload_url"])
    headers = {"Content-Type": content_type} if content_type else {}
    response = file_tenant.client.put(f"{parts.path}?{parts.query}", content=BODY, headers=headers)
    assert response.status_code == 403
    assert "Content-Type" in response.json()["detail"]
    # the URL is still good for the right type
    assert file_tenant.put(ticket, BODY).status_code == 200


def test_an_expired_url_is_refused(file_tenant: FileTenant, make_client: Any) -> None:
    short = make_client(upload_url_lifetime_seconds=60)
    tenant = file_tenant.via(short)
    ticket = tenant.upload_url()
    expired_at = int(parse_qs(urlsplit(ticket["upload_url"]).query)["expires"][0])
    # a signature made with the store's key for a time in the past
    runtime = short.app.state.runtime
    key = ticket["file_id"].replace("-", "")
    past = expired_at - 3600
    signature = runtime.store.signature(
        key=key,
        expires=past,
        content_type="text/csv",
        max_bytes=int(parse_qs(urlsplit(ticket["upload_url"]).query)["max_bytes"][0]),
    )
    response = short.put(
        with_query(ticket, expires=str(past), signature=signature),
        content=BODY,
        headers=ticket["headers"],
    )
    assert response.status_code == 403
    assert "expired" in response.json()["detail"]


def test_over_the_limit_is_413_while_streaming_and_leaves_nothing(
    file_tenant: FileTenant, make_client: Any, settings: Settings
) -> None:
    small = make_client(max_file_bytes=1000)
    tenant = file_tenant.via(small)
    ticket = tenant.upload_url()
    parts = urlsplit(ticket["upload_url"])

    def chunks() -> Any:  # no Content-Length: the limit is found while streaming
        for _ in range(10):
            yield b"x" * 400

    response = small.put(f"{parts.path}?{parts.query}", content=chunks(), headers=ticket["headers"])
    assert response.status_code == 413
    assert response.json()["code"] == "file_too_large"
    declared = small.put(
        f"{parts.path}?{parts.query}", content=b"x" * 1001, headers=ticket["headers"]
    )
    assert declared.status_code == 413
    assert leftovers(settings) == []
    assert not (store_root(settings) / "objects" / ticket["file_id"].replace("-", "")).exists()
    assert tenant.transaction(ticket["transaction_id"])["status"] == "awaiting_upload"
    # within the limit, the same URL still works
    assert (
        small.put(
            f"{parts.path}?{parts.query}",
            content=b"order_id,amount\nA,1\n",
            headers=ticket["headers"],
        ).status_code
        == 200
    )


def test_an_interrupted_put_leaves_nothing_and_the_url_stays_usable(
    file_tenant: FileTenant, settings: Settings
) -> None:
    ticket = file_tenant.upload_url()
    parts = urlsplit(ticket["upload_url"])

    class Broken(Exception):
        pass

    def chunks() -> Any:
        yield b"order_id,amount\n"
        raise Broken

    with pytest.raises(Broken):
        file_tenant.client.put(
            f"{parts.path}?{parts.query}", content=chunks(), headers=ticket["headers"]
        )
    assert leftovers(settings) == []
    assert file_tenant.transaction(ticket["transaction_id"])["status"] == "awaiting_upload"
    assert file_tenant.put(ticket, BODY).status_code == 200


def test_no_upload_route_for_an_s3_store(file_tenant: FileTenant, client: TestClient) -> None:
    # the embedded route answers only for the embedded store; covered in test_s3 for S3
    ticket = file_tenant.upload_url()
    response = client.post(urlsplit(ticket["upload_url"]).path, content=BODY)
    assert response.status_code == 405


@pytest.mark.http
def test_a_retry_while_a_dead_put_still_arrives_is_taken_and_the_first_to_finish_is_the_file(
    tmp_path: Path, database_url: str | None
) -> None:
    """A client whose connection died retries at once, before the server has noticed the
    death: the retry is taken (S3 takes both); the PUT that finishes first is the file and
    the other answers 403 as a used URL, leaving nothing behind."""
    late = (CSV_HEADER + csv_rows(2)).encode()
    with served_files(tmp_path, database_url) as served:
        ticket = served.upload_url()
        parts = urlsplit(ticket["upload_url"])
        incoming = tmp_path / "store" / "incoming"
        head = (
            f"PUT {parts.path}?{parts.query} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Content-Type: text/csv\r\nContent-Length: {len(late)}\r\n\r\n"
        ).encode()
        with socket.create_connection((parts.hostname, parts.port), timeout=30) as stalled:
            stalled.sendall(head + late[:10])
            deadline = time.monotonic() + 30
            while not list(incoming.iterdir()):  # the server is receiving the first PUT
                assert time.monotonic() < deadline
                time.sleep(0.05)
            retry = httpx.put(
                ticket["upload_url"],
                content=(CSV_HEADER + csv_rows(3, 100)).encode(),
                headers=ticket["headers"],
            )
            assert retry.status_code == 200, retry.text
            stalled.sendall(late[10:])
            answer = http.client.HTTPResponse(stalled)
            answer.begin()
            assert answer.status == 403
            assert "used" in json.loads(answer.read())["detail"]
        transaction = served.settled(ticket["transaction_id"])
        assert (transaction["status"], transaction["records_accepted"]) == ("completed", 3)
        assert list(incoming.iterdir()) == []


# A server that kills itself (SIGKILL) inside a PUT of `url`: once the upload is taken
# ("taken"), once the body is whole on disk ("sealed"), or once it is in the object's
# place inside the transaction that marks the upload, before its commit ("placed").
# Arguments: the step, the upload URL, its content type.
KILLED_IN_PUT = """
import asyncio, sys
from urllib.parse import parse_qs, urlsplit
from headwater.config import Settings
from headwater.files import service, stores
from headwater.runtime import build_runtime
from tests.kill_points import kill_after

step, url, content_type = sys.argv[1:4]
kill_after(*{
    "taken": (service, "_check_put"),
    "sealed": (stores.Incoming, "seal"),
    "placed": (stores.Incoming, "place"),
}[step])
parts = urlsplit(url)
query = {name: values[0] for name, values in parse_qs(parts.query).items()}
body = b"order_id,amount\\nDEAD,1\\n"
put = service.SignedPut(
    key=parts.path.rsplit("/", 1)[1], expires=query["expires"],
    max_bytes=query["max_bytes"], signature=query["signature"],
    content_type=content_type, content_length=str(len(body)),
)

async def arriving():
    yield body

runtime = build_runtime(Settings())
asyncio.run(service.receive_upload(runtime.db, runtime.store, put, arriving()))
sys.exit(3)  # never reached: the process died at its step
"""


@pytest.mark.parametrize("step", ["taken", "sealed", "placed"])
def test_a_server_killed_at_any_step_of_a_put_leaves_the_url_usable_and_the_file_once(
    file_tenant: FileTenant, settings: Settings, step: str
) -> None:
    """Killed inside a PUT, before the transaction that marks the upload commits: nothing
    was recorded, so the client's retry of the same URL is taken (no wait for the upload
    to expire), and its body is the file, processed once."""
    run_worker(file_tenant.client)  # the files other tests left queued: processed
    ticket = file_tenant.upload_url()
    env = process_env(
        same_database(settings.data_dir, settings.database_url) | {"HEADWATER_LOG_LEVEL": "WARNING"}
    )
    content_type = ticket["headers"]["Content-Type"]
    doomed = preloaded.run_script(KILLED_IN_PUT, step, ticket["upload_url"], content_type, env=env)
    assert doomed.returncode == -signal.SIGKILL, doomed.stderr
    assert file_tenant.transaction(ticket["transaction_id"])["status"] == "awaiting_upload"
    assert file_tenant.put(ticket, BODY).status_code == 200
    assert file_tenant.put(ticket, BODY).status_code == 403  # used now
    assert run_worker(file_tenant.client) == 1
    done = file_tenant.transaction(ticket["transaction_id"])
    assert (done["status"], done["records_accepted"]) == ("completed", 3)
