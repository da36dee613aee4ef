"""Tokens under attack (contract sections 2 and 15): revocation that reaches issued tokens
on every instance, strict NumericDate and base64url, bounded secret checks, and a
per-address limit on failures."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import jwt
import pytest
from starlette.testclient import TestClient

from tests.factories import (
    OPERATOR_ID,
    OPERATOR_SECRET,
    assert_problem,
    auth,
    create_company,
    create_credential,
    get_token,
    request_token,
)
from tests.identity.test_bearer import _assert_invalid_token, _claims, _sign, signing  # noqa: F401

WHOAMI = "/platform/v1/whoami"


def _wait_for_401(client: TestClient, token: str, *, seconds: float = 10.0) -> float:
    """Seconds until `token` answers 401 on `client` (fails the test past `seconds`)."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if client.get(WHOAMI, headers=auth(token)).status_code == 401:
            return time.monotonic() - start
        time.sleep(0.2)
    raise AssertionError(f"the revoked token still verified after {seconds} s")


@pytest.mark.parametrize("revoke", ["credential", "company"])
def test_revocation_reaches_issued_tokens_on_every_instance(
    client: TestClient, admin: dict[str, str], make_client: Any, revoke: str
) -> None:
    other_instance = make_client()
    company = create_company(client, admin, "Revoked Co")
    credential = create_credential(
        client, admin, company, scopes=["data:write", "workflows:write", "workflows:read"]
    )
    token = get_token(client, credential["client_id"], credential["client_secret"])
    assert client.get(WHOAMI, headers=auth(token)).status_code == 200
    assert other_instance.get(WHOAMI, headers=auth(token)).status_code == 200  # cached there
    path = (
        f"/admin/v1/credentials/{credential['client_id']}"
        if revoke == "credential"
        else f"/admin/v1/companies/{company}"
    )
    assert client.delete(path, headers=admin).status_code == 204
    # at once on the instance that revoked, for every kind of call
    _assert_invalid_token(client.get(WHOAMI, headers=auth(token)))
    _assert_invalid_token(
        client.post("/app/v1/workflow_categories", json={"name": "x"}, headers=auth(token))
    )
    _assert_invalid_token(
        client.get(
            "/platform/v1/data/file_upload_url",
            params={
                "client_id": "a",
                "dataset_id": "b",
                "file_name": "c",
                "content_type": "text/csv",
            },
            headers=auth(token),
        )
    )
    # within 10 s on another instance, which reads the database only in the background
    _wait_for_401(other_instance, token)
    listed = client.get(f"/admin/v1/companies/{company}/credentials", headers=admin).json()
    assert all(c["revoked_at"] is not None for c in listed["data"])
    refused = request_token(client, credential["client_id"], credential["client_secret"])
    assert refused.status_code == 401


def test_exp_as_a_string_is_refused(client: TestClient, signing: Any) -> None:  # noqa: F811
    token = _sign(signing, _claims(exp=str(int(time.time()) + 600)))
    response = client.get(WHOAMI, headers=auth(token))
    _assert_invalid_token(response)
    assert "NumericDate" in response.json()["detail"]


def test_base64_padding_in_a_token_is_refused(client: TestClient, signing: Any) -> None:  # noqa: F811
    token = _sign(signing, _claims())
    assert client.get(WHOAMI, headers=auth(token)).status_code == 200
    header, payload, signature = token.split(".")
    padded = ".".join([header, payload, signature + "=" * (-len(signature) % 4 or 4)])
    response = client.get(WHOAMI, headers=auth(padded))
    _assert_invalid_token(response)
    assert "padding" in response.json()["detail"]


def test_failures_from_one_address_are_refused_for_a_minute(
    make_client: Any, admin: dict[str, str], client: TestClient
) -> None:
    limited = make_client(token_failures_per_minute=3)
    for _ in range(3):
        wrong = request_token(limited, OPERATOR_ID, "wrong")
        assert wrong.status_code == 401
    # the fourth failure empties the bucket; from then on this address is refused
    assert request_token(limited, OPERATOR_ID, "wrong").status_code == 401
    refused = request_token(limited, OPERATOR_ID, OPERATOR_SECRET)
    assert refused.status_code == 429
    assert refused.json()["error"] == "temporarily_unavailable"
    assert refused.headers["retry-after"] == "60"
    # another instance's own refusal is its own; its bucket (shared only through Redis)
    assert request_token(client, OPERATOR_ID, OPERATOR_SECRET).status_code == 200


def test_secret_checks_beyond_the_gate_are_429_not_a_pool_timeout(
    client: TestClient,
) -> None:
    """The gate itself: at most its workers run, its queue waits, the rest are refused."""
    from headwater.kit.gate import Gate, GateFull

    async def flood() -> tuple[int, int, int]:
        gate = Gate(workers=2, queue=2, wait=0.2, name="test-gate")
        running = 0
        most = 0

        def slow() -> None:
            nonlocal running, most
            running += 1
            most = max(most, running)
            time.sleep(0.5)
            running -= 1

        async def one() -> bool:
            try:
                await gate.run(slow)
            except GateFull:
                return False
            return True

        outcomes = await asyncio.gather(*(one() for _ in range(20)))
        gate.close()
        return most, sum(outcomes), len(outcomes) - sum(outcomes)

    most, served, refused = asyncio.run(flood())
    assert most == 2
    assert served >= 2
    assert refused >= 14
    assert served + refused == 20


def test_a_token_request_with_nul_is_invalid_request(client: TestClient) -> None:
    response = client.post(
        "/oauth/token",
        data={"client_id": "a\x00", "client_secret": "b", "audience": "headwater-api"},
    )
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"


def test_metrics_need_the_metrics_token_when_one_is_set(make_client: Any) -> None:
    guarded = make_client(metrics_token="m-secret")
    assert_problem(guarded.get("/metrics"), 401, "metrics_token_required")
    assert guarded.get("/metrics", headers=auth("wrong")).status_code == 401
    answer = guarded.get("/metrics", headers=auth("m-secret"))
    assert answer.status_code == 200
    assert "headwater" in answer.text or "python_info" in answer.text
    open_by_default = make_client()
    assert open_by_default.get("/metrics").status_code == 200


def test_jwt_library_signs_what_the_tests_sign() -> None:
    """The refusals above are the service's: PyJWT itself accepts both."""
    token = jwt.encode({"exp": "9999999999"}, "k" * 32, algorithm="HS256")
    assert jwt.decode(token, "k" * 32, algorithms=["HS256"])["exp"] == "9999999999"
