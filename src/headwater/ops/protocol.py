"""uvicorn's httptools HTTP/1.1 protocol with the two guards it lacks (contract section 15).

- A request whose header block (request line and headers) passes `MAX_HEADER_BYTES` is
  answered 431 and its connection closed, counted as the bytes arrive: a 64 MiB header
  is refused after its first 64 KiB, not held in memory and parsed.
- A connection that has not sent a complete header block within
  `HEADWATER_HTTP_HEADER_TIMEOUT_SECONDS` of connecting, or of its previous response's
  end, is closed (slowloris: one header line at a time keeps no connection open).

`headwater serve` names this class as uvicorn's `http` protocol.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from headwater.config import get_settings

MAX_HEADER_BYTES = 64 * 1024


def _refusal() -> bytes:
    body = orjson.dumps(
        {
            "type": "https://headwater.dev/problems/request_header_fields_too_large",
            "title": "Request header fields too large",
            "status": 431,
            "detail": f"The request's header block is over {MAX_HEADER_BYTES} bytes.",
            "code": "request_header_fields_too_large",
        }
    )
    return (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
        b"content-type: application/problem+json\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n"
        b"connection: close\r\n\r\n" + body
    )


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol, refusing oversized header blocks and closing slow ones."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timeout = get_settings().http_header_timeout_seconds
        self._header_timer: asyncio.TimerHandle | None = None
        self._awaiting_headers = True
        self._header_bytes = 0
        self._refused = False

    # the timer: armed while a header block is awaited

    def _arm(self) -> None:
        self._disarm()
        self._awaiting_headers = True
        self._header_bytes = 0
        self._header_timer = self.loop.call_later(self._header_timeout, self._too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _too_slow(self) -> None:
        self._header_timer = None
        if self._awaiting_headers and not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_headers_complete(self) -> None:
        self._awaiting_headers = False
        self._disarm()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        # The next request's header block is awaited once this response has been sent,
        # not once the request was read: a long poll (`wait=30`) answers after the
        # header timeout, and that is not a slow client. A pipelined request already
        # read starts now instead, its headers complete.
        pipelined = bool(self.pipeline)
        super().on_response_complete()
        if not pipelined and not self.transport.is_closing():
            self._arm()

    # the size: counted as bytes arrive, up to the end of the header block

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._awaiting_headers:
            end = data.find(b"\r\n\r\n")
            self._header_bytes += len(data) if end < 0 else end + 4
            if self._header_bytes > MAX_HEADER_BYTES:
                self._refused = True
                self._disarm()
                self.transport.write(_refusal())
                self.transport.close()
                return
        super().data_received(data)

    def send_400_response(self, msg: str) -> None:
        if not self._refused:
            super().send_400_response(msg)
