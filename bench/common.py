"""Shared by the benchmarks: a production-style server on PostgreSQL, and wrk."""

from __future__ import annotations

import collections
import functools
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import httpx
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.http_server import ServerProcess as ServerProcess  # noqa: E402
from tests.http_server import process_env as process_env  # noqa: E402
from tests.http_server import running_server  # noqa: E402

PG_ADMIN_URL = os.environ.get("HEADWATER_BENCH_PG", "postgresql://127.0.0.1:5432/test")


OPERATOR, SECRET = "bench-operator", "bench-operator-secret-0123456789"


def server_env(database_url: str, **extra: str) -> dict[str, str]:
    """Settings for a benchmarked server: PostgreSQL, a bootstrap operator, and a rate
    limit out of the way (the benchmarks measure throughput, not the limiter)."""
    return {
        "HEADWATER_DATABASE_URL": database_url,
        "HEADWATER_BOOTSTRAP_CLIENT_ID": OPERATOR,
        "HEADWATER_BOOTSTRAP_CLIENT_SECRET": SECRET,
        "HEADWATER_RATE_LIMIT_PER_SECOND": "1000000000",
        "HEADWATER_RATE_LIMIT_BURST": "1000000000",
        **extra,
    }


def ensure_tool(command: str, package: str) -> str:
    """`command` (a name, or a path for one outside PATH), from Debian's `package`;
    installed here when missing and we are root."""
    found = shutil.which(command)
    if found:
        return found
    if os.geteuid() == 0:
        install = ["apt-get", "install", "-y", "-q", package]
        subprocess.run(install, check=False, capture_output=True)
        if not shutil.which(command):
            subprocess.run(["apt-get", "update", "-q"], check=True, capture_output=True)
            subprocess.run(install, check=True, capture_output=True)
        return str(shutil.which(command))
    raise SystemExit(f"{command} is needed: apt-get install {package}")


def ensure_wrk() -> str:
    """wrk, from Debian's packages."""
    return ensure_tool("wrk", "wrk")


