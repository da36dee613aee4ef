"""problem+json for every error outside the token endpoint (contract section 3)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import cast

import orjson
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from starlette.requests import Request
from starlette.testclient import TestClient

from headwater.config import Settings
from headwater.web.problems import handle_unexpected
from tests.factories import assert_problem, database


def test_unknown_path_is_404(client: TestClient) -> None:
    assert_problem(client.get("/no/such/thing"), 404, "not_found")


def test_wrong_method_is_405(client: TestClient, admin: dict[str, str]) -> None:
    response = client.put("/admin/v1/companies", headers=admin, json={})
    assert_problem(response, 405, "method_not_allowed")
    assert "GET" in response.headers["allow"]


def test_malformed_json_is_400(client: TestClient, admin: dict[str, str]) -> None:
    response = client.post(
        "/admin/v1/companies",
        content=b'{"name": ',
        headers=admin | {"Content-Type": "application/json"},
    )
    problem = assert_problem(response, 400, "malformed_json")
    assert problem["errors"][0]["location"] == "body"


def test_declared_body_over_the_limit_is_413(make_client: object, admin: dict[str, str]) -> None:
    small = make_client(max_body_bytes=1024)  # type: ignore[operator]
    response = small.post(
        "/admin/v1/companies",
        content=b"x" * 2048,
        headers=admin | {"Content-Type": "application/json"},
    )
    assert_problem(response, 413, "payload_too_large")


def test_streamed_body_over_the_limit_is_413(make_client: object, admin: dict[str, str]) -> None:
    small = make_client(max_body_bytes=1024)  # type: ignore[operator]

    def chunks() -> Iterator[bytes]:
        for _ in range(10):
            yield b'{"name": "' + b"x" * 500

    response = small.post(
        "/admin/v1/companies",
        content=chunks(),
        headers=admin | {"Content-Type": "application/json"},
    )
    assert "content-length" not in {k.lower() for k in response.request.headers}
    assert_problem(response, 413, "payload_too_large")


def test_non_numeric_content_length_is_400(client: TestClient) -> None:
    response = client.post(
        "/admin/v1/companies",
        content=b"{}",
        headers={"Content-Length": "abc", "Content-Type": "application/json"},
    )
    assert_problem(response, 400, "bad_request")


def test_request_id_is_echoed_and_in_problems(client: TestClient) -> None:
    response = client.get("/nope", headers={"X-Request-ID": "abc-123.x"})
    assert response.headers["x-request-id"] == "abc-123.x"
    assert response.json()["request_id"] == "abc-123.x"


def test_unsafe_request_id_is_replaced(client: TestClient) -> None:
    response = client.get("/healthz", headers={"X-Request-ID": "bad id<script>"})
    assert "<" not in response.headers["x-request-id"]
    assert len(response.headers["x-request-id"]) == 32


def test_a_transaction_ended_for_anothers_sake_is_503_busy_not_unreachable(
    settings: Settings, backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A lock not granted (PostgreSQL's 55P03, as a deadlock's 40P01) is told apart from
    a database that cannot be reached: 503 `database_busy`, retry at once, logged as the
    conflict it was."""
    if backend != "postgresql":
        pytest.skip("lock_timeout is PostgreSQL's")
    error: BaseException | None = None
    with database(settings) as db, db.begin() as first:
        first.execute(text("SELECT pg_advisory_xact_lock(4242)"))
        with db.begin() as second:
            second.execute(text("SET LOCAL lock_timeout = '20ms'"))
            try:
                second.execute(text("SELECT pg_advisory_xact_lock(4242)"))
            except DBAPIError as exc:
                error = exc
    assert error is not None, "the second transaction waited past its lock_timeout"
    with caplog.at_level(logging.WARNING, logger="headwater.errors"):
        response = asyncio.run(handle_unexpected(cast(Request, None), cast(Exception, error)))
    body = orjson.loads(bytes(response.body))
    assert (response.status_code, body["code"]) == (503, "database_busy")
    assert response.headers["Retry-After"] == "1"
    assert "lock not available" in caplog.text
    assert "unreachable" not in caplog.text
