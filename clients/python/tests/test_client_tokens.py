"""Tokens: fetched once, cached, renewed before they expire, renewed once on a 401, and
one request for many threads or tasks at the same time. Against real servers."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from tests.factories import OPERATOR_ID, OPERATOR_SECRET, run_cli
from tests.http_server import running_server, status_of

from conftest import FAST, Recorder, Tenant, server_env
from headwater_client import AuthenticationError, Client

pytestmark = pytest.mark.http


@pytest.fixture(scope="module")
def rotating_server(
    database_url: str | None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, str]]]:
    """A server with 60 s tokens whose worker reloads signing keys every half second, and
    the environment to run `headwater` commands against its database."""
    env = server_env(
        tmp_path_factory.mktemp("rotating"),
        database_url,
        HEADWATER_TOKEN_LIFETIME_SECONDS="60",
        HEADWATER_WORKER_INTERVAL_SECONDS="0.5",
    )
    with running_server(env) as url:
        yield url, env


def test_a_token_is_fetched_once_and_reused(tenant: Tenant, recorder: Recorder) -> None:
    with tenant.client(recorder) as hw:
        for _ in range(5):
            assert hw.whoami().company_id == tenant.company_id
        assert hw.token().expires_in > 0
    assert recorder.token_requests == 1
    assert recorder.count("/platform/v1/whoami") == 5


def test_many_threads_share_one_token_request(tenant: Tenant, recorder: Recorder) -> None:
    with tenant.client(recorder) as hw, ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: hw.whoami().subject, range(64)))
    assert set(answers) == {tenant.credential_id}
    assert recorder.token_requests == 1


def test_many_tasks_share_one_token_request(tenant: Tenant, recorder: Recorder) -> None:
    async def run() -> list[str]:
        async with tenant.async_client(recorder) as hw:
            return [me.subject for me in await asyncio.gather(*(hw.whoami() for _ in range(32)))]

    assert set(asyncio.run(run())) == {tenant.credential_id}
    assert recorder.token_requests == 1


def test_a_token_is_renewed_shortly_before_it_expires(
    rotating_server: tuple[str, dict[str, str]], recorder: Recorder
) -> None:
    url, _ = rotating_server
    tenant = Tenant(url)
    # 60 s tokens, renewed 58 s before they run out: due after 2 s.
    with tenant.client(recorder, token_refresh_margin=58) as hw:
        first = hw.token()
        assert first.expires_in == 60
        hw.whoami()
        assert hw.token() is first
        assert recorder.token_requests == 1
        time.sleep(2.2)
        hw.whoami()
        assert recorder.token_requests == 2
        assert hw.token().access_token != first.access_token
    # the expired-looking token was never sent: no request was refused
    assert all(status != 401 for _, status in recorder.statuses)


def test_a_refused_token_is_renewed_once_and_the_request_retried(
    rotating_server: tuple[str, dict[str, str]], recorder: Recorder
) -> None:
    """The operator rotates the signing key and removes the old one: tokens signed with
    it are refused (401). The client gets a new token and retries, once."""
    url, env = rotating_server
    tenant = Tenant(url)
    with tenant.client(recorder) as hw:
        hw.whoami()
        old_kid = _kid(hw.token().access_token)
        _headwater(env, "keys", "rotate")
        _headwater(env, "keys", "remove", "--", old_kid)
        _wait_until_refused(url, hw.token().access_token)
        assert hw.whoami().subject == tenant.credential_id
    assert recorder.token_requests == 2
    assert [s for p, s in recorder.statuses if p == "/platform/v1/whoami"] == [200, 401, 200]


@pytest.fixture(scope="module")
def other_installation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server with a database of its own: another installation, whose tokens no
    instance of the first accepts (instances on one database share their issuer)."""
    with running_server(server_env(tmp_path_factory.mktemp("elsewhere"), None)) as url:
        yield url


def test_a_token_refused_again_raises_after_one_renewal(
    server: str, other_installation: str, recorder: Recorder
) -> None:
    """Tokens from another installation are always refused: one renewal, then
    AuthenticationError, not a loop."""
    other = other_installation
    hw = Client(
        server,
        OPERATOR_ID,
        OPERATOR_SECRET,
        auth_url=other,
        retry=FAST,
        http_client=recorder.http(),
    )
    with hw, pytest.raises(AuthenticationError) as refused:
        hw.whoami()
    assert refused.value.status == 401
    assert recorder.token_requests == 2
    assert recorder.count("/platform/v1/whoami") == 2


def test_wrong_credentials_raise_at_once(tenant: Tenant, recorder: Recorder) -> None:
    hw = Client(tenant.url, tenant.credential_id, "not-the-secret", http_client=recorder.http())
    with hw, pytest.raises(AuthenticationError) as refused:
        hw.whoami()
    assert refused.value.code == "invalid_client"
    assert "not-the-secret" not in str(refused.value)
    assert recorder.token_requests == 1  # a refusal is not retried
    assert recorder.count("/platform/v1/whoami") == 0


def _kid(token: str) -> str:
    header = token.split(".")[0]
    return str(json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))["kid"])


def _wait_until_refused(url: str, token: str) -> None:
    """Until the server's worker has reloaded the keys and refuses `token`."""
    deadline = time.monotonic() + 30
    headers = {"Authorization": f"Bearer {token}"}
    while status_of(url + "/platform/v1/whoami", headers=headers, timeout=10) != 401:
        assert time.monotonic() < deadline, "the server kept accepting the removed key"
        time.sleep(0.2)


def _headwater(env: dict[str, str], *args: str) -> None:
    """`headwater ARGS` against the rotating server's database."""
    done = run_cli(
        *args,
        data_dir=Path(env["HEADWATER_DATA_DIR"]),
        database_url=env.get("HEADWATER_DATABASE_URL"),
    )
    assert done.returncode == 0, done.stderr
