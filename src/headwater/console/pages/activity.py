"""The company's activity log, searched with the filters of interface document 4.8."""

from __future__ import annotations

from typing import Any, get_args

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from headwater.activity import service as activity
from headwater.activity.schemas import Action, ActivitySearch, ResourceType, SortField
from headwater.console.deps import ConsoleRoute, Signed, needs, page, pages, pretty
from headwater.console.errors import BadForm
from headwater.web.deps import RuntimeDep

router = APIRouter(prefix="/console", route_class=ConsoleRoute)

MATCHED = ("resource_type", "resource_id", "author_id", "action")


def search_of(asked: dict[str, str]) -> ActivitySearch:
    """The API's search body from the page's query: each filter a single value, the
    time bounds as `$gte` and `$lt` (UTC)."""
    found: dict[str, Any] = {k: asked[k] for k in MATCHED if asked.get(k)}
    bounds = {
        op: value if value.endswith("Z") or "+" in value[10:] else value + "Z"
        for op, key in (("$gte", "from"), ("$lt", "to"))
        if (value := asked.get(key, "").strip())
    }
    if bounds:
        found["timestamp"] = bounds
    body: dict[str, Any] = {
        "page": asked.get("page", "0"),
        "page_size": asked.get("page_size", "20"),
        "sort_by": asked.get("sort_by") or "timestamp",
        "sort_direction": asked.get("sort_direction") or "desc",
    }
    for number in ("page", "page_size"):
        text = body[number]
        body[number] = int(text) if text.isdigit() and len(text) < 10 else text
    if found:
        body["filter"] = found
    return ActivitySearch.model_validate(body)


@router.get("/activity")
def activity_page(request: Request, runtime: RuntimeDep, who: Signed) -> HTMLResponse:
    needs(who, "activities:read")
    known = {*MATCHED, "from", "to", "page", "page_size", "sort_by", "sort_direction"}
    asked = {k: v for k, v in request.query_params.items() if v != ""}
    unknown = sorted(set(asked) - known)
    if unknown:
        raise BadForm(f"Unknown parameter: {', '.join(unknown)}.")
    query = search_of(asked)
    with runtime.db.read_session() as session:
        found = orjson.loads(
            activity.search(session, company_id=who.principal.actor.company_id, query=query)
        )
    entries = [
        entry
        | {
            "before_text": None if entry["before"] is None else pretty(entry["before"]),
            "after_text": None if entry["after"] is None else pretty(entry["after"]),
        }
        for entry in found["data"]
    ]
    return page(
        request,
        "activity.html",
        who,
        entries=entries,
        total=found["total_entries"],
        asked=asked,
        resource_types=get_args(ResourceType),
        actions=get_args(Action),
        sort_fields=get_args(SortField),
        pages=pages(request, query, found["total_entries"]),
    )
