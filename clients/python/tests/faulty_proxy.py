"""A TCP proxy in front of a real server that injects network faults on request.

Each fault applies to the next `times` requests whose first bytes start with a given
prefix (`b"POST /platform/v1/data/json"`):

- `drop_answer`: the request reaches the server, which handles it; its answer is cut
  off and both connections are closed, as when a network path dies after the commit;
- `answer_503`: the proxy answers 503 with `Retry-After` itself; the server never sees it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass


@dataclass
class Fault:
    kind: str
    prefix: bytes
    times: int


class FaultyProxy:
    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.upstream: tuple[str, int] | None = None
        self.faults: list[Fault] = []
        self.injected: list[str] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def inject(self, kind: str, prefix: bytes, times: int = 1) -> None:
        assert kind in ("drop_answer", "answer_503")
        with self._lock:
            self.faults.append(Fault(kind, prefix, times))

    def close(self) -> None:
        # shut down first: a thread blocked in accept() on a socket only closed goes on
        # accepting, and would then proxy a late connection to a server stopped since
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()

    def _take(self, chunk: bytes) -> str | None:
        with self._lock:
            for fault in self.faults:
                if fault.times > 0 and chunk.startswith(fault.prefix):
                    fault.times -= 1
                    self.injected.append(fault.kind)
                    return fault.kind
        return None

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(downstream,), daemon=True).start()

    def _serve(self, downstream: socket.socket) -> None:
        assert self.upstream is not None
        try:
            upstream = socket.create_connection(self.upstream)
        except OSError:  # the server is gone: the client sees its connection closed
            downstream.close()
            return
        cut = threading.Event()  # the answer to the current request is to be dropped

        def close_both() -> None:
            for sock in (downstream, upstream):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

        def to_server() -> None:
            try:
                while chunk := downstream.recv(65536):
                    fault = self._take(chunk)
                    if fault == "answer_503":
                        downstream.sendall(
                            b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n"
                            b"Content-Length: 0\r\nConnection: close\r\n\r\n"
                        )
                        close_both()
                        return
                    if fault == "drop_answer":
                        cut.set()
                    upstream.sendall(chunk)
            except OSError:
                pass
            close_both()

        def to_client() -> None:
            try:
                while chunk := upstream.recv(65536):
                    if cut.is_set():
                        close_both()
                        return
                    downstream.sendall(chunk)
            except OSError:
                pass
            close_both()

        threading.Thread(target=to_server, daemon=True).start()
        to_client()
