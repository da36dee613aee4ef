"""Problem+json responses: DomainErrors, Starlette's HTTP errors, FastAPI's validation
errors and anything unexpected, each as RFC 9457 (main.create_app installs them)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match

from headwater.errors import (
    STATUS_ERRORS,
    BadRequest,
    DatabaseBusy,
    DatabaseUnavailable,
    DomainError,
    InvalidParameter,
    MalformedJSON,
    conflict_of,
    is_unreachable,
    problem_body,
)
from headwater.kit.strictjson import pointer

PROBLEM_JSON = "application/problem+json"

log = logging.getLogger("headwater.errors")


def problem_response(
    body: Mapping[str, Any], *, status: int, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(
        orjson.dumps(body), status_code=status, headers=headers, media_type=PROBLEM_JSON
    )


def error_response(error: DomainError) -> Response:
    return problem_response(error.problem(), status=error.status, headers=error.headers)


async def handle_domain_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DomainError)
    return error_response(exc)


def _allowed_methods(request: Request) -> str:
    """Every method some route serves at this path (Starlette names only the first route's)."""
    allowed = []
    for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"):
        scope = {"type": "http", "path": request.url.path, "root_path": "", "method": method}
        if any(route.matches(scope)[0] is Match.FULL for route in request.app.router.routes):
            allowed.append(method)
    return ", ".join(allowed)


async def handle_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = _allowed_methods(request)
    cls = STATUS_ERRORS.get(exc.status_code, DomainError)
    detail = {
        404: "No resource lives at this path.",
        405: "This path does not accept that method.",
    }.get(exc.status_code, str(exc.detail))
    body = problem_body(status=exc.status_code, code=cls.code, title=cls.title, detail=detail)
    return problem_response(body, status=exc.status_code, headers=headers)


def validation_errors(raw: Sequence[Mapping[str, Any]]) -> DomainError:
    """FastAPI's request validation errors as one 400 problem naming every bad input."""
    items: list[dict[str, Any]] = []
    malformed = False
    for err in raw:
        loc = list(err.get("loc", ()))
        location = str(loc[0]) if loc else "body"
        if err.get("type") == "json_invalid":
            malformed = True
            ctx = err.get("ctx") or {}
            items.append(
                {"location": "body", "field": "", "message": str(ctx.get("error", err["msg"]))}
            )
            continue
        field = pointer(loc[1:]) if location == "body" else ".".join(map(str, loc[1:]))
        items.append({"location": location, "field": field, "message": str(err["msg"])})
    if malformed:
        return MalformedJSON("The request body is not valid JSON.", errors=items)
    if all(item["location"] == "body" for item in items):
        return BadRequest(
            "The request body is invalid: "
            + "; ".join(f"{i['field'] or '/'}: {i['message']}" for i in items),
            errors=items,
        )
    return InvalidParameter(
        "Invalid parameter: "
        + "; ".join(f"{i['field']} ({i['location']}): {i['message']}" for i in items),
        errors=items,
    )


async def handle_request_validation(_request: Request, exc: Exception) -> Response:
    return error_response(validation_errors(exc.errors()))  # type: ignore[attr-defined]


async def handle_unexpected(_request: Request, exc: Exception) -> Response:
    conflict = conflict_of(exc)
    if conflict is not None:  # not the database gone: a transaction ended for another's
        log.warning("database conflict: %s", conflict)
        return error_response(DatabaseBusy(conflict))
    if is_unreachable(exc):
        log.warning("database unreachable: %s", type(exc).__name__)
        return error_response(DatabaseUnavailable())
    log.exception("unhandled error")
    body = problem_body(
        status=500,
        code=DomainError.code,
        title=DomainError.title,
        detail="The server failed to answer this request; it has been logged.",
    )
    return problem_response(body, status=500)
