"""No GET request writes (contract 19), so that any read may go to a replica.

Every GET route of the API and the console is called, as a company and as the operator,
after pushes whose records and events wait for their feed positions; each statement the
process runs is seen by the engines' `before_cursor_execute`, and those run for a GET
request (a context variable set around each request, which its threads inherit) must
all be reads. The feeds still answer with the reader's own writes: the numbering they
ask for runs on the process's numbering threads, outside any request.

The one exception is the interface document's own `GET /platform/v1/data/file_upload_url`,
which makes the transaction the upload will fill: it is a write by design, and is never
sent to a replica."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import pytest
from sqlalchemy import Engine, event
from starlette.testclient import TestClient

from headwater.config import Settings
from headwater.main import create_app
from tests.console.conftest import OPERATOR, Browser
from tests.downstream.conftest import FeedTenant
from tests.factories import OPERATOR_ID, OPERATOR_SECRET, auth, create_credential, get_token
from tests.reliability.test_isolation import EVERY_SCOPE
from tests.routes import every_route

WRITES_BY_DESIGN = {"/platform/v1/data/file_upload_url"}
WRITE = re.compile(
    r"^\s*(INSERT|UPDATE|DELETE|REPLACE|MERGE|CREATE|DROP|ALTER|TRUNCATE|NOTIFY|LOCK)\b"
    r"|\bFOR (NO KEY )?UPDATE\b|\bFOR SHARE\b|pg_notify|pg_advisory",
    re.IGNORECASE,
)
_REQUEST: ContextVar[str | None] = ContextVar("request", default=None)


class Statements:
    """The statements each request ran, by request (`METHOD path`)."""

    def __init__(self) -> None:
        self.by_request: dict[str, list[str]] = {}

    def watch(self, engine: Engine) -> None:
        event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        request = _REQUEST.get()
        if request is not None:
            self.by_request.setdefault(request, []).append(statement)

    def writes(self, method: str = "GET") -> dict[str, list[str]]:
        return {
            request: found
            for request, statements in self.by_request.items()
            if request.startswith(f"{method} ")
            and (found := [s for s in statements if WRITE.search(s)])
        }


def _tagged(app: Any) -> Any:
    """The app, with each HTTP request's method and path in `_REQUEST` while it runs."""

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        token = _REQUEST.set(f"{scope['method']} {scope['path']}")
        try:
            await app(scope, receive, send)
        finally:
            _REQUEST.reset(token)

    asgi.state = app.state  # type: ignore[attr-defined]
    return asgi


@pytest.fixture
def watched(settings: Settings) -> Iterator[tuple[TestClient, Statements, Any]]:
    app = create_app(settings)
    statements = Statements()
    with TestClient(_tagged(app)) as client:
        db = app.state.runtime.db
        for engine in {db.engine, db.reader, db.replica}:
            statements.watch(engine)
        yield client, statements, app


def _get_paths(app: Any, values: dict[str, str]) -> list[str]:
    """Every GET route's path, its parameters filled from `values` (a random id for any
    other: that route's 404 must not write either)."""
    return sorted(
        {
            re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: values.get(m[1], str(uuid.uuid4())), path)
            for method, path in every_route(app)
            if method == "GET"
        }
    )


def test_no_get_request_writes(watched: tuple[TestClient, Statements, Any]) -> None:
    client, statements, app = watched
    admin = auth(get_token(client, OPERATOR_ID, OPERATOR_SECRET))
    company = client.post("/admin/v1/companies", json={"name": "G"}, headers=admin).json()["id"]
    tenant = FeedTenant(client, admin, company)
    everything = create_credential(client, admin, company, scopes=EVERY_SCOPE)
    headers = auth(get_token(client, everything["client_id"], everything["client_secret"]))
    pushed = tenant.push_orders(1, 2, 3)["transaction_id"]
    tenant.push_orders(4)
    assert statements.writes("POST")  # the watch sees writes where there are some

    company_page, operator_page = Browser(client), Browser(client)
    company_page.signed_in(everything)
    operator_page.signed_in(OPERATOR)
    values = {
        "client_id": tenant.client_id,
        "dataset_id": "orders",
        "transaction_id": pushed,
        "company_id": company,
        "version": "1",
        "n": "1",
    }
    query = {"client_id": tenant.client_id, "dataset_id": "orders"}
    answered: dict[str, int] = {}
    for path in _get_paths(app, values):
        if path in WRITES_BY_DESIGN:
            continue
        if path.startswith("/console"):
            for browser in (company_page, operator_page):
                answered[path] = browser.get(path).status_code
        else:
            for caller in (headers, admin):
                answered[path] = client.get(path, params=query, headers=caller).status_code
    assert not [path for path, code in answered.items() if code >= 500], answered
    assert {"/platform/v1/data/changes", "/platform/v1/events", "/console"} <= set(answered)

    assert statements.writes("GET") == {}
    # the feeds read every record and event pushed, numbered outside the requests
    feed = client.get("/platform/v1/data/changes", params=query, headers=headers).json()
    assert sorted(r["data"]["order_id"] for r in feed["data"]) == ["A-1", "A-2", "A-3", "A-4"]
    events = client.get("/platform/v1/events", headers=headers).json()["data"]
    assert len(events) >= 2
    assert statements.writes("GET") == {}


def test_the_upload_url_is_the_one_get_that_writes(
    watched: tuple[TestClient, Statements, Any],
) -> None:
    """The exception is real (it makes a transaction), so the sweep above must skip it,
    and the watch would have caught it."""
    client, statements, _app = watched
    admin = auth(get_token(client, OPERATOR_ID, OPERATOR_SECRET))
    company = client.post("/admin/v1/companies", json={"name": "U"}, headers=admin).json()["id"]
    tenant = FeedTenant(client, admin, company)
    tenant.upload_url()
    assert list(statements.writes("GET")) == ["GET /platform/v1/data/file_upload_url"]
