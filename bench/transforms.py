"""Transform steps at speed (issue 36's benchmark).

Starts Headwater as in production (PostgreSQL, one API process per core, the worker in
the serve process) with three datasets of bench.validate's 20-field schema:

  plain    no steps
  steps    five steps: hash /email, mask /session_id, rename /city to /town,
           drop /referrer, set /source
  dedupe   one dedupe step on /event_id (every record's id is new: each is claimed)

and measures, each variant in alternating slices (A B C A B C ...) so that all see the
same machine (beside each rate, the machine's CPU a record: the service's processes,
PostgreSQL's and wrk's, `bench.common.cpu_split`, steadier than rates from slices of a
few seconds on two shared cores):

  (a) batches of 500 records pushed with wrk, concurrency 8: records/s of each variant;
      every request's records carry fresh event ids (a counter in the Lua script), so
      no dedupe claim ever finds an earlier one
  (f) CSV files of --rows rows uploaded to `plain` and to `steps`, alternately (A B,
      B A, A B ...: the run's drift favours neither): rows/s of processing (the
      transaction's started_at to completed_at), and the machine's CPU a row (upload
      and processing)
  (p) POST .../transforms/preview of 100 records through the five steps and a dedupe
      step (which probes the stored claims): p50 and p95 of the answer time

Targets (issue 36): (a) steps/plain >= 0.9, dedupe/plain >= 0.8; (f) steps/plain >= 0.9;
(p) p95 < 50 ms.

    uv run python -m bench.transforms [--seconds 36] [--rows 200000] [--files 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx

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
from bench.validate import SCHEMA, record

VARIANTS = ("plain", "steps", "dedupe")
STEPS: dict[str, list[dict[str, Any]]] = {
    "plain": [],
    "steps": [
        {"op": "hash", "path": "/email", "lowercase": True},
        {"op": "mask", "path": "/session_id", "keep_last": 2},
        {"op": "rename", "from": "/city", "to": "/town"},
        {"op": "drop", "path": "/referrer"},
        {"op": "set", "path": "/source", "value": "bench"},
    ],
    "dedupe": [{"op": "dedupe", "keys": ["/event_id"]}],
}
BATCH = 500


def push_script(dataset: str, headers: dict[str, str]) -> str:
    """A wrk script posting 500-record batches whose event ids are new at every request:
    `@@` in the template becomes the thread's and the request's number."""
    batch = [record(i) | {"event_id": f"evt-@@-{i}"} for i in range(BATCH)]
    template = json.dumps({"client_id": "bench-crm", "dataset_id": dataset, "data": batch})
    lines = ['wrk.method = "POST"']
    lines += [f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in headers.items()]
    lines.append(f"local template = {json.dumps(template)}")
    lines.append(
        """
local counter = 0
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", tostring(threads) .. "-" .. tostring(os.time()))
end
function request()
  counter = counter + 1
  local body = template:gsub("@@", tid .. "-" .. counter)
  return wrk.format(nil, nil, nil, body)
