"""Push-JSON throughput (issue 4's benchmark).

Starts Headwater as the README documents for production (PostgreSQL, one API process
per core), registers a 20-field draft-06 schema, and drives it with wrk:

  (a) batches of 500 records of about 1 KB, concurrency 8      records/s
  (b) single-record pushes, concurrency 32                     requests/s, p50, p99
  (c) GET /platform/v1/whoami (bench/auth.py's authenticated
      no-database endpoint), concurrency 32                    requests/s: the ceiling
  (L) binary COPY of the same records (their compact JSON, as stored)
      by one Python process into a table with the records table's
      DDL (bench.common.copy_limit), kept from slice to slice so that
      it grows as records does                                     the batches' limit

and prints (a)/(L) and (b)/(c). (a) and (L) run in alternating slices, as (b) and (c) do.
Targets (issue 24): (a)/(L) >= 0.9; (b)/(c) >= 0.7 with (b) p99 <= 50 ms. Issue 34 keeps
(a)/(L) >= 0.8 and (b)/(c) within 5% of the 0.44-0.51 of its filing (>= 0.42); both are
printed.
A CHECKPOINT between (a) and (b) flushes what (a) wrote before (b) is measured. (b) and
(c) run in alternating slices (SLICES of each, seconds/SLICES long), so that both see the
same machine; their p95 and p99 are the highest slice's (an upper bound).
Every answer must be 200 (wrk counts the others); the stored row count is checked at
the end against what the server acknowledged.

    uv run python -m bench.ingest [--seconds 20] [--workers N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from typing import Any

import httpx
import psycopg

from bench.common import (
    WrkResult,
    bench_database,
    combine,
    copy_limit,
    data_tenant,
    production_server,
    report,
    request_script,
    run_wrk,
    server_env,
)
from bench.validate import SCHEMA, record

# (b) and (c) each run this many slices of seconds/SLICES, alternating.
SLICES = 4
# (a) and (L) too, in more and shorter slices: PostgreSQL's rate steps down once a
# checkpoint begins (full-page writes), and short slices share that step evenly.
BATCH_SLICES = 8


def setup(url: str) -> tuple[dict[str, str], str]:
    """A company, an ingestion client, the 20-field dataset and a data credential."""
    return data_tenant(url, dataset_id="events", schema=SCHEMA)


def push_body(records: list[dict[str, Any]] | dict[str, Any]) -> str:
    return json.dumps({"client_id": "bench-crm", "dataset_id": "events", "data": records})


# issue 34's "within 5% of today" for single pushes: 0.44-0.51 of whoami when it was filed
SINGLE_KEPT = 0.42


def _met(met: bool) -> str:
    return "met" if met else "NOT met"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()

    batch = [record(i) | {"notes": "n" * 500} for i in range(500)]
    size = len(json.dumps(batch[0]))
    with bench_database("headwater_bench_ingest") as database_url:
        env = server_env(database_url)
        with production_server(env, args.workers) as url:
            bearer, _company = setup(url)
            json_headers = bearer | {"Content-Type": "application/json"}
            warm = httpx.post(
                url + "/platform/v1/data/json", content=push_body(batch), headers=json_headers
            )
            assert warm.status_code == 200, warm.text
            for _ in range(args.workers * 4):  # every worker compiles the schema first
                httpx.post(
                    url + "/platform/v1/data/json",
                    content=push_body(batch[0]),
                    headers=json_headers,
                ).raise_for_status()
            push = url + "/platform/v1/data/json"
            # the texts as the API stores them (compact), into a table that grows slice
            # by slice as `records` does
            texts = [json.dumps(r, separators=(",", ":")) for r in batch]
            limits: list[float] = []
            batches: list[WrkResult] = []
            for _ in range(BATCH_SLICES):
                batches.append(
                    run_wrk(
                        push,
                        seconds=args.seconds // BATCH_SLICES,
                        connections=8,
                        script=request_script(
                            method="POST", body=push_body(batch), headers=json_headers
                        ),
                    )
                )
                limits.append(
                    copy_limit(
                        database_url,
                        texts,
                        seconds=args.seconds / BATCH_SLICES,
                        per_commit=500,
                        keep=True,
                    )
                )
            results = {"a": combine(batches)}
            # (a)'s hundreds of MB flushed now, so (b) measures single pushes, not a
            # checkpoint of what (a) wrote (which held (b)'s commits up to 400 ms)
            with psycopg.connect(database_url, autocommit=True) as conn:
                conn.execute("CHECKPOINT")
            # (b) and (c) in alternating slices, so that both see the same machine: on a
            # shared host its speed drifts by 10-15% within a minute, and phases run one
            # after the other compared two different machines
            slices: dict[str, list[WrkResult]] = {"b": [], "c": []}
            for _ in range(SLICES):
                slices["b"].append(
                    run_wrk(
                        push,
                        seconds=args.seconds // SLICES,
                        connections=32,
                        script=request_script(
                            method="POST", body=push_body(batch[1]), headers=json_headers
                        ),
                    )
                )
                slices["c"].append(
                    run_wrk(
                        url + "/platform/v1/whoami",
                        seconds=args.seconds // SLICES,
                        connections=32,
                        script=request_script(headers=bearer),
                    )
                )
            results["b"], results["c"] = combine(slices["b"]), combine(slices["c"])
        with psycopg.connect(database_url) as conn:
            row = conn.execute("SELECT count(*) FROM records").fetchone()
            stored = row[0] if row else 0
    a, b, c = results["a"], results["b"], results["c"]
    print(
        f"workers={args.workers} seconds={args.seconds} database=postgresql "
        f"cores={os.cpu_count()} record~{size} bytes"
    )
    print(report("(a) push 500-record batches, c=8", a))
    print(report("(b) push single records, c=32", b))
    print(report("(c) GET /platform/v1/whoami, c=32", c))
    limit = statistics.median(limits)
    print(
        "(L) binary COPY, one process, 500 a commit: "
        + " ".join(f"{rate:,.0f}" for rate in limits)
        + f" records/s (median {limit:,.0f})"
    )
    print(
        "(a)/(L) slice by slice: "
        + " ".join(
            f"{one.requests_per_second * 500 / rate:.3f}"
            for one, rate in zip(batches, limits, strict=True)
        )
    )
    each = [
        one.requests_per_second / ceiling.requests_per_second
        for one, ceiling in zip(slices["b"], slices["c"], strict=True)
    ]
    print("(b)/(c) slice by slice: " + " ".join(f"{ratio:.3f}" for ratio in each))
    records_per_second = a.requests_per_second * 500
    ratio = b.requests_per_second / c.requests_per_second
    share = records_per_second / limit
    print(
        f"(a) {records_per_second:,.0f} records/s = {share:.3f} of (L)  (issue 24: >= 0.9 "
        f"{_met(share >= 0.9)}; issue 34 keeps >= 0.8: {_met(share >= 0.8)})"
    )
    print(
        f"(b)/(c) = {ratio:.3f}, (b) p99 {b.latency_p99_ms:.1f} ms  (issue 24: >= 0.7 with p99 "
        f"<= 50 ms: {_met(ratio >= 0.7 and b.latency_p99_ms <= 50)}; issue 34 keeps >= 0.42: "
        f"{_met(ratio >= SINGLE_KEPT)})"
    )
    # wrk counts answered requests; one cut off when time ran out may still have stored.
    answered = 500 + args.workers * 4 + a.requests * 500 + b.requests
    print(f"records stored {stored:,}; answered 200 for {answered:,}")
    if any(r.non_2xx for r in results.values()) or stored < answered:
        raise SystemExit("some requests failed or records are missing; figures not valid")


if __name__ == "__main__":
    main()
