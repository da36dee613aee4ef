"""More than one machine (issue 38): pushes through PgBouncer in transaction mode
against direct connections, and one API process against two.

Three API servers (`serve --no-worker --no-sftp --no-smtp`) run at once on one
PostgreSQL database, each with its own data directory:

  (D)  1 process, direct connections                 the anchor
  (P)  1 process, through PgBouncer (Debian's, transaction mode,
       HEADWATER_DATABASE_POOLING=transaction)
  (P2) 2 processes, through the same PgBouncer

and two loads go to each in turn, in alternating slices (D P P2 D P P2 ...), so that
all three see the same machine, after an unmeasured 2 s slice each:

  (a) batches of 500 records of about 1 KB, concurrency 8      records/s
  (b) single-record pushes, concurrency 32                     requests/s

It prints (P)/(D) for each load (target >= 0.9) and (P2)/(P). Every answer must be 200
and every acknowledged record stored. First, (0): PgBouncer's own CPU time for one
500 kB parameter (a batch's size) passed through it by psycopg, with its default
`pkt_buf` (4 kB) and with the 256 kB that docs/scaling.md recommends, beside the
round trip without it.

    .venv/bin/python -m bench.scale [--seconds 16]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import psycopg
from tests import pgbouncer

from bench.common import (
    ServerProcess,
    WrkResult,
    bench_database,
    combine,
    process_cpu,
    report,
    request_script,
    run_wrk,
    server_env,
)
from bench.ingest import push_body, setup
from bench.validate import record

SLICES = 4
ROLES = ("--no-worker", "--no-sftp", "--no-smtp")
# the nodes of one installation share their sealing key (docs/scaling.md)
SHARED = {"HEADWATER_WEBHOOK_SECRET_KEY": "bench-scale-sealing-key"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=16)
    args = parser.parse_args()

    batch = [record(i) | {"notes": "n" * 500} for i in range(500)]
    with bench_database("headwater_bench_scale") as database_url:
        for buffer in (4096, pgbouncer.PACKET_BUFFER) * 2:  # A B A B
            print(passing(database_url, buffer))
    with (
        bench_database("headwater_bench_scale") as database_url,
        pgbouncer.pgbouncer(server_connections=40) as port,
        ExitStack() as stack,
    ):
        pooled = server_env(
            pgbouncer.through(database_url, port), HEADWATER_DATABASE_POOLING="transaction"
        )
        kinds = {"D": (server_env(database_url), 1), "P": (pooled, 1), "P2": (pooled, 2)}
        servers: dict[str, ServerProcess] = {}
        for name, (env, workers) in kinds.items():
            data = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            server = ServerProcess(
                env | {"HEADWATER_DATA_DIR": str(data), "HEADWATER_DB_CONNECTIONS": "20"} | SHARED,
                "--workers",
                str(workers),
                *ROLES,
                log=data / "server.log",
            )
            servers[name] = server.start()
            stack.callback(server.stop)
        bearer, _company = setup(servers["D"].url)
        headers = bearer | {"Content-Type": "application/json"}
        for server in servers.values():  # every process compiles the schema first
            for _ in range(8):
                httpx.post(
                    server.url + "/platform/v1/data/json",
                    content=push_body(batch[0]),
                    headers=headers,
                    timeout=30,
                ).raise_for_status()
        loads = {
            "a": (push_body(batch), 8),
            "b": (push_body(batch[1]), 32),
        }
        for body, connections in loads.values():  # a slice each unmeasured: warm
            for server in servers.values():
                run_wrk(
                    server.url + "/platform/v1/data/json",
                    seconds=2,
                    connections=connections,
                    script=request_script(method="POST", body=body, headers=headers),
                )
        slices: dict[tuple[str, str], list[WrkResult]] = {}
        for load, (body, connections) in loads.items():
            for _ in range(SLICES):
                for name, server in servers.items():
                    slices.setdefault((load, name), []).append(
                        run_wrk(
                            server.url + "/platform/v1/data/json",
                            seconds=args.seconds // SLICES,
                            connections=connections,
                            script=request_script(method="POST", body=body, headers=headers),
                        )
                    )
        with psycopg.connect(database_url) as conn:
            row = conn.execute("SELECT count(*) FROM records").fetchone()
            stored = row[0] if row else 0
    results = {key: combine(found) for key, found in slices.items()}
    print(f"seconds={args.seconds} slices={SLICES} cores={os.cpu_count()} database=postgresql")
    for (load, name), result in results.items():
        label = {"a": "(a) 500-record batches, c=8", "b": "(b) single records, c=32"}[load]
        print(report(f"{label} ({name})", result))
    for load in loads:
        pooled_share = [
            p.requests_per_second / d.requests_per_second
            for p, d in zip(slices[(load, "P")], slices[(load, "D")], strict=True)
        ]
        two = [
            p2.requests_per_second / p.requests_per_second
            for p2, p in zip(slices[(load, "P2")], slices[(load, "P")], strict=True)
        ]
        share = statistics.median(pooled_share)
        print(
            f"({load}) PgBouncer/direct slice by slice: "
            + " ".join(f"{r:.3f}" for r in pooled_share)
            + f" (median {share:.3f}; target >= 0.9: {'met' if share >= 0.9 else 'NOT met'})"
        )
        print(
            f"({load}) 2 processes/1 slice by slice: "
            + " ".join(f"{r:.3f}" for r in two)
            + f" (median {statistics.median(two):.3f})"
        )
    answered = (
        sum(r.requests * (500 if load == "a" else 1) for (load, _n), r in results.items()) + 3 * 8
    )
    print(f"records stored {stored:,}; answered 200 for {answered:,}")
    if any(r.non_2xx for r in results.values()) or stored < answered:
        raise SystemExit("some requests failed or records are missing; figures not valid")


def passing(database_url: str, buffer: int, rounds: int = 1000) -> str:
    """(0): PgBouncer's CPU a 500 kB parameter, with `pkt_buf` at `buffer`."""
    texts = ['{"notes": "%s"}' % ("n" * 1000) for _ in range(500)]
    query = "SELECT cardinality(%b::text[])"

    def round_trips(url: str, pid: int | None) -> tuple[float, float]:
        def used() -> float:
            return process_cpu(pid) if pid is not None else 0.0

        with psycopg.connect(url, autocommit=True, prepare_threshold=None) as conn:
            for _ in range(20):
                conn.execute(query, (texts,)).fetchone()
            cpu, start = used(), time.perf_counter()
            for _ in range(rounds):
                conn.execute(query, (texts,)).fetchone()
            return (used() - cpu) / rounds * 1000, (time.perf_counter() - start) / rounds * 1000

    with pgbouncer.pgbouncer(server_connections=2, packet_buffer=buffer) as port:
        pid = int(subprocess.check_output(["pgrep", "-n", "-x", "pgbouncer"]).strip())
        cpu, through = round_trips(pgbouncer.through(database_url, port), pid)
    _, direct = round_trips(database_url, None)
    return (
        f"(0) pkt_buf {buffer // 1024} kB: PgBouncer CPU {cpu:.2f} ms a 500 kB batch; "
        f"round trip {through:.2f} ms through it, {direct:.2f} ms direct"
    )


if __name__ == "__main__":
    main()