end
"""
    )
    return "\n".join(lines) + "\n"


def csv_chunks(rows: int, tag: str, per_chunk: int = 20_000) -> Iterator[bytes]:
    """The records as CSV (their scalar members: no array or object columns)."""
    scalar = [n for n in SCHEMA["properties"] if n not in ("tags", "device")]
    yield (",".join(scalar) + "\n").encode()
    for start in range(0, rows, per_chunk):
        lines = []
        for i in range(start, min(start + per_chunk, rows)):
            values = record(i) | {"event_id": f"evt-{tag}-{i}"}
            lines.append(",".join(_cell(values.get(n)) for n in scalar) + "\n")
        yield "".join(lines).encode()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return str(value).lower() if isinstance(value, bool) else str(value)


def process_file(url: str, headers: dict[str, str], dataset: str, rows: int, tag: str) -> float:
    """Upload a CSV of `rows` rows to `dataset`; its processing rate, rows/s."""
    ticket = httpx.get(
        url + "/platform/v1/data/file_upload_url",
        params={
            "client_id": "bench-crm",
            "dataset_id": dataset,
            "file_name": f"{tag}.csv",
            "content_type": "text/csv",
        },
        headers=headers,
    ).json()
    response = httpx.put(
        ticket["upload_url"], content=csv_chunks(rows, tag), headers=ticket["headers"], timeout=600
    )
    assert response.status_code == 200, response.text
    with httpx.Client(base_url=url, headers=headers) as client:
        while True:
            done = client.get(f"/platform/v1/transactions/{ticket['transaction_id']}").json()
            if done["status"] not in ("awaiting_upload", "processing"):
                break
            time.sleep(0.1)
    assert done["status"] == "completed" and done["records_accepted"] == rows, done

    def at(name: str) -> float:
        return datetime.fromisoformat(done[name].replace("Z", "+00:00")).timestamp()

    return rows / (at("completed_at") - at("started_at"))


def preview_times(url: str, admin: dict[str, str], count: int) -> list[float]:
    """Milliseconds of each of `count` previews of 100 records (one connection)."""
    body = {
        "records": [record(i) for i in range(100)],
        "steps": STEPS["steps"] + STEPS["dedupe"],
    }
    path = "/admin/v1/clients/bench-crm/datasets/dedupe/transforms/preview"
    times = []
    with httpx.Client(base_url=url, headers=admin, timeout=30) as client:
        for _ in range(count + 5):
            began = time.perf_counter()
            response = client.post(path, json=body)
            times.append((time.perf_counter() - began) * 1000)
            assert response.status_code == 200, response.text
    return times[5:]  # the first ones compile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=36)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--files", type=int, default=3)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    slices = 4
    with (
        bench_database("headwater_bench_transforms") as database_url,
        production_server(server_env(database_url), args.workers) as url,
    ):
        bearer, _ = data_tenant(url, dataset_id="plain", schema=SCHEMA)
        admin = {"Authorization": f"Bearer {token(url, OPERATOR, SECRET)}"}
        for name in VARIANTS:
            base = "/admin/v1/clients/bench-crm/datasets"
            if name != "plain":
                created = httpx.post(
                    url + base, json={"dataset_id": name, "schema": SCHEMA}, headers=admin
                )
                assert created.status_code == 201, created.text
            put = httpx.put(
                f"{url}{base}/{name}/transforms", json={"steps": STEPS[name]}, headers=admin
            )
            assert put.status_code == 200, put.text
        times = preview_times(url, admin, 100)  # first: a quiet server
        headers = bearer | {"Content-Type": "application/json"}
        push = url + "/platform/v1/data/json"
        for name in VARIANTS:  # every API process compiles each dataset first
            run_wrk(push, seconds=2, connections=8, script=push_script(name, headers))
        results: dict[str, list[WrkResult]] = {name: [] for name in VARIANTS}
        used: dict[str, CpuSplit] = {}
        for _ in range(slices):
            for name in VARIANTS:
                with adding_cpu(used, name):
                    results[name].append(
                        run_wrk(
                            push,
                            seconds=max(1, args.seconds // (slices * len(VARIANTS))),
                            connections=8,
                            script=push_script(name, headers),
                        )
                    )
        files: dict[str, list[float]] = {"plain": [], "steps": []}
        file_cpu: dict[str, CpuSplit] = {}
        for n in range(args.files):
            # A B, then B A: a drift over the run (the tables grow) favours neither
            for name in list(files) if n % 2 == 0 else list(files)[::-1]:
                with adding_cpu(file_cpu, name):
                    files[name].append(process_file(url, bearer, name, args.rows, f"{name}{n}"))
    combined = {name: combine(found) for name, found in results.items()}
    if any(r.non_2xx for r in combined.values()):
        raise SystemExit("some pushes failed; figures not valid")
    rate = {name: combined[name].requests_per_second * BATCH for name in VARIANTS}
    print(f"workers={args.workers} cores={os.cpu_count()} seconds={args.seconds} rows={args.rows}")
    cost = {name: used[name].each_us(combined[name].requests * BATCH) for name in VARIANTS}
    for name in VARIANTS:
        each = " ".join(f"{r.requests_per_second * BATCH:,.0f}" for r in results[name])
        print(
            f"(a) {name:6} {rate[name]:>9,.0f} records/s  (slices: {each}); the machine's CPU "
            f"a record {cost[name].total:.1f} us, of it PostgreSQL's {cost[name].postgres:.1f}"
        )
    for name in ("steps", "dedupe"):
        pairs = [
            one.requests_per_second / base.requests_per_second
            for one, base in zip(results[name], results["plain"], strict=True)
        ]
        ratio = rate[name] / rate["plain"]
        target = 0.9 if name == "steps" else 0.8
        print(
            f"(a) {name}/plain = {ratio:.3f} (slices {' '.join(f'{p:.3f}' for p in pairs)}; "
            f"target >= {target}: {'met' if ratio >= target else 'NOT met'}); by CPU a "
            f"record {cost['plain'].total / cost[name].total:.3f}"
        )
    for name, found in files.items():
        print(f"(f) {name:6} " + " ".join(f"{r:,.0f}" for r in found) + " rows/s processing")
    ratio = statistics.median(files["steps"]) / statistics.median(files["plain"])
    per_row = {name: file_cpu[name].each_us(args.rows * args.files).total for name in files}
    print(
        f"(f) steps/plain = {ratio:.3f} (target >= 0.9: {'met' if ratio >= 0.9 else 'NOT met'}); "
        f"the machine's CPU a row {per_row['steps']:.1f} against {per_row['plain']:.1f} us: "
        f"{per_row['plain'] / per_row['steps']:.3f}"
    )
    p50 = statistics.median(times)
    p95 = statistics.quantiles(times, n=20)[-1]
    print(
        f"(p) preview of 100 records: p50 {p50:.1f} ms, p95 {p95:.1f} ms "
        f"(target < 50 ms: {'met' if p95 < 50 else 'NOT met'})"
    )


if __name__ == "__main__":
    main()
