"""problem+json for every error outside the token endpoint (contract section 3)."""

from __future__ import annotations

from collections.abc import Iterator

from starlette.testclient import TestClient

from tests.factories import assert_problem


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
