"""Structured JSON logs for structlog and stdlib loggers alike, with the request id."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import orjson
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


class AccessLog:
    """One line a request, written straight to the log's file descriptor.

    Through structlog and `logging` a line cost as much as the rest of a small request's
    work (issue 24): processors, a LogRecord, a formatter, a lock and a flush. Here it is
    one dict, one `orjson.dumps` and one `write`, the same JSON keys as every other line.
    Lines go out whole and at once (a crash loses none, processes sharing a file in
    append mode never interleave them). With console logs, or no descriptor to write to,
    lines take the structlog path.
    """

    def __init__(self) -> None:
        self.enabled = True
        self.fd: int | None = None
        self.fallback = structlog.get_logger("headwater.access")

    def configure(self, *, enabled: bool, json: bool, stream: Any) -> None:
        self.enabled = enabled
        self.fd = _descriptor(stream) if json else None

    def write(
        self, *, method: str, path: str, route: str, status: int, ms: float, subject: Any
    ) -> None:
        if not self.enabled:
            return
        if self.fd is None:
            self.fallback.info(
                "request",
                method=method,
                path=path,
                route=route,
                status=status,
                duration_ms=ms,
                subject=subject,
            )
            return
        line = {
            "method": method,
            "path": path,
            "route": route,
            "status": status,
            "duration_ms": ms,
            "subject": subject,
            "event": "request",
            "level": "info",
            "logger": "headwater.access",
            "timestamp": datetime.now(UTC),
        }
        request_id = request_id_var.get()
        if request_id:
            line["request_id"] = request_id
        with contextlib.suppress(OSError):  # a closed log never fails the request
            os.write(self.fd, orjson.dumps(line, option=_LINE))


_LINE = orjson.OPT_APPEND_NEWLINE | orjson.OPT_UTC_Z


def _descriptor(stream: Any) -> int | None:
    try:
        stream.flush()
        return int(stream.fileno())
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return None


ACCESS = AccessLog()


def configure_logging(*, level: str = "INFO", json: bool = True, stream: Any = None) -> None:
    """Every line as JSON (or for a console) on `stream`, standard output unless given."""
    stream = stream or sys.stdout
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
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    ACCESS.configure(enabled=root.isEnabledFor(logging.INFO), json=json, stream=stream)
    for name in ("uvicorn", "uvicorn.error", "alembic"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    logging.getLogger("uvicorn.access").disabled = True
    # which of its plugins Alembic set up: a dozen lines at every start, telling nothing
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
