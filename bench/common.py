"""Shared by the benchmarks: a production-style server on PostgreSQL, and wrk."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.http_server import running_server  # noqa: E402

PG_ADMIN_URL = os.environ.get("HEADWATER_BENCH_PG", "postgresql://127.0.0.1:5432/test")


def ensure_wrk() -> str:
    """wrk, from Debian's packages; installed here when missing and we are root."""
    found = shutil.which("wrk")
    if found:
        return found
    if os.geteuid() == 0:
        subprocess.run(["apt-get", "install", "-y", "-q", "wrk"], check=False, capture_output=True)
        if not shutil.which("wrk"):
            subprocess.run(["apt-get", "update", "-q"], check=True, capture_output=True)
            subprocess.run(
                ["apt-get", "install", "-y", "-q", "wrk"], check=True, capture_output=True
            )
        return str(shutil.which("wrk"))
    raise SystemExit("wrk is needed: apt-get install wrk")


@contextmanager
def bench_database(name: str) -> Iterator[str]:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def production_server(env: dict[str, str], workers: int) -> Iterator[str]:
    with tempfile.TemporaryDirectory() as data:
        full = {"HEADWATER_DATA_DIR": data, **env}
        with running_server(full, "--workers", str(workers), "--host", "127.0.0.1") as url:
            yield url


@dataclass(frozen=True)
class WrkResult:
    requests_per_second: float
    latency_p50_ms: float
    latency_p99_ms: float
    requests: int
    non_2xx: int


def _ms(text: str) -> float:
    value, unit = re.match(r"([\d.]+)(\w+)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def run_wrk(
    url: str,
    *,
    seconds: int,
    connections: int = 32,
    threads: int = 2,
    script: str | None = None,
    headers: dict[str, str] | None = None,
) -> WrkResult:
    args = [ensure_wrk(), f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency"]
    for name, value in (headers or {}).items():
        args += ["-H", f"{name}: {value}"]
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as lua:
        lua.write(script or "")
    if script:
        args += ["-s", lua.name]
    done = subprocess.run([*args, url], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"wrk failed: {done.stderr or done.stdout}")
    out = done.stdout
    os.unlink(lua.name)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    p50 = _ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    return WrkResult(rps, p50, p99, total, int(bad.group(1)) if bad else 0)