def wait_listening(port: int, alive: Callable[[], bool], seconds: float = 30) -> None:
    """Wait until something listens on loopback `port`, while `alive()` (the process
    that is to listen there) and for up to `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if not alive() or time.monotonic() > deadline:
                raise SystemExit(f"nothing listens on port {port}") from None
            time.sleep(0.05)


class Sampling:
    """A measure taken on a thread of its own while a `with` block runs: `sample` runs
    until `stopped` is set, at the block's end."""

    def __init__(self) -> None:
        self.stopped = threading.Event()
        self._thread = threading.Thread(target=self.sample, daemon=True)

    def sample(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stopped.set()
        self._thread.join()


class ConnectionPeak(Sampling):
    """The most PostgreSQL connections the service's processes held to one database at
    once, sampled from `pg_stat_activity` every 20 ms: in all, in one process, and by
    part of a process's budget (`application_name` says which: "headwater <role> <part>
    <pid>", see `headwater.db.application_name`)."""

    def __init__(self, database: str) -> None:
        super().__init__()
        self.database = database
        self.total = 0
        self.process = 0
        self.parts: dict[str, int] = {}

    def sample(self) -> None:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            while not self.stopped.wait(0.02):
                names = [
                    name
                    for (name,) in admin.execute(
                        "SELECT application_name FROM pg_stat_activity "
                        "WHERE datname = %s AND application_name LIKE 'headwater %%'",
                        (self.database,),
                    )
                ]
                self.total = max(self.total, len(names))
                by_pid = collections.Counter(name.rsplit(" ", 1)[1] for name in names)
                self.process = max([self.process, *by_pid.values()])
                by_part = collections.Counter(
                    (name.rsplit(" ", 1)[1], name.split(" ", 1)[1].rsplit(" ", 1)[0])
                    for name in names
                )
                for (_pid, part), count in by_part.items():
                    self.parts[part] = max(self.parts.get(part, 0), count)

    def report(self) -> str:
        parts = ", ".join(f"{part} {count}" for part, count in sorted(self.parts.items()))
        return (
            f"PostgreSQL connections at peak (pg_stat_activity): {self.total} in all, "
            f"{self.process} in one process (budget: 20 an API process, 10 any other); "
            f"by part, in one process: {parts or 'none'}"
        )


@contextmanager
def fresh_database(name: str) -> Iterator[str]:
    """A fresh database `name` (its URL), dropped at the end."""
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def bench_database(name: str) -> Iterator[str]:
    """A fresh database `name`; at the end, the service's peak connections to it."""
    with fresh_database(name) as url, ConnectionPeak(name) as peak:
        yield url
    print(peak.report())


@contextmanager
def production_server(
    env: dict[str, str], workers: int, *, data_dir: str | None = None
) -> Iterator[str]:
    """`headwater serve` as in production; its data directory is `data_dir` if given
    (another process shares its store), else a temporary one."""
    with tempfile.TemporaryDirectory() as temporary:
        data = data_dir or temporary
        # The server's log is kept in the data directory while it runs; on failure, it is
        # printed before the directory goes.
        full = {"HEADWATER_DATA_DIR": data, **env}
        try:
            with running_server(full, "--workers", str(workers), "--host", "127.0.0.1") as url:
                yield url
        except BaseException:
            log = Path(data) / "server.log"
            if log.exists():
                print("--- server log (last 40 lines) ---")
                print("\n".join(log.read_text().splitlines()[-40:]))
            raise


@dataclass(frozen=True)
class WrkResult:
    requests_per_second: float
    latency_p50_ms: float
    latency_p95_ms: float
    latency_p99_ms: float
    requests: int
    non_2xx: int


# wrk prints only some percentiles itself; this prints the ones the benchmarks report.
_DONE = """
done = function(summary, latency, requests)
  for _, p in ipairs({50, 95, 99}) do
    io.write(string.format("P%d %d\\n", p, latency:percentile(p)))
  end
end
"""


def request_script(
    *, method: str = "GET", body: str | None = None, headers: dict[str, str] | None = None
) -> str:
    """A wrk Lua script sending one fixed request."""
    lines = [f'wrk.method = "{method}"']
    for name, value in (headers or {}).items():
        lines.append(f"wrk.headers[{json.dumps(name)}] = {json.dumps(value)}")
    if body is not None:
        lines.append(f"wrk.body = {json.dumps(body)}")
    return "\n".join(lines) + "\n"


def run_wrk(
    url: str, *, seconds: int, connections: int = 32, threads: int = 2, script: str = ""
) -> WrkResult:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as lua:
        lua.write(script + _DONE)
    args = [
        ensure_wrk(),
        f"-t{min(threads, connections)}",
        f"-c{connections}",
        f"-d{seconds}s",
        "-s",
        lua.name,
        url,
    ]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    os.unlink(lua.name)
    if done.returncode != 0:
        raise SystemExit(f"wrk failed: {done.stderr or done.stdout}")
    out = done.stdout

    def number(pattern: str) -> float:
        found = re.search(pattern, out, re.M)
        if found is None:
            raise SystemExit(f"unexpected wrk output:\n{out}")
        return float(found.group(1))

    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return WrkResult(
        requests_per_second=number(r"Requests/sec:\s+([\d.]+)"),
        latency_p50_ms=number(r"^P50 (\d+)") / 1000,
        latency_p95_ms=number(r"^P95 (\d+)") / 1000,
        latency_p99_ms=number(r"^P99 (\d+)") / 1000,
        requests=int(number(r"(\d+) requests in")),
        non_2xx=int(bad.group(1)) if bad else 0,
    )


def combine(slices: list[WrkResult]) -> WrkResult:
    """One result from runs of the same load (slices of one phase, measured between
    slices of another): requests and errors summed, the rate over their summed time.

    Percentiles cannot be merged exactly from wrk's summaries. p95 and p99 are the
    highest slice's, an upper bound (if no slice has more than 1% of its requests above
    x, neither has the whole); p50 is the median of the slices' medians.
    """
    requests = sum(s.requests for s in slices)
    seconds = sum(s.requests / s.requests_per_second for s in slices if s.requests_per_second)
    return WrkResult(
        requests_per_second=requests / seconds if seconds else 0.0,
        latency_p50_ms=statistics.median(s.latency_p50_ms for s in slices),
        latency_p95_ms=max(s.latency_p95_ms for s in slices),
        latency_p99_ms=max(s.latency_p99_ms for s in slices),
        requests=requests,
        non_2xx=sum(s.non_2xx for s in slices),
    )


@dataclass(frozen=True)
class CpuSplit:
    """CPU seconds spent by the machine's parts: Headwater's processes (`headwater.cli`
    on their command line), PostgreSQL's, and this process's finished children (wrk)."""

    api: float
    postgres: float
    load: float

    def __sub__(self, other: CpuSplit) -> CpuSplit:
        return CpuSplit(
            self.api - other.api, self.postgres - other.postgres, self.load - other.load
        )

    def __add__(self, other: CpuSplit) -> CpuSplit:
        return CpuSplit(
            self.api + other.api, self.postgres + other.postgres, self.load + other.load
        )

    @property
    def total(self) -> float:
        return self.api + self.postgres + self.load

    def each_us(self, count: int) -> CpuSplit:
        """Each part's CPU for one of `count` (requests, records, rows), in microseconds."""
        scale = 1e6 / max(count, 1)
        return CpuSplit(self.api * scale, self.postgres * scale, self.load * scale)

    def per_request(self, requests: int) -> str:
        """Microseconds of each part's CPU a request."""
        each = self.each_us(requests)
        return (
            f"CPU a request: API {each.api:4.0f} µs, PostgreSQL "
            f"{each.postgres:4.0f} µs, wrk {each.load:3.0f} µs"
        )


_TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(text: str) -> list[str]:
    """The fields of a /proc/PID/stat text after its command name (state, ppid, ...)."""
    return text.rsplit(")", 1)[1].split()


def _stat_cpu(fields: list[str]) -> float:
    """CPU seconds (user + system) from `_stat_fields`."""
    return (int(fields[11]) + int(fields[12])) / _TICKS


def process_cpu(pid: int) -> float:
    """The CPU seconds a running process has used."""
    return _stat_cpu(_stat_fields(Path(f"/proc/{pid}/stat").read_text()))


def cpu_split() -> CpuSplit:
    """The CPU seconds used so far by Headwater, PostgreSQL and this process's children
    (read from /proc; processes that ended since an earlier reading are not counted).
    Headwater's are the `headwater.cli` processes and their children (uvicorn's workers
    are spawned with a command line of their own)."""
    used: dict[int, float] = {}
    parent: dict[int, int] = {}
    kind: dict[int, str] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            command = (stat.parent / "cmdline").read_bytes()
        except OSError:  # the process ended
            continue
        pid = int(stat.parent.name)
        fields = _stat_fields(text)
        used[pid] = _stat_cpu(fields)
        parent[pid] = int(fields[1])
        if text[text.index("(") + 1 : text.rindex(")")] == "postgres":
            kind[pid] = "postgres"
        elif b"headwater.cli" in command:
            kind[pid] = "api"
    totals = {"api": 0.0, "postgres": 0.0}
    for pid, seconds in used.items():
        ancestor = pid
        while ancestor in parent and ancestor not in kind:
            ancestor = parent[ancestor]
        if ancestor in kind:
            totals[kind[ancestor]] += seconds
    children = os.times()
    return CpuSplit(
        totals["api"], totals["postgres"], children.children_user + children.children_system
    )


@contextmanager
def adding_cpu(used: dict[str, CpuSplit], label: str) -> Iterator[None]:
    """The CPU the block used (`cpu_split`, read before and after it), added to
    `used[label]` (nothing there yet: to nothing)."""
    before = cpu_split()
    yield
    used[label] = used.get(label, CpuSplit(0.0, 0.0, 0.0)) + (cpu_split() - before)


def report(label: str, result: WrkResult) -> str:
    return (
        f"{label:44s} {result.requests_per_second:9.1f} req/s   "
        f"p50 {result.latency_p50_ms:7.2f} ms   p95 {result.latency_p95_ms:7.2f} ms   "
        f"p99 {result.latency_p99_ms:7.2f} ms   non-2xx {result.non_2xx}"
    )


AUDIENCE = "headwater-api"


@functools.cache
def kept_client() -> httpx.Client:
    """One client for a benchmark's polls while it is timed, its connections kept:
    `httpx.get` makes a client a call (an SSL context each, tens of ms of CPU), which
    polled every 20-100 ms took a third of a core from the service being measured."""
    return httpx.Client(timeout=30)


def token(url: str, client_id: str, secret: str) -> str:
    body = {"client_id": client_id, "client_secret": secret, "audience": AUDIENCE}
    response = httpx.post(url + "/oauth/token", json=body, timeout=30)
    response.raise_for_status()
    return str(response.json()["access_token"])


def data_tenant(url: str, *, dataset_id: str, schema: dict[str, Any]) -> tuple[dict[str, str], str]:
    """A company, the ingestion client `bench-crm` with one dataset, and a bearer header
    for a data:read/data:write credential; answers (header, company id)."""
    admin = {"Authorization": f"Bearer {token(url, OPERATOR, SECRET)}"}

    def post(path: str, body: dict[str, Any]) -> Any:
        response = httpx.post(url + path, json=body, headers=admin, timeout=30)
        assert response.status_code == 201, response.text
        return response.json()

    company = post("/admin/v1/companies", {"name": "Bench"})["id"]
    post(f"/admin/v1/companies/{company}/clients", {"client_id": "bench-crm", "name": "Bench"})
    post("/admin/v1/clients/bench-crm/datasets", {"dataset_id": dataset_id, "schema": schema})
    credential = post(
        f"/admin/v1/companies/{company}/credentials",
        {"name": "bench", "scopes": ["data:write", "data:read"]},
    )
    bearer = token(url, credential["client_id"], credential["client_secret"])
    return {"Authorization": f"Bearer {bearer}"}, company


# The records table's columns as binary COPY takes them, with the types psycopg writes.
# The text goes as it is: json's binary form is its text. Typed "json", psycopg would
# write each str as a JSON string (quoted, its quotes escaped).
RECORD_COPY_COLUMNS = (
    "record_id, company_id, dataset_pk, transaction_id, schema_version, ingested_at, data"
)
RECORD_COPY_TYPES = ["uuid", "uuid", "uuid", "uuid", "int4", "timestamptz", "text"]


def copy_limit(
    database_url: str, texts: list[str], *, seconds: float, per_commit: int, keep: bool = False
) -> float:
    """The physical limit of storing records: one Python process doing binary COPY
    (psycopg 3) of the given JSON texts into a table with the `records` table's columns,
    defaults and indexes, `per_commit` rows a transaction, for `seconds`. Records/s.

    Only the database's work and the wire are left: the texts are ready, ids are made
    per row. The benchmarks run it in slices alternating with the API's runs, so that
    both see the same machine, and print the API's rate as a fraction of it. `keep`
    leaves the table and its rows for the next slice: then it grows as `records` does
    while the API's slices write to it (a larger table's indexes cost more to add to).
    """
    import time
    import uuid
    from datetime import UTC, datetime

    company, dataset, transaction = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    stored = 0
    with psycopg.connect(database_url) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS copy_limit (LIKE records INCLUDING ALL)")
        conn.commit()
        deadline = time.perf_counter() + seconds
        start = time.perf_counter()
        while time.perf_counter() < deadline:
            now = datetime.now(UTC)
            with conn.cursor().copy(
                f"COPY copy_limit ({RECORD_COPY_COLUMNS}) FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.set_types(RECORD_COPY_TYPES)
                for index in range(per_commit):
                    text = texts[(stored + index) % len(texts)]
                    copy.write_row((uuid.uuid4(), company, dataset, transaction, 1, now, text))
            conn.commit()
            stored += per_commit
        elapsed = time.perf_counter() - start
        if not keep:
            conn.execute("DROP TABLE copy_limit")
            conn.commit()
    return stored / elapsed


class BenchCompany:
    """A company with an ingestion client, an `orders` dataset and a data credential
    (`headers` carry its token)."""

    def __init__(self, url: str, admin: dict[str, str], name: str) -> None:
        def post(path: str, body: dict[str, Any]) -> Any:
            answer = httpx.post(url + path, json=body, headers=admin, timeout=30)
            assert answer.status_code == 201, answer.text
            return answer.json()

        self.url = url
        self.client_id = f"{name}-crm"
        company = post("/admin/v1/companies", {"name": name})["id"]
        self.company_id = str(company)
        post(f"/admin/v1/companies/{company}/clients", {"client_id": self.client_id, "name": name})
        post(
            f"/admin/v1/clients/{self.client_id}/datasets",
            {
                "dataset_id": "orders",
                "schema": {
                    "type": "object",
                    "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
                    "required": ["order_id"],
                },
            },
        )
        credential = post(
            f"/admin/v1/companies/{company}/credentials",
            {"name": name, "scopes": ["data:write", "data:read"]},
        )
        bearer = token(url, credential["client_id"], credential["client_secret"])
        self.headers = {"Authorization": f"Bearer {bearer}"}
