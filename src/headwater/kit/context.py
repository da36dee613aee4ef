"""Per-request context readable anywhere (logs, error bodies) without passing it down."""

from __future__ import annotations

from contextvars import ContextVar

request_id_var: ContextVar[str | None] = ContextVar("request_id", default=None)
