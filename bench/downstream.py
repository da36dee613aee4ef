"""The record feed and exports on a big dataset (issue 23's benchmark).

PostgreSQL; `headwater serve --workers 2` (API only) and `headwater worker` in a process
of its own (it runs the export; its peak RSS is read from /proc). A dataset of RECORDS
records is loaded with COPY, in transactions of 10,000 records. Then:

  (a) a reader follows the feed from the start, `limit=1000`, one request after another
      on one keep-alive connection (urllib3), for up to FEED_SECONDS -> records/s, and
      the server's own time a page (its /metrics); against `COPY (SELECT <the same
      records as the feed's JSON texts, in feed order>) TO STDOUT` read by psycopg, the
      physical limit, A B A B -> the ratio; twice: both readers parsing every record
      (pages and lines with orjson), then neither (the page's cursor read from its end)
  (b) the same reader follows the tail while 8 writers push batches of 100 records for
      SECONDS -> records/s read, and lag p99 (arrival at the reader - `ingested_at`)
  (c) a Parquet export of the RECORDS records -> records/s (started -> completed) and
      the worker's peak RSS; against `COPY (SELECT <the same rows>) TO STDOUT` read by
      psycopg, the physical limit, A B A B (one worker runs both exports) -> the ratio

Targets: (a) >= 100,000 records/s and >= 0.5 of COPY; (c) >= 0.3 of COPY; RSS <= 300 MB.

    .venv/bin/python -m bench.downstream [--records 10000000 --feed-seconds 60 --seconds 20
                                          --parts abc]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import orjson
import psycopg
import urllib3

from bench.common import (
    bench_database,
    data_tenant,
    kept_client,
    process_env,
    production_server,
    server_env,
)
from headwater.ingestion import feed

SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "email": {"type": "string", "format": "email"},
        "amount": {"type": "number"},
        "quantity": {"type": "integer"},
        "paid": {"type": "boolean"},
        "placed_at": {"type": "string", "format": "date-time"},
        "country": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["order_id"],
}
PER_TRANSACTION = 10_000


def record(i: int) -> str:
    return (
        f'{{"order_id":"ORD-{i:09d}","email":"c{i % 9973}@example.com",'
        f'"amount":{i % 1000}.{i % 100:02d},"quantity":{i % 7 + 1},'
        f'"paid":{"true" if i % 2 else "false"},'
        f'"placed_at":"2026-11-{i % 28 + 1:02d}T10:{i % 60:02d}:00.000Z",'
        f'"country":"{("DE", "FR", "NL", "US", "GB")[i % 5]}","tags":["t{i % 3}"]}}'
    )


def load(database_url: str, company: str, records: int) -> uuid.UUID:
    """RECORDS records of `bench-crm/orders`, in completed transactions, with COPY."""
    began = time.perf_counter()
    with psycopg.connect(database_url) as conn:
        dataset_pk, author = conn.execute(
            "SELECT d.id, s.author_id FROM datasets d JOIN dataset_schemas s "
            "ON s.dataset_pk = d.id WHERE d.client_id = 'bench-crm'"
        ).fetchone()  # type: ignore[misc]
        start = datetime.now(UTC) - timedelta(days=1)
        for first in range(0, records, PER_TRANSACTION):
            size = min(PER_TRANSACTION, records - first)
            transaction = uuid.uuid4()
            at = start + timedelta(microseconds=first)
            conn.execute(
                "INSERT INTO transactions (id, company_id, dataset_pk, client_id, dataset_id, "
                "kind, channel, status, schema_version, records_received, records_accepted, "
                "records_rejected, error_count, errors, author_id, created_at, completed_at) "
                "VALUES (%s, %s, %s, 'bench-crm', 'orders', 'json', 'api', 'completed', 1, "
                "%s, %s, 0, 0, '[]', %s, %s, %s)",
                (transaction, company, dataset_pk, size, size, author, at, at),
            )
            stamp = at.isoformat()
            with conn.cursor().copy(
                "COPY records (record_id, company_id, dataset_pk, transaction_id, "
                "schema_version, ingested_at, data) FROM STDIN"
            ) as copy:
                lines = "".join(
                    f"{uuid.uuid4()}\t{company}\t{dataset_pk}\t{transaction}\t1\t{stamp}\t"
                    f"{record(i)}\n"
                    for i in range(first, first + size)
                )
                copy.write(lines.encode())
            if first % 1_000_000 == 0:
                conn.commit()
                print(f"  loaded {first + size:,} records", flush=True)
        conn.execute(
            "INSERT INTO dataset_record_counts (dataset_pk, shard, company_id, records) "
            "VALUES (%s, 0, %s, %s)",
            (dataset_pk, company, records),
        )
        conn.commit()
        conn.execute("ANALYZE records")
        conn.execute("ANALYZE transactions")
    print(f"loaded {records:,} records in {time.perf_counter() - began:.0f} s")
    return uuid.UUID(str(dataset_pk))


class Reader:
    """A follower's HTTP: one keep-alive connection (urllib3, lighter than httpx on
    300 KB answers). `parsed`: each page parsed with orjson, as a follower that uses the
    records; otherwise its bytes only, as one that forwards them (to a file, a queue),
    its cursor read from the page's end (`unparsed`)."""

    def __init__(self, url: str, headers: dict[str, str], *, parsed: bool = True) -> None:
        self.pool = urllib3.connection_from_url(url, maxsize=1, headers=headers)
        self.parsed = parsed

    def get(self, path: str, params: dict[str, Any]) -> Any:
        response = self.pool.request("GET", path + "?" + urlencode(params), timeout=60)
        if response.status != 200:
            raise SystemExit(f"{path}: {response.status} {response.data[:500]!r}")
        return orjson.loads(response.data) if self.parsed else unparsed(response.data)

    def close(self) -> None:
        self.pool.close()


