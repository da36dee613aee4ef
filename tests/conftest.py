"""Fixtures: every database-touching test runs on SQLite and on PostgreSQL.

Each test session gets its own SQLite file and its own PostgreSQL database (created here,
dropped at the end), so runs never see each other's rows. Tests isolate from each other
by tenant: each makes its own company, clients and credentials through the API.
"""

from __future__ import annotations

import gc
import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from starlette.testclient import TestClient

from headwater.config import Settings
from headwater.db import Database
from headwater.identity import secrets as identity_secrets
from headwater.kit import memory
from headwater.main import create_app
from tests import http_server, preloaded
from tests.factories import (
    OPERATOR_ID,
    OPERATOR_SECRET,
    PG_ADMIN_URL,
    SEALING_KEY,
    auth,
    create_company,
    create_credential,
    database,
    get_token,
)
from tests.tenants import Tenant

# Property tests: machines here are shared and noisy, so no per-example deadline and no
# complaint about slow generation; the examples themselves are what is checked.
hypothesis_settings.register_profile(
    "headwater", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
hypothesis_settings.load_profile("headwater")


# Secret hashing at the tests' cost, here and in the server processes forked for the
# tests (`tests/preloaded.py`); those started anew (several API processes, the demo) hash
# at the real cost, and `real_secret_hashing` gives a test the real one.
REAL_HASHER = preloaded.light_secret_hashing()


# One SSL context for the httpx clients of this process that ask for the default one:
# httpx builds one for each client (and each `httpx.get`), loading certifi's bundle
# again, about 50 ms of CPU, and the server step makes over a thousand (py-spy: 55-75 s
# of that step's CPU). A context serves any number of connections at once.
_DEFAULT_SSL = httpx.create_ssl_context()
_create_ssl_context = httpx.create_ssl_context


def _shared_ssl_context(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
    if verify is True and cert is None and trust_env:
        return _DEFAULT_SSL
    return _create_ssl_context(verify=verify, cert=cert, trust_env=trust_env)


httpx._transports.default.create_ssl_context = _shared_ssl_context  # type: ignore[attr-defined]


@pytest.fixture
def real_secret_hashing(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    identity_secrets._dummy_hash.cache_clear()
    monkeypatch.setattr(identity_secrets, "_hasher", REAL_HASHER)
    yield
    identity_secrets._dummy_hash.cache_clear()


class _Running:
    """Which test runs now, for `tests.http_server.start_server`'s check: set before any
    fixture of the test starts a server. A plugin, so that it sees the client's tests
    too (a conftest's own hooks see only the items below it)."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        http_server.CURRENT[:] = [item]


class _LongFirst:
    """The files holding a test marked `long` first, then the rest by their number of
    tests, most first (xdist's own order, which `scripts/test` turns off with
    `--no-loadscope-reorder`): each file runs on one worker (`--dist loadfile`), and a
    minute-long file handed out last kept one worker busy while the other waited."""

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        by_file: dict[str, list[pytest.Item]] = {}
        for item in items:
            by_file.setdefault(item.nodeid.split("::")[0], []).append(item)

        def order(tests: list[pytest.Item]) -> tuple[bool, int]:
            return (not any(t.get_closest_marker("long") for t in tests), -len(tests))

        items[:] = [item for tests in sorted(by_file.values(), key=order) for item in tests]


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_Running(), "headwater-running-test")
    config.pluginmanager.register(_LongFirst(), "headwater-long-first")
    # What is loaded now is frozen out of the collector for the session: an app started
    # in this process (`memory.collecting_less`) then finds a freeze and leaves the
    # collector as it is. Without it, each app started with no other running made a full
    # collection of this process's millions of objects: the session's app is started
    # again each time the tests switch database, and py-spy of the in-process step
    # found 69 of 822 sampled seconds there. The tests of the collector thaw it (`thawed`).
    gc.freeze()


@pytest.fixture
def thawed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """For a test of what an outermost app does to the collector: the session's freeze
    (`pytest_configure`) thawed for the test, frozen again after, and the apps this
    process runs (the session's `client`, say) left out of `collecting_less`'s count."""
    frozen = gc.get_freeze_count() > 0
    gc.unfreeze()
    monkeypatch.setattr(memory, "_running", 0)
    yield
    if frozen:
        gc.freeze()


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A PostgreSQL database for this test session only."""
    name = f"hw_test_{os.getpid()}_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    yield f"{base}/{name}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("headwater")


@pytest.fixture(scope="session")
def database_url(backend: str, request: pytest.FixtureRequest) -> str | None:
    if backend == "postgresql":
        return str(request.getfixturevalue("pg_database"))
    return None


@pytest.fixture(scope="session")
def base_settings(database_url: str | None, data_root: Path, backend: str) -> dict[str, Any]:
    return {
        "data_dir": data_root / backend,
        "database_url": database_url,
        "bootstrap_client_id": OPERATOR_ID,
        "bootstrap_client_secret": OPERATOR_SECRET,
        "public_url": "http://testserver",
        "rate_limit_per_second": 100_000,
        "rate_limit_burst": 100_000,
        "token_failures_per_minute": 100_000,
        "worker_enabled": False,
        "log_level": "WARNING",
        # the suite's budget: 3 pytest workers in each step, each with a few
        # apps and server processes, stay within the 40 PostgreSQL connections it may hold
        "db_connections": 10,
        # shared with the server processes the tests start (contract 19)
        "webhook_secret_key": SEALING_KEY,
    }


@pytest.fixture(scope="session")
def settings(base_settings: dict[str, Any]) -> Settings:
    return Settings(**base_settings)


@pytest.fixture
def db(settings: Settings) -> Iterator[Database]:
    """The tests' database, through a pool of the test's own."""
    with database(settings) as opened:
        yield opened


@pytest.fixture(scope="session")
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


@pytest.fixture
def make_client(base_settings: dict[str, Any]) -> Iterator[Callable[..., TestClient]]:
    """A separate app on the same database with some settings changed."""
    opened: list[TestClient] = []

    def make(**overrides: Any) -> TestClient:
        test_client = TestClient(create_app(Settings(**(base_settings | overrides))))
        test_client.__enter__()
        opened.append(test_client)
        return test_client

    yield make
    for test_client in opened:
        test_client.__exit__(None, None, None)


@pytest.fixture(scope="module")
def loopback_client(base_settings: dict[str, Any]) -> Iterator[TestClient]:
    """An app on the same database whose webhook endpoints may be on loopback over http
    (tests only), its worker off: one for a test file's tests, where an app each cost
    0.2-0.3 s of CPU (FastAPI builds its routes for each app at their first request)."""
    loopback = {"webhook_allow_http": True, "webhook_allow_private": True}
    with TestClient(create_app(Settings(**(base_settings | loopback)))) as test_client:
        yield test_client


@pytest.fixture
def operator_token(client: TestClient) -> str:
    return get_token(client, OPERATOR_ID, OPERATOR_SECRET)


@pytest.fixture
def admin(operator_token: str) -> dict[str, str]:
    return auth(operator_token)


@pytest.fixture
def company(client: TestClient, admin: dict[str, str]) -> str:
    return create_company(client, admin)


@pytest.fixture
def credential(client: TestClient, admin: dict[str, str], company: str) -> dict[str, Any]:
    return create_credential(client, admin, company, scopes=["data:read", "workflows:read"])


@pytest.fixture
def company_token(client: TestClient, credential: dict[str, Any]) -> str:
    return get_token(client, credential["client_id"], credential["client_secret"])


@pytest.fixture
def tenant(client: TestClient, admin: dict[str, str], company: str) -> Tenant:
    return Tenant(client, admin, company)


@pytest.fixture
def other_tenant(client: TestClient, admin: dict[str, str]) -> Tenant:
    return Tenant(client, admin, create_company(client, admin, "Other Co"))
