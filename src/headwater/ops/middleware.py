"""Pure ASGI middleware (no per-request task or body buffering, unlike BaseHTTPMiddleware)."""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from headwater.errors import BadRequest, PayloadTooLarge
from headwater.kit.context import request_id_var
from headwater.ops.logs import ACCESS
from headwater.ops.metrics import LATENCY, REQUESTS
from headwater.web.problems import error_response

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


class ObservabilityMiddleware:
    """Request id (accepted from `X-Request-ID` or made), access log line, metrics."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = _header(scope, b"x-request-id")
        request_id = given if given and _REQUEST_ID.match(given) else uuid.uuid4().hex
        token = request_id_var.set(request_id)
        status = 500
        start = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
                decision = (scope.get("state") or {}).get("rate_limit")
                if decision is not None:
                    headers += decision.raw_headers()
                message["headers"] = headers
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - start
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = scope["method"]
            REQUESTS.labels(method, template, str(status)).inc()
            LATENCY.labels(method, template).observe(elapsed)
            state: Any = scope.get("state") or {}
            ACCESS.write(
                method=method,
                path=scope["path"],
                route=template,
                status=status,
                ms=round(elapsed * 1000, 3),
                subject=state.get("subject"),
            )
            request_id_var.reset(token)


class _BodyTooLarge(Exception):
    pass


class BodyLimitMiddleware:
    """Refuses bodies over `max_bytes` with 413 while they are read, never buffering them.

    A declared `Content-Length` over the limit is refused before any byte is read; a body
    without one (chunked) is counted as it arrives and refused when it passes the limit.
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int, exempt: tuple[str, ...] = ()) -> None:
        self.app = app
        self.max_bytes = max_bytes
        # paths whose route streams its body under its own limit (file uploads)
        self.exempt = exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(self.exempt):
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
        declared = _header(scope, b"content-length")
        if declared is not None:
            if not declared.isdigit():
                await error_response(BadRequest("Content-Length is not a number."))(
                    scope, receive, send
                )
                return
            if int(declared) > limit:
                await self._too_large(scope, receive, send, limit)
                return
        received = 0
        exceeded = False
        started = False

        async def counting_receive() -> Message:
            nonlocal received, exceeded
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    exceeded = True
                    raise _BodyTooLarge
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if exceeded:
                return  # whatever the app answers to the cut-off body is replaced below
            started = started or message["type"] == "http.response.start"
            await send(message)

        with contextlib.suppress(_BodyTooLarge):
            await self.app(scope, counting_receive, guarded_send)
        if exceeded and not started:
            await self._too_large(scope, receive, send, limit)

    @staticmethod
    async def _too_large(scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        response = error_response(
            PayloadTooLarge(f"The request body is larger than the limit of {limit} bytes.")
        )
        response.headers["Connection"] = "close"
        await response(scope, receive, send)