def unparsed(body: bytes) -> dict[str, Any]:
    """A page's `data` (as many records as it holds, unparsed) and `next_cursor`, from
    its bytes: the answer is `{"data":[...],"next_cursor":"..."}` (`feed.Changes.body`),
    and every record's (or tombstone's) JSON starts with its `record_id`."""
    head, _, cursor = body.rpartition(b'"next_cursor":"')
    assert head.startswith(b'{"data":[') and cursor.endswith(b'"}'), body[:200]
    return {"data": range(head.count(b'{"record_id":"')), "next_cursor": cursor[:-2].decode()}


def follow(
    reader: Reader, cursor: str | None, *, seconds: float, wait: float = 0
) -> tuple[int, float, str | None, list[float]]:
    """Follow the feed for `seconds` (or to its end when not waiting): records read, the
    time taken, the last cursor, and each record's lag (arrival - ingested_at)."""
    params = {"client_id": "bench-crm", "dataset_id": "orders", "limit": 1000, "wait": wait}
    count, lags = 0, []
    began = time.perf_counter()
    while time.perf_counter() - began < seconds:
        page = reader.get(
            "/platform/v1/data/changes", params | ({"after": cursor} if cursor else {})
        )
        now = time.time()
        count += len(page["data"])
        if wait:
            lags += [
                now - datetime.fromisoformat(r["ingested_at"].replace("Z", "+00:00")).timestamp()
                for r in page["data"]
            ]
        cursor = page["next_cursor"]
        if not page["data"] and not wait:
            break
    return count, time.perf_counter() - began, cursor, lags


def push_for(url: str, headers: dict[str, str], seconds: float, pushed: list[int]) -> None:
    deadline = time.perf_counter() + seconds
    n = 0
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        while time.perf_counter() < deadline:
            data = [
                {"order_id": f"W-{threading.get_ident()}-{n}-{k}", "amount": 1} for k in range(100)
            ]
            body = {"client_id": "bench-crm", "dataset_id": "orders", "data": data}
            client.post("/platform/v1/data/json", json=body).raise_for_status()
            n += 1
    pushed.append(n * 100)


def copy_rate(database_url: str, dataset_pk: uuid.UUID) -> tuple[int, int, float]:
    """The physical limit: the export's rows through COPY, read by psycopg (each message
    COPY sends is one row): rows, bytes, seconds."""
    with psycopg.connect(database_url) as conn, conn.cursor() as cursor:
        began = time.perf_counter()
        size = rows = 0
        with cursor.copy(
            "COPY (SELECT record_id, transaction_id, schema_version, ingested_at, data "
            "FROM records WHERE dataset_pk = %s ORDER BY ingested_at, seq) TO STDOUT",
            (dataset_pk,),
        ) as copy:
            for block in copy:
                size += len(block)
                rows += 1
        return rows, size, time.perf_counter() - began


