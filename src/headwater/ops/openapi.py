"""The OpenAPI document: FastAPI's, plus problem+json errors with examples on every operation."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from headwater.errors import PROBLEM_BASE
from headwater.web.problems import PROBLEM_JSON

DESCRIPTION = """
Headwater is a multi-tenant data platform: push records as JSON (validated against
the dataset's JSON Schema, draft-06), read them back with their transaction records,
configure workflows, and search an append-only activity log.

**Authentication.** `POST /oauth/token` with `client_id`, `client_secret` and
`audience` (JSON, form or HTTP Basic) answers a JWT (RS256, `kid` in the header, keys at
`/.well-known/jwks.json`). Send it as `Authorization: Bearer <token>`. Claims: `iss`,
`sub` (the credential's client id), `aud`, `iat`, `nbf`, `exp`, `jti`, `scope`
(space-separated), `gty` (`client_credentials`), and Headwater's own: `company_id`
(uuid, null for operators), `client_ids` (ingestion clients the token may use; empty
means all of its company's) and `author_id` (uuid written on every change it makes).
`exp`, `iat` and `nbf` must be JSON numbers and the token base64url without padding.
Revoking a credential or its company makes its tokens answer 401 within 10 s on every
instance. Failed token requests are limited per address (10 a minute, then 429 for a
minute), and the endpoint answers 429 `temporarily_unavailable` rather than queue
without bound.

**On this page.** "Authorize" offers both ways: the OAuth flow (a credential's
`client_id` and `client_secret`; the flow's token URL carries this API's `audience` in
its query, which the token endpoint reads when the body names none), or `bearer`, where a
token got elsewhere is pasted. Then "Try it out" sends it with each call.

**Errors.** Every error outside `/oauth/token` is RFC 9457 `application/problem+json`
with `type`, `title`, `status`, `detail`, `code`, `request_id` and, where input was
wrong, `errors` (`[{"location", "field", "message"}]`). The token endpoint answers
RFC 6749 errors (`{"error", "error_description"}`).

**Rate limits.** Per credential, a token bucket (default 100 requests/s, bursts of
200). Authenticated answers carry `RateLimit-Limit`, `RateLimit-Remaining` and
`RateLimit-Reset`; a 429 adds `Retry-After`.

**Data.** Operators register datasets (a draft-06 JSON Schema and options) under
`/admin/v1/clients/{client_id}/datasets`. `POST /platform/v1/data/json` normalises
each record (trimming, optional lossless type coercion, date-times to UTC milliseconds,
field mapping, defaults), validates it against the dataset's current schema version and
stores the whole batch or nothing; 422 lists up to 100 errors with record index, JSON
Pointer, keyword and message; a string holding U+0000 fails with keyword `characters`.
`Idempotency-Key` makes a push safe to retry for 24 h.

**Hostile input.** Every JSON body of every operation is read as strict JSON (no
duplicate members, NaN/Infinity, numbers outside 64-bit/double range, invalid UTF-8 or
nesting deeper than 32: 400) and only as `application/json` (415). Unknown query
parameters and U+0000 in any text outside records answer 400. Header blocks over
64 KiB answer 431. A dataset schema's `$ref` may only point inside it; the service
never fetches anything to resolve one. No request answers 5xx because of its content.

**What may lag.** An installation may send reads that may lag to a database replica
(`HEADWATER_DATABASE_READ_URL`): the lists `GET /platform/v1/data`,
`GET /platform/v1/transactions`, `GET /platform/v1/exports` and
`GET /platform/v1/erasures`, and `POST /app/v1/activities/search`, may then miss what
was committed in the last moments (usually milliseconds). A read by id and the two
feeds (`GET /platform/v1/data/changes`, `GET /platform/v1/events`) always see every
commit before them: read a transaction you just made by its id. The feeds read the
replica too, but a page at the end of the feed waits (up to 1 s) for the replica to
show everything committed, and reads the database if it does not (and, for 5 s, at
once). No GET request writes but `GET /platform/v1/data/file_upload_url`, which makes
the upload's transaction.

**Pages.** Lists answer `{page_number, page_size, total_entries, total_pages, data}`,
pages numbered from 0, `page_size` 1-100 (default 20).

**Request ids.** Send `X-Request-ID` (1-128 of `A-Za-z0-9._:-`) or get one made; it
is echoed in the response header, error bodies and logs.
"""

_ERRORS: dict[str, tuple[str, str, str]] = {
    "400": (
        "invalid_parameter",
        "Invalid parameter",
        "Invalid parameter: page_size (query): Input should be less than or equal to 100",
    ),
    "401": ("invalid_token", "Invalid token", "The token has expired."),
    "403": (
        "insufficient_scope",
        "Insufficient scope",
        "The token lacks the scope this call needs: admin.",
    ),
    "404": ("not_found", "Not found", "No company has the id 6f1c...."),
    "409": ("conflict", "Conflict", "The ingestion client id 'acme-crm' is taken."),
    "410": (
        "cursor_expired",
        "Cursor expired",
        "Events after this cursor were removed (kept HEADWATER_EVENT_RETENTION_DAYS days); "
        "start again without `after`.",
    ),
    "413": (
        "payload_too_large",
        "Payload too large",
        "The request body is larger than the limit of 5242880 bytes.",
    ),
    "415": (
        "unsupported_media_type",
        "Unsupported media type",
        "Send this body as application/json; got text/plain.",
    ),
    "422": (
        "validation_failed",
        "Records failed validation",
        "2 validation errors; nothing was stored.",
    ),
    "429": ("rate_limited", "Too many requests", "Rate limit exceeded; retry in 1 s."),
    "503": (
        "database_unavailable",
        "Service unavailable",
        "The database cannot be reached; retry later.",
    ),
}

_PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "RFC 9457 problem details.",
    "required": ["type", "title", "status", "detail", "code"],
    "properties": {
        "type": {"type": "string", "format": "uri"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "code": {"type": "string", "description": "Machine-readable error code."},
        "request_id": {"type": "string"},
        "transaction_id": {
            "type": "string",
            "format": "uuid",
            "description": "422: the rejected transaction, kept for lookup.",
        },
        "error_count": {
            "type": "integer",
            "description": "422: every error found; `errors` lists the first 100.",
        },
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "enum": ["body", "query", "path", "header"]},
                    "field": {
                        "type": "string",
                        "description": "Parameter name, or JSON Pointer in the body.",
                    },
                    "message": {"type": "string"},
                    "record": {
                        "type": "integer",
                        "description": "422: index of the failing record in `data`.",
                    },
                    "path": {
                        "type": "string",
                        "description": "422: JSON Pointer into the record.",
                    },
                    "keyword": {
                        "type": "string",
                        "description": "422: the schema keyword that failed.",
                    },
                },
            },
        },
    },
}


# Members some problems add to the common ones.
_EXTRA_EXAMPLE: dict[str, dict[str, Any]] = {
    "422": {
        "transaction_id": "0b7e5f9e-3c1d-4a57-9a43-1c1e9a3c2f10",
        "error_count": 2,
        "errors": [
            {
                "record": 0,
                "path": "/amount",
                "keyword": "type",
                "message": '"12,50" is not of type "number"',
            },
            {
                "record": 3,
                "path": "/order_id",
                "keyword": "required",
                "message": '"order_id" is a required property',
            },
        ],
    }
}


_DESCRIPTIONS = {
    "400": "A malformed, unknown or ill-typed parameter; a body that is not strict JSON, "
    "nested deeper than 32 levels or invalid; or U+0000 in any text.",
    "415": "The body is not `application/json`.",
}


def _problem(status: str) -> dict[str, Any]:
    code, title, detail = _ERRORS[status]
    return {
        "description": _DESCRIPTIONS.get(status, title),
        "content": {
            PROBLEM_JSON: {
                "schema": {"$ref": "#/components/schemas/Problem"},
                "example": {
                    "type": PROBLEM_BASE + code,
                    "title": title,
                    "status": int(status),
                    "detail": detail,
                    "code": code,
                    "request_id": "6c1f0e0c2b4d4e0e9a8d0f5d7f3e2a11",
                    **_EXTRA_EXAMPLE.get(status, {}),
                },
            }
        },
    }


def _is_fastapi_validation(response: dict[str, Any] | None) -> bool:
    """FastAPI's own 422 (request validation): Headwater answers those as 400."""
    if response is None:
        return False
    schema = response.get("content", {}).get("application/json", {}).get("schema", {})
    return str(schema.get("$ref", "")).endswith("/HTTPValidationError")


# No text the service takes may hold U+0000 (contract section 15): said in the schema of
# every string and every map's member names, so that clients and fuzzers know it.
NO_NUL = "^[^\\u0000]*$"


def _forbid_nul(node: Any) -> None:
    if isinstance(node, list):
        for item in node:
            _forbid_nul(item)
        return
    if not isinstance(node, dict):
        return
    if node.get("type") == "string" and not {"pattern", "format", "enum", "const"} & set(node):
        node["pattern"] = NO_NUL
    if node.get("type") == "object" and node.get("additionalProperties", False) is not False:
        node.setdefault("propertyNames", {"pattern": NO_NUL})
    for key, value in node.items():
        if key not in ("example", "examples", "default", "enum", "const"):
            _forbid_nul(value)


# Examples of the text members whose models give none, by member name: without one the
# docs page makes a value up from the no-NUL pattern (`["$>GbXV_|y@_p%..."]`).
_EXAMPLES: dict[str, Any] = {
    "allowed_senders": ["@example.com", "orders@supplier.example"],
    "client_id": "acme-crm",
    "client_ids": ["acme-crm"],
    "code": "validation_failed",
    "content_type": "text/csv",
    "dataset_id": "orders",
    "description": "Checks a new supplier's documents before the first order",
    "detail": "1 of 2 records failed validation; nothing was stored.",
    "download_url": "https://headwater.example/downloads/e/7f3e.parquet?expires=1767225600&signature=9c",
    "error": "HTTP 503 from the receiver",
    "event_types": ["transaction.completed", "transaction.rejected"],
    "field": "data[1].amount",
    "field_map": {"Order No": "order_id", "Total": "amount"},
    "file_name": "orders-2026-11-27.csv",
    "headers": {"content-type": "text/csv"},
    "key_fingerprints": ["SHA256:nThbg6kXUpJWGl7E1IGOCspRomTxdCARLviKw6E5SY8"],
    "keyword": "type",
    "message": "'12.5x' is not of type 'number'",
    "name": "Supplier onboarding",
    "password": "hw-sftp-6Jq2vT9rWx4LmN8b",
    "path": "/1/amount",
    "public_keys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIH0cY0rJqf5ZPjv5x6f3Q2kYt1u9 ann@laptop"],
    "raw": "A-7;12,5;paid",
    "request_id": "6c1f0e0c2b4d4e0e9a8d0f5d7f3e2a11",
    "scopes": ["data:write", "data:read"],
    "step_id": "check-documents",
    "title": "Validation failed",
    "type": "review",
    "url": "https://hooks.example.com/headwater",
}


def _with_nul_pattern(node: Any) -> bool:
    """Whether a member's schema holds text under the no-NUL pattern, at any depth."""
    if isinstance(node, list):
        return any(_with_nul_pattern(item) for item in node)
    if not isinstance(node, dict):
        return False
    if node.get("pattern") == NO_NUL:
        return True
    return any(
        _with_nul_pattern(node.get(key)) for key in ("items", "anyOf", "additionalProperties")
    )


def _holders(schema: dict[str, Any], where: str) -> list[tuple[dict[str, Any], str]]:
    """The schema and the object schemas nested in its members' arrays."""
    found = [(schema, where)]
    for member, value in schema.get("properties", {}).items():
        items = value.get("items")
        if isinstance(items, dict) and "properties" in items:
            found += _holders(items, f"{where}.{member}[]")
    return found


def _give_examples(schemas: dict[str, Any]) -> None:
    for model, schema in schemas.items():
        for holder, _ in _holders(schema, model):
            for member, value in holder.get("properties", {}).items():
                bare = not {"example", "examples"} & set(value)
                if member in _EXAMPLES and bare and _with_nul_pattern(value):
                    value["examples"] = [_EXAMPLES[member]]


def build_openapi(app: FastAPI, *, audience: str) -> dict[str, Any]:
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(
        title="Headwater API", version=app.version, description=DESCRIPTION, routes=app.routes
    )
    schemes = schema.get("components", {}).get("securitySchemes", {})
    if "oauth2" in schemes:
        # RFC 6749 3.2: a token endpoint's URL may carry a query; the service reads
        # `audience` from it when the body has none (the docs page's Authorize sends none)
        flow = schemes["oauth2"]["flows"]["clientCredentials"]
        flow["tokenUrl"] += "?" + urlencode({"audience": audience})
    schema.setdefault("components", {}).setdefault("schemas", {})["Problem"] = _PROBLEM_SCHEMA
    for name in ("HTTPValidationError", "ValidationError"):
        schema["components"]["schemas"].pop(name, None)
    for path, operations in schema["paths"].items():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            had_validation = _is_fastapi_validation(responses.get("422"))
            if had_validation:
                del responses["422"]
            wanted = ["503"]
            if path == "/oauth/token":
                continue
            # every operation refuses unknown query parameters and NUL in its path or query
            wanted.append("400")
            if operation.get("requestBody"):
                wanted += ["413", "415"]
            if operation.get("security"):
                wanted += ["401", "403", "429"]
            if "{" in path:
                wanted.append("404")
            for status in wanted:
                problem = _problem(status)
                existing = responses.get(status)
                if existing:
                    problem["description"] = existing.get("description", problem["description"])
                responses[status] = problem
            for status in set(responses) & set(_ERRORS) - set(wanted):
                responses[status] = _problem(status) | {
                    "description": responses[status]["description"]
                }
    _forbid_nul(schema["components"]["schemas"])
    _forbid_nul(schema["paths"])
    _give_examples(schema["components"]["schemas"])
    app.openapi_schema = schema
    return schema
