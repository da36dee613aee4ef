"""Per-credential token buckets: in-process, and shared through Redis (contract section 9)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from tests.factories import assert_problem, auth, create_credential, get_token

REDIS_URL = "redis://127.0.0.1:6379/0"


def _token(client: TestClient, admin: dict[str, str], company: str) -> str:
    cred = create_credential(client, admin, company, scopes=["data:read"])
    return get_token(client, cred["client_id"], cred["client_secret"])


def _statuses(client: TestClient, token: str, n: int) -> list[Any]:
    return [client.get("/platform/v1/whoami", headers=auth(token)) for _ in range(n)]


def test_in_process_bucket(
    client: TestClient, make_client: Any, admin: dict[str, str], company: str
) -> None:
    token = _token(client, admin, company)
    limited = make_client(rate_limit_per_second=0.01, rate_limit_burst=3)
    answers = _statuses(limited, token, 4)
    assert [r.status_code for r in answers] == [200, 200, 200, 429]
    assert answers[0].headers["ratelimit-limit"] == "3"
    assert [r.headers["ratelimit-remaining"] for r in answers[:3]] == ["2", "1", "0"]
    problem = assert_problem(answers[3], 429, "rate_limited")
    assert int(answers[3].headers["retry-after"]) >= 1
    assert "retry" in problem["detail"].lower()
    other = _token(client, admin, company)
    assert limited.get("/platform/v1/whoami", headers=auth(other)).status_code == 200


def test_redis_bucket_is_shared_between_instances(
    client: TestClient, make_client: Any, admin: dict[str, str], company: str
) -> None:
    redis.Redis.from_url(REDIS_URL).ping()
    token = _token(client, admin, company)
    first = make_client(redis_url=REDIS_URL, rate_limit_per_second=0.01, rate_limit_burst=4)
    second = make_client(redis_url=REDIS_URL, rate_limit_per_second=0.01, rate_limit_burst=4)
    codes = [
        c.get("/platform/v1/whoami", headers=auth(token)).status_code
        for c in (first, second, first, second, first, second)
    ]
    assert codes == [200, 200, 200, 200, 429, 429]


def test_unreachable_redis_lets_requests_through(
    client: TestClient, make_client: Any, admin: dict[str, str], company: str
) -> None:
    token = _token(client, admin, company)
    broken = make_client(redis_url="redis://127.0.0.1:1/0", rate_limit_burst=1)
    assert [r.status_code for r in _statuses(broken, token, 2)] == [200, 200]


def test_token_endpoint_is_limited_per_client_id(make_client: Any) -> None:
    limited = make_client(rate_limit_per_second=0.01, rate_limit_burst=2)
    body = {
        "client_id": f"hw_{uuid.uuid4().hex}",
        "client_secret": "x",
        "audience": "headwater-api",
    }
    codes = [limited.post("/oauth/token", json=body).status_code for _ in range(3)]
    assert codes == [401, 401, 429]
    answer = limited.post("/oauth/token", json=body)
    assert answer.json()["error"] == "temporarily_unavailable"
    assert "retry-after" in answer.headers


@pytest.mark.parametrize("burst", [1, 5])
def test_memory_limiter_refills_at_its_rate(burst: int) -> None:
    import asyncio

    from headwater.kit.ratelimit import MemoryRateLimiter

    now = [100.0]
    limiter = MemoryRateLimiter(rate=2.0, burst=burst, clock=lambda: now[0])
    decisions = [asyncio.run(limiter.hit("k")) for _ in range(burst + 1)]
    assert [d.allowed for d in decisions] == [True] * burst + [False]
    assert decisions[-1].retry_after == 1
    now[0] += 0.4  # 0.8 of a token: still refused
    assert not asyncio.run(limiter.hit("k")).allowed
    now[0] += 0.2  # 1.2 tokens since the last refusal's refill point
    assert asyncio.run(limiter.hit("k")).allowed
    now[0] += 1000  # refills to the burst, never beyond
    assert asyncio.run(limiter.hit("k")).remaining == burst - 1
