"""Erasing data subjects at scale (issue 37's benchmark).

Starts Headwater as in production (PostgreSQL, one API process per core, the worker in
the serve process; `--sqlite`: the embedded database, one process) with three datasets
of bench.validate's 20-field schema:

  people   subject_key /email, quarantining: --records records of --subjects people
           (each person in records/subjects of them; beside them, part (i)'s pushes
           of 500 people, none of them erased), and 100 NDJSON files of 100 invalid
           rows each (10,000 quarantined rows, 100 raw files)
  plain    the same schema without a subject key
  other    where pushes go while erasures run

and measures:

  (i) ingestion with a subject key against without: batches of 500 pushed with wrk,
      concurrency 8, `people` and `plain` in alternating slices (A B A B, four of
      each); beside the rates, the machine's CPU a record in each (the service's
      processes, PostgreSQL's, wrk's: `bench.common.cpu_split`), far steadier from one
      run to the next than rates from slices of a few seconds on two shared cores
  (e) erasures of 1, 100 and 1,000 subjects: seconds from the request to `completed`
      (the erasure's own times), beside the anchor: PostgreSQL's bare `DELETE` of as
      many records of other subjects by the same index, rolled back, timed by psql's
      server in the same minutes (A B)
  (c) pushes to `other` while erasures of 1,000 subjects run back to back, against
      pushes with none (A B A B)

Targets (issue 37), PostgreSQL: one subject <= 5 s, 1,000 subjects <= 30 s (SQLite: 3x
those); (c) >= 0.8; (i) >= 0.95.

    uv run python -m bench.erasure [--records 1000000] [--seconds 24] [--sqlite]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import httpx
import psycopg

from bench.common import (
    OPERATOR,
    SECRET,
    CpuSplit,
    WrkResult,
    adding_cpu,
    bench_database,
    combine,
    data_tenant,
    production_server,
    run_wrk,
    server_env,
    token,
)
from bench.validate import SCHEMA, broken, record

BATCH = 500
FILES, ROWS_PER_FILE = 100, 100
PAIRS = 4  # part (i)'s slices of each variant, in turns


def person(i: int, subjects: int) -> dict[str, Any]:
    return record(i) | {"email": f"user{i % subjects}@example.com"}


def push_script(dataset: str, headers: dict[str, str], subjects: int) -> str:
    """wrk: 500-record batches, each record of one of `subjects` people."""
    batch = [person(i, subjects) for i in range(BATCH)]
    body = json.dumps({"client_id": "bench-crm", "dataset_id": dataset, "data": batch})
    lines = ['wrk.method = "POST"', f"wrk.body = {json.dumps(body)}"]
    lines += [f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in headers.items()]
    return "\n".join(lines) + "\n"


def load(url: str, headers: dict[str, str], records: int, subjects: int) -> None:
    """Push `records` records to `people`, 500 a batch on 8 connections."""

    def push(start: int) -> None:
        data = [person(i, subjects) for i in range(start, min(start + BATCH, records))]
        body = {"client_id": "bench-crm", "dataset_id": "people", "data": data}
        response = client.post("/platform/v1/data/json", json=body)
        assert response.status_code == 200, response.text

    with (
        httpx.Client(base_url=url, headers=headers, timeout=120) as client,
        ThreadPoolExecutor(8) as pool,
    ):
        list(pool.map(push, range(0, records, BATCH)))


def quarantine_files(url: str, headers: dict[str, str], subjects: int) -> None:
    """100 NDJSON files of 100 invalid rows each (and one valid), quarantined."""
    tickets = []
    for n in range(FILES):
        rows = [broken(n * ROWS_PER_FILE + i) for i in range(ROWS_PER_FILE)]
        for i, row in enumerate(rows):
            row["email"] = f"user{(n * ROWS_PER_FILE + i) % subjects}@example.com"
        rows.append(person(10_000_000 + n, subjects))
        body = "".join(json.dumps(row) + "\n" for row in rows).encode()
        ticket = httpx.get(
            url + "/platform/v1/data/file_upload_url",
            params={
                "client_id": "bench-crm",
                "dataset_id": "people",
                "file_name": f"q{n}.ndjson",
                "content_type": "application/x-ndjson",
            },
            headers=headers,
        ).json()
        put = httpx.put(ticket["upload_url"], content=body, headers=ticket["headers"])
        assert put.status_code == 200, put.text
        tickets.append(ticket["transaction_id"])
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        for transaction_id in tickets:
            while client.get(f"/platform/v1/transactions/{transaction_id}").json()["status"] in (
                "awaiting_upload",
                "processing",
            ):
                time.sleep(0.1)


def _at(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def erase(url: str, eraser: dict[str, str], subjects: list[str]) -> tuple[float, dict[str, int]]:
    """Seconds from the request to `completed` (the erasure's own times), and counts."""
    with httpx.Client(base_url=url, headers=eraser, timeout=60) as client:
        made = client.post(
            "/platform/v1/erasures", json={"subjects": subjects, "client_id": "bench-crm"}
        )
        assert made.status_code == 202, made.text
        erasure_id = made.json()["erasure_id"]
        while True:
            done = client.get(f"/platform/v1/erasures/{erasure_id}").json()
            if done["status"] in ("completed", "failed"):
                break
            time.sleep(0.02)
    assert done["status"] == "completed", done
    return _at(done["completed_at"]) - _at(done["created_at"]), done["counts"]


def bare_delete(database_url: str, records: int, offset: int) -> tuple[float, int]:
    """The anchor: PostgreSQL deleting as many records (of other subjects, taken in
    digest order from `offset` until their records add up) by the same index
    (`ix_records_subject`), in one statement, rolled back; the seconds it took."""
    with psycopg.connect(database_url) as conn:
        digests: list[bytes] = []
        total = 0
        rows = conn.execute(
            "SELECT subject, count(*) FROM records WHERE subject IS NOT NULL "
            "GROUP BY subject ORDER BY subject OFFSET %s",
            (offset,),
        )
        for digest, count in rows:
            if total >= records:
                break
            digests.append(digest)
            total += count
        began = time.perf_counter()
        deleted = conn.execute(
            "DELETE FROM records WHERE dataset_pk = (SELECT dataset_pk FROM records "
            "WHERE subject = %s LIMIT 1) AND subject = ANY(%s)",
            (digests[0], digests),
        ).rowcount
        seconds = time.perf_counter() - began
        conn.rollback()
    return seconds, deleted


@contextmanager
def erasing_back_to_back(
    url: str, eraser: dict[str, str], pool: Iterator[int]
) -> Iterator[list[float]]:
    """Erasures of 1,000 subjects one after another while the block runs; their times."""
    stop = threading.Event()
    times: list[float] = []

    def run() -> None:
        while not stop.is_set():
            subjects = [f"user{next(pool)}@example.com" for _ in range(1000)]
            times.append(erase(url, eraser, subjects)[0])

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield times
    finally:
        stop.set()
        thread.join()


def setup(url: str) -> tuple[dict[str, str], dict[str, str]]:
    bearer, company = data_tenant(url, dataset_id="plain", schema=SCHEMA)
    admin = {"Authorization": f"Bearer {token(url, OPERATOR, SECRET)}"}
    options = {"subject_key": "/email", "invalid_rows": "quarantine"}
    for name, opts in (("people", options), ("other", {})):
        made = httpx.post(
            url + "/admin/v1/clients/bench-crm/datasets",
            json={"dataset_id": name, "schema": SCHEMA, "options": opts},
            headers=admin,
        )
        assert made.status_code == 201, made.text
    credential = httpx.post(
        f"{url}/admin/v1/companies/{company}/credentials",
        json={"name": "eraser", "scopes": ["data:erase"]},
        headers=admin,
    ).json()
    bearer_erase = token(url, credential["client_id"], credential["client_secret"])
    eraser = {"Authorization": f"Bearer {bearer_erase}"}
    return bearer, eraser


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--subjects", type=int, default=200_000)
    parser.add_argument("--seconds", type=int, default=24)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--sqlite", action="store_true", help="the embedded database")
    parser.add_argument(
        "--duty", type=float, help="HEADWATER_ERASURE_DUTY of the server (else its default)"
    )
    args = parser.parse_args()
    slices = 2
    with contextmanager(_database)(args.sqlite) as (database_url, env):
        if args.duty is not None:
            env["HEADWATER_ERASURE_DUTY"] = str(args.duty)
        workers = 1 if args.sqlite else args.workers
        with production_server(env, workers) as url:
            bearer, eraser = setup(url)
            headers = bearer | {"Content-Type": "application/json"}
            push = url + "/platform/v1/data/json"
            ingest: dict[str, list[WrkResult]] = {"people": [], "plain": []}
            used: dict[str, CpuSplit] = {}
            for name in ingest:  # every API process compiles each dataset first
                run_wrk(
                    push, seconds=2, connections=8, script=push_script(name, headers, args.subjects)
                )
            for _ in range(PAIRS):
                for name in ingest:
                    with adding_cpu(used, name):
                        ingest[name].append(
                            run_wrk(
                                push,
                                seconds=max(1, args.seconds // (2 * PAIRS)),
                                connections=8,
                                script=push_script(name, headers, args.subjects),
                            )
                        )
            began = time.monotonic()
            # every person's records, whatever part (i) pushed: its batches hold 500 people
            # (each in thousands of records), none of whom is erased below
            load(url, bearer, args.records, args.subjects)
            quarantine_files(url, bearer, args.subjects)
            loaded = time.monotonic() - began
            # (e) erasures, each beside the bare delete of as many records (PostgreSQL)
            erasures: list[tuple[int, float, dict[str, int], float | None]] = []
            start = BATCH  # past the people of wrk's batches (each in many records)
            for count in (1, 100, 1000):
                subjects = [f"user{start + i}@example.com" for i in range(count)]
                start += count
                seconds, counts = erase(url, eraser, subjects)
                anchor = None
                if database_url and counts["records"]:
                    anchor, _ = bare_delete(database_url, counts["records"], 0)
                erasures.append((count, seconds, counts, anchor))
            # (c) pushes to `other` with and without erasures running (A B A B)
            pool = iter(range(start, args.subjects))
            other = push_script("other", headers, args.subjects)
            run_wrk(push, seconds=2, connections=8, script=other)
            quiet: list[WrkResult] = []
            busy: list[WrkResult] = []
            during: list[float] = []
            for _ in range(slices):
                quiet.append(
                    run_wrk(push, seconds=max(1, args.seconds // 4), connections=8, script=other)
                )
                with erasing_back_to_back(url, eraser, pool) as times:
                    busy.append(
                        run_wrk(
                            push, seconds=max(1, args.seconds // 4), connections=8, script=other
                        )
                    )
                during += times
    for found in (*ingest.values(), quiet, busy):
        if combine(found).non_2xx:
            raise SystemExit("some pushes failed; figures not valid")
    kind = "SQLite" if args.sqlite else "PostgreSQL"
    factor = 3 if args.sqlite else 1
    print(
        f"{kind} workers={workers} cores={os.cpu_count()} records={args.records:,} "
        f"subjects={args.subjects:,} duty={args.duty or 'default'} (loaded in {loaded:.0f} s)"
    )
    rate = {name: combine(found).requests_per_second * BATCH for name, found in ingest.items()}
    slice_ratios = [
        a.requests_per_second / b.requests_per_second
        for a, b in zip(ingest["people"], ingest["plain"], strict=True)
    ]
    ratio = rate["people"] / rate["plain"]
    print(
        f"(i) with subject_key {rate['people']:,.0f} records/s, without {rate['plain']:,.0f}: "
        f"{ratio:.3f} (slices {' '.join(f'{r:.3f}' for r in slice_ratios)}, their median "
        f"{statistics.median(slice_ratios):.3f}; "
        f"target >= 0.95: {'met' if ratio >= 0.95 else 'NOT met'})"
    )
    cost = {
        name: used[name].each_us(combine(found).requests * BATCH) for name, found in ingest.items()
    }
    people, plain = cost["people"], cost["plain"]
    print(
        f"    CPU a record, the machine's (the service, PostgreSQL, wrk): with subject_key "
        f"{people.total:.1f} us (PostgreSQL's {people.postgres:.1f}), without "
        f"{plain.total:.1f} us ({plain.postgres:.1f}): "
        f"{plain.total / people.total:.3f} (what the rates' ratio tends to on a machine "
        "these processes keep busy)"
    )
    for count, seconds, counts, anchor in erasures:
        target = 5 if count == 1 else 30 if count == 1000 else None
        verdict = ""
        if target is not None:
            limit = target * factor
            verdict = f"; target <= {limit} s: {'met' if seconds <= limit else 'NOT met'}"
        beside = "" if anchor is None else f", bare DELETE of as many {anchor * 1000:.1f} ms"
        print(
            f"(e) {count:>5} subjects: {seconds:.3f} s ({counts['records']} records, "
            f"{counts['quarantined_rows']} quarantined rows, {counts['files']} files"
            f"{beside}{verdict})"
        )
    q, b = combine(quiet).requests_per_second, combine(busy).requests_per_second
    each = " ".join(
        f"{x.requests_per_second / y.requests_per_second:.3f}"
        for x, y in zip(busy, quiet, strict=True)
    )
    print(
        f"(c) pushes to another dataset during erasures {b * BATCH:,.0f} records/s, without "
        f"{q * BATCH:,.0f}: {b / q:.3f} (slices {each}; {len(during)} erasures of 1,000 "
        f"subjects ran, median {statistics.median(during) if during else 0:.2f} s; "
        f"target >= 0.8: {'met' if b / q >= 0.8 else 'NOT met'})"
    )


def _database(sqlite: bool) -> Iterator[tuple[str | None, dict[str, str]]]:
    if sqlite:
        env = server_env("") | {"HEADWATER_DATABASE_URL": ""}
        env.pop("HEADWATER_DATABASE_URL")
        yield None, env
        return
    with bench_database("headwater_bench_erasure") as database_url:
        yield database_url, server_env(database_url)


if __name__ == "__main__":
    main()
