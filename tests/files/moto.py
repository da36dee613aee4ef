"""A real S3 protocol server (moto in server mode) on a free loopback port."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.http_server import free_port, status_of

ACCESS_KEY, SECRET_KEY, REGION = "testing", "testing", "us-east-1"


@contextmanager
def moto_server(log_dir: Path) -> Iterator[str]:
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    with (log_dir / "moto.log").open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                if process.poll() is not None:
                    raise RuntimeError("moto exited: " + (log_dir / "moto.log").read_text())
                if status_of(url + "/moto-api/", timeout=1) is not None:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("moto did not answer: " + (log_dir / "moto.log").read_text())
                time.sleep(0.1)
            yield url
        finally:
            process.terminate()
            process.wait(timeout=10)
