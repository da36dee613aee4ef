"""Every error the client raises is a `HeadwaterError`; the API's own refusals are
`APIError`s carrying the problem+json body the service answered."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from headwater_client.models import BatchResult


class HeadwaterError(Exception):
    """Base of every error this library raises."""


class ConfigurationError(HeadwaterError):
    """Credentials or the service address are missing or unusable."""


class ConnectionFailed(HeadwaterError):
    """The service could not be reached, still after the retries the client allows."""


class WaitTimeout(HeadwaterError):
    """A transaction (or an export) did not reach a final status in the time given."""


class ErasureFailed(HeadwaterError):
    """An erasure ended `failed` (the service retries it first; ask again)."""


class ExportFailed(HeadwaterError):
    """An export failed (its `error` says why), or has no file to download."""


class APIError(HeadwaterError):
    """The service answered with an error status.

    `code` is the problem's machine-readable code (`dataset_not_found`,
    `rate_limited`...), `errors` its list of what was wrong and where, `body` the whole
    answer as parsed JSON (or None when it was not JSON).
    """

    def __init__(
        self,
        status: int,
        *,
        code: str,
        title: str,
        detail: str,
        errors: list[dict[str, Any]] | None = None,
        body: Any = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(f"{status} {title}: {detail}" if detail else f"{status} {title}")
        self.status = status
        self.code = code
        self.title = title
        self.detail = detail
        self.errors = errors or []
        self.body = body
        self.request_id = request_id


class AuthenticationError(APIError):
    """401: the credentials were refused, or a fresh token was refused too."""


class PermissionDenied(APIError):
    """403: the token lacks the scope, or may not use that ingestion client."""


class NotFound(APIError):
    """404: no such resource, or it belongs to another company."""


class Conflict(APIError):
    """409: an idempotency key reused with another body, an illegal status change..."""


class PayloadTooLarge(APIError):
    """413: a body, batch or file over the service's limits."""


class InvalidRequest(APIError):
    """400 or 415: the request itself was malformed; `errors` names each member."""


class RecordsInvalid(APIError):
    """422: records failed their dataset's schema; nothing of that request was stored."""


class RateLimited(APIError):
    """429, still after the retries the client allows."""


class ServiceUnavailable(APIError):
    """5xx, still after the retries the client allows when the status is retryable."""


@dataclass(frozen=True, slots=True)
class RecordError:
    """One problem of one record: `record` is its index in the caller's iterable."""

    record: int
    path: str
    keyword: str
    message: str


class PushRejected(RecordsInvalid):
    """A batch of a push failed validation.

    Batches before it are committed and listed in `committed`; the failing batch stored
    nothing and no later batch was sent. `record_errors` has the service's errors with
    `record` mapped to the index in the iterable given to `push` (the service lists at
    most 100 a batch; `error_count` counts them all). `transaction_id` is the rejected
    batch's transaction.
    """

    def __init__(
        self,
        cause: APIError,
        *,
        first_record: int,
        committed: list[BatchResult],
    ) -> None:
        super().__init__(
            cause.status,
            code=cause.code,
            title=cause.title,
            detail=cause.detail,
            errors=cause.errors,
            body=cause.body,
            request_id=cause.request_id,
        )
        body = cause.body if isinstance(cause.body, dict) else {}
        self.transaction_id: str | None = body.get("transaction_id")
        self.error_count: int = int(body.get("error_count", len(cause.errors)))
        self.first_record = first_record
        self.committed = committed
        self.record_errors = [
            RecordError(
                record=first_record + int(error.get("record", 0)),
                path=str(error.get("path", "")),
                keyword=str(error.get("keyword", "")),
                message=str(error.get("message", "")),
            )
            for error in cause.errors
        ]


_BY_STATUS: dict[int, type[APIError]] = {
    400: InvalidRequest,
    401: AuthenticationError,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    415: InvalidRequest,
    422: RecordsInvalid,
    429: RateLimited,
}


def error_from_response(response: httpx.Response) -> APIError:
    """The `APIError` for an error answer: problem+json, the token endpoint's RFC 6749
    body, or anything else a proxy in between may have answered."""
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    status = response.status_code
    if isinstance(body, dict) and "error" in body and "title" not in body:
        # RFC 6749 section 5.2, from the token endpoint
        code, title = str(body["error"]), str(body["error"])
        detail = str(body.get("error_description", ""))
        errors: list[dict[str, Any]] = []
    elif isinstance(body, dict):
        code = str(body.get("code") or str(body.get("type", "")).rsplit("/", 1)[-1])
        title = str(body.get("title") or response.reason_phrase)
        detail = str(body.get("detail", ""))
        errors = [e for e in body.get("errors") or [] if isinstance(e, dict)]
    else:
        code, title, errors = "http_error", response.reason_phrase, []
        detail = response.text[:500]
    if status >= 500:
        cls: type[APIError] = ServiceUnavailable
    else:
        cls = _BY_STATUS.get(status, APIError)
    return cls(
        status,
        code=code,
        title=title,
        detail=detail,
        errors=errors,
        body=body,
        request_id=response.headers.get("x-request-id"),
    )