def copy_feed(
    database_url: str, dataset_pk: uuid.UUID, count: int, *, parsed: bool
) -> tuple[int, float]:
    """The feed's physical limit: its first `count` records, as the feed's JSON texts
    (rendered as the feed renders them) in its order, through COPY read by psycopg
    (`parsed`: each line parsed with orjson, as the feed's reader parses its pages):
    rows, seconds."""
    with psycopg.connect(database_url) as conn, conn.cursor() as cursor:
        began = time.perf_counter()
        rows = 0
        with cursor.copy(
            f"COPY (SELECT {feed.LINE_SQL} FROM transactions t JOIN records "  # noqa: S608
            "ON records.transaction_id = t.id WHERE t.dataset_pk = %s AND t.feed_pos > 0 "
            "ORDER BY t.feed_pos, records.seq LIMIT %s) TO STDOUT",
            (dataset_pk, count),
        ) as copy:
            for line in copy:
                if parsed:
                    orjson.loads(line)
                rows += 1
        return rows, time.perf_counter() - began


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


@contextmanager
def export_worker(env: dict[str, str], data: str) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A `headwater worker` of its own for (c)'s exports, and its log."""
    log = Path(data) / "worker.log"
    with log.open("wb") as out:
        # the server's environment (`process_env`: its sealing key among it): a node
        # with another key refuses to start
        worker = subprocess.Popen(
            [sys.executable, "-m", "headwater.cli", "worker"],
            env=process_env(env | {"HEADWATER_DATA_DIR": data, "HEADWATER_FILE_WORKERS": "1"}),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield worker, log
    finally:
        worker.terminate()
        worker.wait(30)


def export(
    url: str, headers: dict[str, str], worker: subprocess.Popen[bytes], log: Path
) -> tuple[dict[str, object], float]:
    """A Parquet export, run by `worker`: the export and its seconds (started ->
    completed, as the worker wrote them)."""
    body = {"client_id": "bench-crm", "dataset_id": "orders", "format": "parquet"}
    queued = httpx.post(url + "/platform/v1/exports", json=body, headers=headers).json()
    while True:
        time.sleep(0.5)
        if worker.poll() is not None:
            print(log.read_text()[-3000:])
            raise SystemExit(f"the export's worker stopped (exit status {worker.returncode})")
        answer = kept_client().get(
            url + f"/platform/v1/exports/{queued['export_id']}", headers=headers
        )
        done = answer.json()
        if done["status"] in ("completed", "failed"):
            break
    if done["status"] != "completed":
        print(log.read_text()[-3000:])
        raise SystemExit(f"export failed: {done}")

    def at(name: str) -> float:
        return datetime.fromisoformat(str(done[name]).replace("Z", "+00:00")).timestamp()

    print(f"    queued {at('started_at') - at('created_at'):.1f} s before a worker took it")
    return done, at("completed_at") - at("started_at")


def export_part(
    url: str,
    headers: dict[str, str],
    env: dict[str, str],
    data: str,
    database_url: str,
    dataset_pk: uuid.UUID,
) -> None:
    """(c): COPY of the export's rows (A), then a Parquet export of them (B), twice, by
    one worker; the medians' ratio and the worker's peak RSS after both."""
    copy_rates: list[float] = []
    export_rates: list[float] = []
    with export_worker(env, data) as (worker, log):
        for trial in (1, 2):
            rows, size, copy_seconds = copy_rate(database_url, dataset_pk)
            copy_rates.append(rows / copy_seconds)
            print(
                f"    trial {trial}: COPY of the same rows: {rows:,} rows, {size / 1e6:,.0f} MB "
                f"in {copy_seconds:.1f} s = {copy_rates[-1]:,.0f} records/s (the physical "
                "limit)",
                flush=True,
            )
            done, seconds = export(url, headers, worker, log)
            export_rates.append(int(str(done["record_count"])) / seconds)
            print(
                f"    trial {trial}: the export {done['record_count']:,} records, "
                f"{int(str(done['file_size'])) / 1e6:,.0f} MB in {seconds:.1f} s = "
                f"{export_rates[-1]:,.0f} records/s = {export_rates[-1] / copy_rates[-1]:.2f} "
                "of COPY",
                flush=True,
            )
        rss = peak_rss_mb(worker.pid)
    rate, copy_per_s = statistics.median(export_rates), statistics.median(copy_rates)
    print(
        f"(c) Parquet export, medians: {rate:,.0f} records/s = {rate / copy_per_s:.2f} of "
        f"COPY's {copy_per_s:,.0f} (target >= 0.3); worker peak RSS {rss:.0f} MB (target "
        "<= 300)"
    )


def feed_parts(
    url: str,
    headers: dict[str, str],
    args: argparse.Namespace,
    database_url: str,
    dataset_pk: uuid.UUID,
) -> None:
    client = Reader(url, headers)
    try:
        follow(client, None, seconds=0.1)  # numbers the loaded transactions
        if "a" in args.parts:
            from_the_start(client, url, headers, args, database_url, dataset_pk)
        if "b" in args.parts:
            while_pushed(client, url, headers, args)
    finally:
        client.close()


def from_the_start(
    client: Reader,
    url: str,
    headers: dict[str, str],
    args: argparse.Namespace,
    database_url: str,
    dataset_pk: uuid.UUID,
) -> None:
    """(a): the feed from the start (A), then COPY of as many records (B), twice, each
    with its reader parsing every record and then with neither parsing: the same work on
    both sides of each ratio (parsing a page of 1,000 records with orjson takes about as
    long as COPY takes to send them)."""
    # The objects this process made to start (SQLAlchemy, psycopg, httpx, the service's
    # modules) left out of the collector, as a long-running consumer leaves its own: a
    # reader holds a page of 1,000 parsed records while it parses it, so collections ran
    # every few pages and scanned them all, more than doubling the parse's mean (4 ms
    # against a median of 1.8 ms) and the reader's CPU a record (4.4 us against 2.4).
    gc.freeze()
    raw = Reader(url, headers, parsed=False)
    try:
        for parsed in (True, False):
            reader = client if parsed else raw
            feed_rates: list[float] = []
            copy_rates: list[float] = []
            for trial in (1, 2):
                count, took, _, _ = follow(reader, None, seconds=args.feed_seconds)
                rows, copy_took = copy_feed(database_url, dataset_pk, count, parsed=parsed)
                feed_rates.append(count / took)
                copy_rates.append(rows / copy_took)
                print(
                    f"    trial {trial}, {'parsed' if parsed else 'unparsed'}: the feed "
                    f"{count:,} records in {took:.1f} s = {count / took:,.0f}/s; COPY of the "
                    f"same {rows:,} in {copy_took:.1f} s = {rows / copy_took:,.0f}/s",
                    flush=True,
                )
            feed_rate, copy = statistics.median(feed_rates), statistics.median(copy_rates)
            print(
                f"(a) feed from the start, {'every record parsed' if parsed else 'unparsed'}: "
                f"{feed_rate:,.0f} records/s (target >= 100,000); COPY of the same records "
                f"as the feed's JSON{', parsed' if parsed else ''}: {copy:,.0f}/s; ratio "
                f"{feed_rate / copy:.2f} (target >= 0.5)",
                flush=True,
            )
    finally:
        raw.close()
    metrics = httpx.get(url + "/metrics").text
    served = [
        line
        for line in metrics.splitlines()
        if "data/changes" in line and ("_sum" in line or "_count" in line)
    ]
    print("    server side:", *served, sep="\n    ", flush=True)


def while_pushed(
    client: Reader, url: str, headers: dict[str, str], args: argparse.Namespace
) -> None:
    """(b): the reader at the tail while 8 writers push."""
    _, _, tail, _ = follow(client, None, seconds=3600)
    pushed: list[int] = []
    writers = [
        threading.Thread(target=push_for, args=(url, headers, args.seconds, pushed))
        for _ in range(8)
    ]
    for writer in writers:
        writer.start()
    count, took, tail, lags = follow(client, tail, seconds=args.seconds, wait=5)
    for writer in writers:
        writer.join()
    more, _, _, late = follow(client, tail, seconds=10, wait=1)
    lags += late
    lags.sort()
    p99 = lags[int(len(lags) * 0.99)] if lags else float("nan")
    print(
        f"(b) feed while 8 writers push: {count + more:,} read of {sum(pushed):,} "
        f"pushed; {count / took:,.0f} records/s over {took:.1f} s; lag p50 "
        f"{statistics.median(lags) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--feed-seconds", type=float, default=60)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--parts", default="abc", help="which parts to run (default abc)")
    args = parser.parse_args()
    with (
        bench_database("hw_bench_downstream") as database_url,
        tempfile.TemporaryDirectory() as data,
    ):
        env = server_env(database_url, HEADWATER_WORKER_ENABLED="false")
        with production_server(env, 2, data_dir=data) as url:
            headers, company = data_tenant(url, dataset_id="orders", schema=SCHEMA)
            dataset_pk = load(database_url, company, args.records)
            feed_parts(url, headers, args, database_url, dataset_pk)
            if "c" not in args.parts:
                return
            print("(c) a Parquet export (B) against COPY of its rows (A), A B A B", flush=True)
            export_part(url, headers, env, data, database_url, dataset_pk)


if __name__ == "__main__":
    main()
