"""Structured JSON logs for structlog and stdlib loggers alike, with the request id."""

from __future__ import annotations

import logging
import sys
from functools import lru_cache
from typing import Any

import structlog

from headwater.kit.context import request_id_var

_REDACT = ("secret", "password", "token", "authorization", "passphrase")


def _add_request_id(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
    request_id = request_id_var.get()
    if request_id and "request_id" not in event:
        event["request_id"] = request_id
    return event


@lru_cache(maxsize=1024)
def _is_secret_name(key: str) -> bool:
    lowered = key.lower()
    return any(word in lowered for word in _REDACT)


def _redact(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
    """Last line of defence: no field named like a secret leaves the process."""
    for key in [k for k in event if _is_secret_name(k)]:
        event[key] = "[redacted]"
    return event


def configure_logging(*, level: str = "INFO", json: bool = True) -> None:
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _add_request_id,
        _redact,
    ]
    renderer: Any = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "alembic"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    logging.getLogger("uvicorn.access").disabled = True
    # which of its plugins Alembic set up: a dozen lines at every start, telling nothing
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
