"""The DomainError tree and the one handler that writes RFC 9457 problem+json for all of it."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import orjson
from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match

from headwater.kit.context import request_id_var
from headwater.kit.strictjson import StrictJSONError, pointer

PROBLEM_JSON = "application/problem+json"
PROBLEM_BASE = "https://headwater.dev/problems/"


class DomainError(Exception):
    """An error a client can act on. Subclasses set status, code and title."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"
    title: ClassVar[str] = "Internal server error"

    def __init__(
        self,
        detail: str,
        *,
        errors: Sequence[Mapping[str, Any]] | None = None,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.errors = list(errors) if errors is not None else None
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})

    def problem(self) -> dict[str, Any]:
        return problem_body(
            status=self.status,
            code=self.code,
            title=self.title,
            detail=self.detail,
            errors=self.errors,
            extra=self.extra,
        )


class BadRequest(DomainError):
    status = 400
    code = "bad_request"
    title = "Bad request"


class InvalidParameter(BadRequest):
    code = "invalid_parameter"
    title = "Invalid parameter"


class MalformedJSON(BadRequest):
    code = "malformed_json"
    title = "Malformed JSON"

    @classmethod
    def of(cls, exc: StrictJSONError) -> MalformedJSON:
        """The 400 for a body the strict parser refused: what is wrong, and where."""
        where = f" (byte {exc.position})" if exc.position is not None else ""
        return cls(
            f"The request body is not acceptable JSON: {exc.message}{where}.",
            errors=[{"location": "body", "field": "", "message": exc.message}],
        )


class Unauthorized(DomainError):
    status = 401
    code = "unauthorized"
    title = "Unauthorized"


class InvalidToken(Unauthorized):
    code = "invalid_token"
    title = "Invalid token"

    def __init__(self, detail: str) -> None:
        escaped = detail.replace("\\", "\\\\").replace('"', '\\"')
        super().__init__(
            detail,
            headers={
                "WWW-Authenticate": f'Bearer error="invalid_token", error_description="{escaped}"'
            },
        )


class MissingToken(Unauthorized):
    code = "missing_token"
    title = "Authentication required"

    def __init__(self) -> None:
        super().__init__(
            "This endpoint needs an `Authorization: Bearer <token>` header.",
            headers={"WWW-Authenticate": "Bearer"},
        )


class Forbidden(DomainError):
    status = 403
    code = "forbidden"
    title = "Forbidden"


class InsufficientScope(Forbidden):
    code = "insufficient_scope"
    title = "Insufficient scope"

    def __init__(self, needed: Sequence[str]) -> None:
        scopes = " ".join(needed)
        super().__init__(
            f"The token lacks the scope this call needs: {scopes}.",
            headers={"WWW-Authenticate": f'Bearer error="insufficient_scope", scope="{scopes}"'},
            extra={"required_scopes": list(needed)},
        )


class NotFound(DomainError):
    status = 404
    code = "not_found"
    title = "Not found"


class MethodNotAllowed(DomainError):
    status = 405
    code = "method_not_allowed"
    title = "Method not allowed"


class Conflict(DomainError):
    status = 409
    code = "conflict"
    title = "Conflict"


class PayloadTooLarge(DomainError):
    status = 413
    code = "payload_too_large"
    title = "Payload too large"


class UnsupportedMediaType(DomainError):
    status = 415
    code = "unsupported_media_type"
    title = "Unsupported media type"


class RateLimited(DomainError):
    status = 429
    code = "rate_limited"
    title = "Too many requests"


class ServiceUnavailable(DomainError):
    status = 503
    code = "service_unavailable"
    title = "Service unavailable"


class DatabaseUnavailable(ServiceUnavailable):
    code = "database_unavailable"

    def __init__(self) -> None:
        super().__init__(
            "The database cannot be reached; retry later.", headers={"Retry-After": "5"}
        )


def problem_body(
    *,
    status: int,
    code: str,
    title: str,
    detail: str,
    errors: Sequence[Mapping[str, Any]] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": PROBLEM_BASE + code,
        "title": title,
        "status": status,
        "detail": detail,
        "code": code,
    }
    if errors is not None:
        # text a client sent, echoed in `field` or `path`, never carries U+0000 back
        body["errors"] = [
            {k: v.replace("\x00", "\\u0000") if isinstance(v, str) else v for k, v in e.items()}
            for e in errors
        ]
    if extra:
        body.update(extra)
    request_id = request_id_var.get()
    if request_id:
        body["request_id"] = request_id
    return body


STATUS_ERRORS: dict[int, type[DomainError]] = {
    cls.status: cls
    for cls in (
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        MethodNotAllowed,
        Conflict,
        PayloadTooLarge,
        UnsupportedMediaType,
        RateLimited,
        ServiceUnavailable,
    )
}


# --- the handlers (Starlette types only; main.create_app installs them) ----------------


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


def is_unreachable(exc: BaseException) -> bool:
    """True for errors that mean the database is down, not that a query was wrong."""
    if isinstance(exc, OperationalError | DisconnectionError | PoolTimeout):
        return True
    return isinstance(exc, DBAPIError) and exc.connection_invalidated


async def handle_unexpected(_request: Request, exc: Exception) -> Response:
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
