"""The console's pages for signing in and for company users: each parses, checks the
session's scopes, calls the same service function as the API's route and renders."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

from headwater.console import charts, sessions
from headwater.console.deps import (
    COOKIE,
    CSRF_FIELD,
    HERE,
    SIGN_IN_COOKIE,
    BadForm,
    Changing,
    ConsoleRoute,
    CsrfRefused,
    Form,
    Signed,
    needs,
    page,
    redirect,
    secure,
    set_cookie,
    sign_in_token,
)
from headwater.files import quarantine
from headwater.files.schemas import QuarantineQuery
from headwater.identity.errors import OAuthError
from headwater.ingestion import traffic, transactions
from headwater.ingestion.schemas import TransactionQuery
from headwater.kit import strictjson
from headwater.kit.clock import utcnow
from headwater.web.deps import RuntimeDep

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)
static = StaticFiles(directory=HERE / "static")

TransactionId = Annotated[uuid.UUID, Path()]
STATUSES = ("awaiting_upload", "processing", "completed", "rejected", "failed", "expired")
CHANNELS = ("api", "upload", "sftp", "email")


# --- signing in and out ----------------------------------------------------------------------


@router.get("/sign-in")
def sign_in_form(request: Request, next: str = "/console") -> HTMLResponse:
    token = sign_in_token(request)
    response = page(request, "sign_in.html", None, sign_in_csrf=token, next=_local(next))
    set_cookie(request, response, SIGN_IN_COOKIE, token, max_age=3600)
    return response


@router.post("/sign-in")
async def sign_in(request: Request, runtime: RuntimeDep, fields: Form) -> Response:
    """Check the credential as the token endpoint does (the same failure limit per
    address), then start a session: an HttpOnly, SameSite=Strict cookie."""
    expected = request.cookies.get(SIGN_IN_COOKIE, "")
    if not expected or fields.get(CSRF_FIELD) != expected:
        raise CsrfRefused("The sign-in form has expired; reload it and sign in again.")
    address = request.client.host if request.client else "unknown"
    next_page = _local(fields.get("next", "/console"))
    client_id = fields.get("client_id", "").strip()
    client_secret = fields.get("client_secret", "")

    def again(message: str, status: int) -> HTMLResponse:
        return page(
            request,
            "sign_in.html",
            None,
            status=status,
            sign_in_csrf=expected,
            next=next_page,
            client_id=client_id,
            error=message,
        )

    if runtime.token_failures.refused(address):
        return again("Too many failed sign-ins from this address; wait a minute.", 429)
    if not client_id or not client_secret:
        return again("Give the credential's client id and its secret.", 400)

    def start() -> sessions.Started:
        with runtime.db.unit_of_work() as session:
            return sessions.sign_in(
                session,
                client_id=client_id,
                client_secret=client_secret,
                hours=runtime.settings.console_session_hours,
            )

    try:
        started = await runtime.secret_checks.run(start)
    except OAuthError:
        await runtime.token_failures.failed(address)
        return again("That client id and secret do not sign in.", 401)
    response = redirect(next_page)
    hours = runtime.settings.console_session_hours
    set_cookie(request, response, COOKIE, started.token, max_age=hours * 3600)
    response.delete_cookie(SIGN_IN_COOKIE, path="/console")
    return response


@router.post("/sign-out")
def sign_out(request: Request, runtime: RuntimeDep, who: Changing) -> Response:
    with runtime.db.unit_of_work() as session:
        sessions.sign_out(session, request.cookies.get(COOKIE, ""))
    response = redirect("/console/sign-in")
    response.delete_cookie(COOKIE, path="/console", secure=secure(request), httponly=True)
    return response


def _local(target: str) -> str:
    """A page of the console to go to after signing in, never another site's."""
    if target.startswith("/console") and not target.startswith("//") and "\\" not in target:
        return target
    return "/console"


# --- company pages ------------------------------------------------------------------------


