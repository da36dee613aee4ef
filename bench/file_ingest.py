"""File ingestion end to end (issue 5's benchmark).

Starts Headwater on PostgreSQL with the embedded store: one API process (`headwater
serve`, its in-process file worker off) and a separate `headwater worker`. For each size
it generates a 10-column CSV (about 150 bytes a row) on the fly, PUTs it to the presigned
URL as it is generated (no file on disk on the client side), waits for the transaction to
be `completed`, checks the stored row count, and prints:

  rows/s end to end (upload URL → completed), the upload and processing times, and the
  peak resident memory (VmHWM) of the API and worker processes after each file;

then the physical limit of the same rows (bench.common.copy_limit: binary COPY of their
JSON, normalised as the worker stores them, by one Python process, 5,000 rows a commit,
as the worker commits its batches) and each file's rate as a fraction of it.

Targets (issue 24): >= 50,000 rows/s end to end at 5M rows and >= 0.5 of the COPY rate;
peak RSS <= 200 MB.

    uv run python -m bench.file_ingest [--rows 1000000 5000000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
from tests.http_server import free_port, wait_healthy

from bench.common import bench_database, copy_limit, data_tenant, server_env

HEADER = "order_id,customer_email,amount,quantity,paid,placed_at,country,channel,sku,note\n"
SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-06/schema#",
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "minLength": 1},
        "customer_email": {"type": "string", "format": "email"},
        "amount": {"type": "number", "minimum": 0},
        "quantity": {"type": "integer", "minimum": 1},
        "paid": {"type": "boolean"},
        "placed_at": {"type": "string", "format": "date-time"},
        "country": {"type": "string", "enum": ["DE", "FR", "NL", "SE", "US"]},
        "channel": {"type": "string"},
        "sku": {"type": "string", "pattern": "^SKU-[0-9]+$"},
        "note": {"type": "string", "maxLength": 100},
    },
    "required": ["order_id", "amount", "quantity", "placed_at"],
    "additionalProperties": False,
}
COUNTRIES = ["DE", "FR", "NL", "SE", "US"]
NOTE = "gift wrap please; leave it at the back door if nobody answers"


def csv_chunks(rows: int, per_chunk: int = 20_000) -> Iterator[bytes]:
    yield HEADER.encode()
    for start in range(0, rows, per_chunk):
        yield "".join(
            f"ORD-{i:09d},customer{i % 9973}@example.com,{i % 1000}.{i % 100:02d},"
            f"{i % 7 + 1},{'true' if i % 2 else 'false'},"
            f"2026-11-{i % 28 + 1:02d}T10:{i % 60:02d}:00Z,"
            f"{COUNTRIES[i % 5]},web,SKU-{i % 500},{NOTE}\n"
            for i in range(start, min(start + per_chunk, rows))
        ).encode()


def stored_texts(rows: int) -> list[str]:
    """The JSON text of the first `rows` rows as the worker stores them (normalised:
    numbers, booleans and date-times typed), for the COPY baseline."""
    out = []
    for i in range(rows):
        record = {
            "order_id": f"ORD-{i:09d}",
            "customer_email": f"customer{i % 9973}@example.com",
            "amount": float(f"{i % 1000}.{i % 100:02d}"),
            "quantity": i % 7 + 1,
            "paid": bool(i % 2),
            "placed_at": f"2026-11-{i % 28 + 1:02d}T10:{i % 60:02d}:00.000Z",
            "country": COUNTRIES[i % 5],
            "channel": "web",
            "sku": f"SKU-{i % 500}",
            "note": NOTE,
        }
        out.append(json.dumps(record, separators=(",", ":")))
    return out


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "headwater.cli", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def ingest(url: str, headers: dict[str, str], rows: int) -> dict[str, float]:
    began = time.perf_counter()
    ticket = httpx.get(
        url + "/platform/v1/data/file_upload_url",
        params={
            "client_id": "bench-crm",
            "dataset_id": "orders",
            "file_name": f"orders-{rows}.csv",
            "content_type": "text/csv",
        },
        headers=headers,
    ).json()
    size = 0

    def body() -> Iterator[bytes]:
        nonlocal size
        for chunk in csv_chunks(rows):
            size += len(chunk)
            yield chunk

    response = httpx.put(
        ticket["upload_url"], content=body(), headers=ticket["headers"], timeout=600
    )
    assert response.status_code == 200, response.text
    uploaded = time.perf_counter()
    with httpx.Client(base_url=url, headers=headers) as client:  # one connection, light
        while True:
            transaction = client.get(f"/platform/v1/transactions/{ticket['transaction_id']}")
            transaction = transaction.json()
            if transaction["status"] not in ("awaiting_upload", "processing"):
                break
            time.sleep(0.1)
    done = time.perf_counter()
    assert transaction["status"] == "completed", transaction
    assert transaction["records_accepted"] == rows, transaction

    def at(name: str) -> float:
        return datetime.fromisoformat(transaction[name].replace("Z", "+00:00")).timestamp()

    return {
        "processing_s": at("completed_at") - at("started_at"),
        "rows": rows,
        "bytes": size,
        "upload_s": uploaded - began,
        "total_s": done - began,
        "transaction_id": ticket["transaction_id"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 5_000_000])
    args = parser.parse_args()

    with (
        bench_database("headwater_bench_files") as database_url,
        tempfile.TemporaryDirectory() as data,
    ):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}
        env |= server_env(database_url) | {
            "HEADWATER_DATA_DIR": data,
            "HEADWATER_PUBLIC_URL": url,
            "HEADWATER_LOG_LEVEL": "WARNING",
        }
        api_log, worker_log = Path(data) / "api.log", Path(data) / "worker.log"
        api = start(["serve", "--port", str(port)], env | {"HEADWATER_FILE_WORKERS": "0"}, api_log)
        try:
            wait_healthy(url, api, api_log)
            worker = start(["worker"], env | {"HEADWATER_FILE_POLL_SECONDS": "0.2"}, worker_log)
            try:
                headers, _company = data_tenant(url, dataset_id="orders", schema=SCHEMA)
                print(
                    f"{'rows':>10} {'MB':>7} {'upload s':>9} {'process s':>9} {'total s':>8} "
                    f"{'rows/s':>9} "
                    f"{'API peak MB':>12} {'worker peak MB':>15}"
                )
                rates: list[float] = []
                limits: list[float] = []
                texts = stored_texts(20_000)
                for rows in args.rows:
                    result = ingest(url, headers, rows)
                    rates.append(rows / result["total_s"])
                    with psycopg.connect(database_url) as connection:
                        stored = connection.execute(
                            "SELECT count(*) FROM records WHERE transaction_id = %s",
                            (result["transaction_id"],),
                        ).fetchone()
                    assert stored is not None and stored[0] == rows, stored
                    print(
                        f"{rows:>10,} {result['bytes'] / 1e6:>7.0f} {result['upload_s']:>9.1f} "
                        f"{result['processing_s']:>9.1f} "
                        f"{result['total_s']:>8.1f} {rows / result['total_s']:>9,.0f} "
                        f"{peak_rss_mb(api.pid):>12.0f} {peak_rss_mb(worker.pid):>15.0f}",
                        flush=True,
                    )
                    # the limit measured right after each file, on the same machine state
                    limits.append(copy_limit(database_url, texts, seconds=15, per_commit=5000))
            finally:
                worker.terminate()
                worker.wait(timeout=30)
        finally:
            api.terminate()
            api.wait(timeout=30)
    for rows, rate, limit in zip(args.rows, rates, limits, strict=True):
        print(
            f"{rows:>10,} rows: {rate:,.0f} rows/s end to end; (L) binary COPY of the same "
            f"rows by one process right after: {limit:,.0f} rows/s; ratio {rate / limit:.3f}"
        )
    print("targets: >= 50,000 rows/s and >= 0.5 of (L) at 5M rows; peak RSS <= 200 MB")


if __name__ == "__main__":
    main()
