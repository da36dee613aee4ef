"""Ingestion errors."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from headwater.errors import (
    BadRequest,
    Conflict,
    DomainError,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    UnsupportedMediaType,
)


class DatasetNotFound(NotFound):
    code = "dataset_not_found"


class ClientNotFound(NotFound):
    code = "client_not_found"


class TransactionNotFound(NotFound):
    code = "transaction_not_found"


class DatasetExists(Conflict):
    code = "dataset_exists"


class ClientNotAllowed(Forbidden):
    """Also for a client that does not exist or is another company's: the answer is the same."""

    code = "client_not_allowed"

    def __init__(self, client_id: str) -> None:
        super().__init__(f"This token may not use ingestion client {client_id!r}.")


class InvalidSchema(BadRequest):
    code = "invalid_schema"
    title = "Invalid schema"

    def __init__(self, problems: Sequence[Mapping[str, str]]) -> None:
        super().__init__(
            "The schema cannot be registered: "
            + "; ".join(f"{p['path'] or '/'}: {p['message']}" for p in problems[:5]),
            errors=[{"location": "body", "field": "/schema" + p["path"], **p} for p in problems],
        )


class SchemaTooLarge(PayloadTooLarge):
    code = "schema_too_large"
    title = "Schema too large"


class SchemaUnusable(Conflict):
    """A stored schema version this service cannot compile (one registered before
    references were confined to the schema): the operator must add a new version."""

    code = "schema_unusable"
    title = "Dataset schema unusable"

    def __init__(self, version: int, reason: str) -> None:
        super().__init__(
            f"Schema version {version} of this dataset cannot be used ({reason}); "
            "ask the operator to register a new version."
        )


class IncompatibleSchema(Conflict):
    code = "incompatible_schema"
    title = "Incompatible schema"


class InvalidEnvelope(BadRequest):
    code = "invalid_envelope"
    title = "Invalid push envelope"

    def __init__(self, items: Sequence[tuple[str, str]]) -> None:
        super().__init__(
            "The push body is invalid: " + "; ".join(f"{f or '/'}: {m}" for f, m in items),
            errors=[{"location": "body", "field": f, "message": m} for f, m in items],
        )


class BatchTooLarge(PayloadTooLarge):
    code = "batch_too_large"
    title = "Batch too large"


class NotJSON(UnsupportedMediaType):
    code = "unsupported_media_type"

    def __init__(self, given: str) -> None:
        super().__init__(f"Send the push as application/json, not {given or 'no content type'}.")


class IdempotencyKeyReused(Conflict):
    code = "idempotency_key_reused"
    title = "Idempotency key reused"


class InvalidIdempotencyKey(BadRequest):
    code = "invalid_idempotency_key"


class RecordsInvalid(DomainError):
    """422: records failing their dataset's schema. The rejected transaction is kept."""

    status: ClassVar[int] = 422
    code = "validation_failed"
    title = "Records failed validation"

    def __init__(
        self, *, transaction_id: uuid.UUID, error_count: int, errors: Sequence[Mapping[str, Any]]
    ) -> None:
        super().__init__(
            f"{error_count} validation {'error' if error_count == 1 else 'errors'}; "
            "nothing was stored.",
            errors=errors,
            extra={"transaction_id": str(transaction_id), "error_count": error_count},
        )


class InvalidTransforms(BadRequest):
    code = "invalid_transforms"
    title = "Invalid transform steps"

    def __init__(self, problems: Sequence[Mapping[str, Any]]) -> None:
        super().__init__(
            f"The steps cannot be used: {len(problems)} "
            f"{'problem' if len(problems) == 1 else 'problems'}: "
            + "; ".join(f"{p['field']}: {p['message']}" for p in problems[:5]),
            errors=[{"location": "body", **p} for p in problems],
        )


class TransformVersionNotFound(NotFound):
    code = "transform_version_not_found"
