"""The DomainError tree: every error a client can act on, with its status, code and RFC
9457 problem body. No HTTP framework here: `web.problems` renders these as responses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from headwater.kit.context import request_id_var
from headwater.kit.strictjson import StrictJSONError

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


class InvalidCursor(BadRequest):
    """A feed's `after` that is not a cursor the feed gave (events, record changes)."""

    code = "invalid_cursor"
    title = "Invalid cursor"

    def __init__(self, detail: str) -> None:
        super().__init__(
            detail, errors=[{"location": "query", "field": "after", "message": "not a cursor"}]
        )


class Gone(DomainError):
    status = 410
    code = "gone"
    title = "Gone"


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


class DatabaseBusy(ServiceUnavailable):
    """The request's database transaction met another's and was ended (a deadlock, a
    serialization failure, a lock not granted): nothing of it was kept, and the same
    request may be sent again at once."""

    code = "database_busy"

    def __init__(self, kind: str) -> None:
        super().__init__(
            f"The request met another's writes ({kind}) and nothing of it was kept; send it again.",
            headers={"Retry-After": "1"},
        )


# PostgreSQL's SQLSTATEs of a transaction ended for another's sake
CONFLICTS = {"40P01": "deadlock", "40001": "serialization failure", "55P03": "lock not available"}


def conflict_of(exc: BaseException) -> str | None:
    """What kind of conflict with another transaction ended this one, if one did."""
    if not isinstance(exc, DBAPIError) or exc.connection_invalidated:
        return None
    return CONFLICTS.get(getattr(exc.orig, "sqlstate", None) or "")


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


def is_unreachable(exc: BaseException) -> bool:
    """True for errors that mean the database is down, not that a query was wrong."""
    if isinstance(exc, OperationalError | DisconnectionError | PoolTimeout):
        return True
    return isinstance(exc, DBAPIError) and exc.connection_invalidated
