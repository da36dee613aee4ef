"""What arrived: the overview's charts, the transactions, and one transaction with its
errors and quarantined rows, which can be corrected and resubmitted."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, get_args

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from headwater.console import charts
from headwater.console.deps import (
    Changing,
    ConsoleRoute,
    Fields,
    Form,
    IdPath,
    Signed,
    needs,
    page,
    pages,
    pretty,
    redirect,
)
from headwater.console.errors import BadForm
from headwater.files import quarantine
from headwater.files.schemas import QuarantineQuery
from headwater.ingestion import traffic, transactions
from headwater.ingestion.schemas import Channel, TransactionQuery, TransactionStatus
from headwater.kit.clock import utcnow
from headwater.web.deps import RuntimeDep
from headwater.webhooks import service as webhooks

router = APIRouter(prefix="/console", route_class=ConsoleRoute)

STATUSES = get_args(TransactionStatus)
CHANNELS = get_args(Channel)


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
    hooks = None
    if "webhooks:manage" in who.principal.scopes:  # what the API would show it
        with runtime.db.replica_session() as session:
            hooks = webhooks.health(
                session, company_id=who.principal.actor.company_id, since=now - timedelta(hours=24)
            )
    return page(
        request,
        "overview.html",
        who,
        totals=charts.totals(day),
        week_totals=charts.totals(week),
        hooks=hooks,
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
        pages=pages(request, query, total),
    )


@router.get("/transactions/{transaction_id}")
def transaction_page(
    request: Request, transaction_id: IdPath, runtime: RuntimeDep, who: Signed
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
def resubmit(transaction_id: IdPath, runtime: RuntimeDep, who: Changing, fields: Form) -> Response:
    """A quarantined row corrected in the page, or every open row as it stands."""
    needs(who, "data:write")
    corrections = None
    if "line" in fields:
        line, data = _correction(fields)
        corrections = {line: data}
    answer = quarantine.resubmit(runtime.db, who.principal, transaction_id, corrections)
    return redirect(f"/console/transactions/{answer.transaction_id}")


def _correction(fields: Fields) -> tuple[int, dict[str, Any]]:
    line = fields.get("line")
    if not line.isdigit() or int(line) < 1:
        raise BadForm("line: a quarantined row's line number (1 or more).")
    data = fields.json("data")
    if not isinstance(data, dict):
        raise BadForm(f"data (line {line}): a record is a JSON object.")
    return int(line), data


def _row(row: Any) -> dict[str, Any]:
    return {
        "line": row.line,
        "record": row.record,
        "data": None if row.data is None else pretty(row.data),
        "raw": row.raw,
        "errors": row.errors,
        "resolved_by": row.resolved_by,
    }
