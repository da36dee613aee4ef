"""A webhook receiver on loopback: a real HTTP server in a thread that records each
request and answers as the test says (per path: a status, a delay, a redirect)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.loopback import serving


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass
class Behaviour:
    status: int = 200
    delay: float = 0.0
    location: str | None = None
    # fail the first n requests (status 500), then answer `status`
    fail_first: int = 0


@dataclass
class Receiver:
    url: str
    received: list[Received] = field(default_factory=list)
    behaviours: dict[str, Behaviour] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def at(self, path: str, **behaviour: Any) -> str:
        """The URL of `path`, which answers as `behaviour` says."""
        self.behaviours[path] = Behaviour(**behaviour)
        return self.url + path

    def requests(self, path: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.path == path]

    def wait_for(self, path: str, count: int = 1, timeout: float = 30.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.requests(path)
            if len(found) >= count:
                return found
            time.sleep(0.05)
        raise AssertionError(f"{path}: {len(self.requests(path))} requests, wanted {count}")


@contextmanager
def running_receiver() -> Iterator[Receiver]:
    receiver: Receiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length)
            behaviour = receiver.behaviours.get(self.path, Behaviour())
            with receiver.lock:
                receiver.received.append(
                    Received(
                        self.path,
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                        time.monotonic(),
                    )
                )
                seen = sum(1 for r in receiver.received if r.path == self.path)
            if behaviour.delay:
                time.sleep(behaviour.delay)
            status = 500 if seen <= behaviour.fail_first else behaviour.status
            self.send_response(status)
            if behaviour.location:
                self.send_header("Location", behaviour.location)
            body = b"" if status in (204, 304) else b"ok"  # no body may follow a 204
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with suppress(OSError):
                self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as server:
        receiver = Receiver(url=f"http://127.0.0.1:{server.server_address[1]}")
        yield receiver
