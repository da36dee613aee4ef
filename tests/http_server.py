"""A real `headwater serve` process on a free loopback port, for behaviour about HTTP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(base: str, process: subprocess.Popen[bytes], log: Path) -> None:
    """Wait (up to 60 s) until the server at `base` answers /healthz; raise with its log
    if it exits or never answers."""
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise RuntimeError("server exited:\n" + log.read_text())
        try:
            if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("server did not start:\n" + log.read_text())
        time.sleep(0.1)


@contextmanager
def running_server(env: dict[str, str], *args: str) -> Iterator[str]:
    """Start `headwater serve`, wait for /healthz, yield its base URL, stop it.

    Its output goes to `server.log` in HEADWATER_DATA_DIR.
    """
    port = free_port()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}
    full_env.update(env)
    log = Path(env["HEADWATER_DATA_DIR"]) / "server.log"
    Path(env["HEADWATER_DATA_DIR"]).mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "headwater.cli", "serve", "--port", str(port), *args],
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(base, process, log)
            yield base
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