@router.get("")
def overview(request: Request, runtime: RuntimeDep, who: Signed) -> Response:
    if who.principal.company_id is None:
        return redirect("/console/companies")
    needs(who, "data:read")
    now = utcnow()
    with runtime.db.replica_session() as session:
        week = traffic.hourly(session, who.principal, hours=24 * 7, now=now)
    day_start = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=23)
    day = [c for c in week if c.hour >= day_start]
    return page(
        request,
        "overview.html",
        who,
        totals=charts.totals(day),
        week_totals=charts.totals(week),
        charts=[
            charts.by_hour(
                day,
                now=now,
                hours=24,
                key="status",
                measure="transactions",
                title="Transactions per hour, last 24 hours, by status",
            ),
            charts.by_hour(
                day,
                now=now,
                hours=24,
                key="channel",
                measure="records",
                title="Records per hour, last 24 hours, by channel",
            ),
            charts.by_hour(
                week,
                now=now,
                hours=24 * 7,
                key="status",
                measure="transactions",
                title="Transactions per hour, last 7 days, by status",
            ),
            charts.by_hour(
                week,
                now=now,
                hours=24 * 7,
                key="channel",
                measure="records",
                title="Records per hour, last 7 days, by channel",
            ),
        ],
    )


@router.get("/transactions")
def transaction_list(request: Request, runtime: RuntimeDep, who: Signed) -> HTMLResponse:
    needs(who, "data:read")
    asked = {k: v for k, v in request.query_params.items() if v != ""}
    query = TransactionQuery.model_validate(asked)
    with runtime.db.replica_session() as session:
        rows, total = transactions.list_transactions(session, who.principal, query)
        items = [transactions.transaction_view(r) for r in rows]
    return page(
        request,
        "transactions.html",
        who,
        items=items,
        total=total,
        query=query,
        asked=asked,
        statuses=STATUSES,
        channels=CHANNELS,
        pages=_pages(request, query.page, query.page_size, total),
    )


@router.get("/transactions/{transaction_id}")
def transaction_page(
    request: Request, transaction_id: TransactionId, runtime: RuntimeDep, who: Signed
) -> HTMLResponse:
    needs(who, "data:read")
    with runtime.db.read_session() as session:
        view = transactions.transaction_read(session, who.principal, transaction_id)
        rows: Any = []
        if view.kind == "file":
            rows, _ = quarantine.quarantined(
                session, who.principal, transaction_id, QuarantineQuery(page_size=100)
            )
            rows = [_row(r) for r in rows]
    template = "progress.html" if request.headers.get("HX-Request") else "transaction.html"
    return page(
        request,
        template,
        who,
        t=view,
        rows=rows,
        pending=view.status in transactions.PENDING_STATUSES,
        may_write="data:write" in who.principal.scopes,
    )


@router.post("/transactions/{transaction_id}/resubmit")
def resubmit(
    transaction_id: TransactionId, runtime: RuntimeDep, who: Changing, fields: Form
) -> Response:
    """A quarantined row corrected in the page, or every open row as it stands."""
    needs(who, "data:write")
    corrections = None
    if "line" in fields:
        line, data = _correction(fields)
        corrections = {line: data}
    answer = quarantine.resubmit(runtime.db, who.principal, transaction_id, corrections)
    return redirect(f"/console/transactions/{answer.transaction_id}")


def _correction(fields: Any) -> tuple[int, dict[str, Any]]:
    line = fields.get("line", "")
    if not line.isdigit() or int(line) < 1:
        raise BadForm("line: a quarantined row's line number (1 or more).")
    try:
        data = strictjson.loads(fields.get("data", "").encode())
    except ValueError as error:
        raise BadForm(f"data (line {line}): not JSON: {error}") from None
    if not isinstance(data, dict):
        raise BadForm(f"data (line {line}): a record is a JSON object.")
    return int(line), data


def _row(row: Any) -> dict[str, Any]:
    return {
        "line": row.line,
        "record": row.record,
        "data": None
        if row.data is None
        else orjson.dumps(row.data, option=orjson.OPT_INDENT_2).decode(),
        "raw": row.raw,
        "errors": row.errors,
        "resolved_by": row.resolved_by,
    }


def _pages(request: Request, current: int, size: int, total: int) -> dict[str, str | None]:
    last = max(0, (total - 1) // size)

    def link(number: int) -> str:
        return str(request.url.include_query_params(page=number))

    return {
        "previous": link(current - 1) if current > 0 else None,
        "next": link(current + 1) if current < last else None,
        "label": f"page {current + 1} of {last + 1}",
    }

