"""The idle database load of 4 idle workers (issue 38): polling against wake-ups.

Four `headwater worker` processes run on one PostgreSQL database with nothing to do,
in alternating slices (A B A B ...), each slice with 4 new processes, measured after
they have settled:

  (A)  HEADWATER_WAKEUPS=false: every loop polls as before wake-ups (the webhook loop
       every 0.2 s, each file, export and erasure slot every 1 s)    the anchor
  (B)  wake-ups (LISTEN/NOTIFY): idle loops look every
       HEADWATER_IDLE_POLL_SECONDS (30 s) and when woken

It prints, per slice and as medians, the database's transactions per second
(`pg_stat_database`: xact_commit + xact_rollback, the sampling's own two removed) and
the workers' CPU time per minute, and B/A.

    .venv/bin/python -m bench.idle [--seconds 30]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import psycopg

from bench.common import ServerProcess, bench_database, process_cpu, server_env

WORKERS = 4
SLICES = 4
SETTLE = 8.0  # seconds after the workers connected: start-up work done


def _count(url: str, query: str) -> int:
    with psycopg.connect(url) as connection:
        row = connection.execute(query).fetchone()
    return int(row[0]) if row else 0


def _transactions(url: str) -> int:
    return _count(
        url,
        "SELECT xact_commit + xact_rollback FROM pg_stat_database "
        "WHERE datname = current_database()",
    )


def _connected(url: str) -> int:
    """How many worker processes hold a connection."""
    return _count(
        url,
        "SELECT count(DISTINCT pid) FROM pg_stat_activity WHERE datname = current_database()"
        " AND application_name LIKE 'headwater other%'",
    )


def measure(url: str, env: dict[str, str], seconds: float) -> tuple[float, float]:
    """(transactions/s, workers' CPU s/min) of WORKERS idle workers on `env`."""
    with ExitStack() as stack:
        workers = []
        for _ in range(WORKERS):
            data = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            worker = ServerProcess(
                env | {"HEADWATER_DATA_DIR": str(data)}, log=data / "worker.log", command="worker"
            )
            stack.callback(worker.stop)
            workers.append(worker.start())
        deadline = time.monotonic() + 60
        while _connected(url) < WORKERS:
            assert time.monotonic() < deadline, "the workers did not connect"
            time.sleep(0.2)
        time.sleep(SETTLE)
        pids = [w.process.pid for w in workers if w.process is not None]
        cpu, before, started = sum(map(process_cpu, pids)), _transactions(url), time.monotonic()
        time.sleep(seconds)
        after, took = _transactions(url), time.monotonic() - started
        used = sum(map(process_cpu, pids)) - cpu
    return (after - before - 2) / took, used / took * 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30)
    args = parser.parse_args()
    with bench_database("headwater_bench_idle") as url:
        base = server_env(url, HEADWATER_LOG_LEVEL="WARNING", HEADWATER_WEBHOOK_SECRET_KEY="idle")
        kinds = {"A": base | {"HEADWATER_WAKEUPS": "false"}, "B": base}
        results: dict[str, list[tuple[float, float]]] = {"A": [], "B": []}
        for n in range(SLICES):
            for name, env in kinds.items():
                found = measure(url, env, args.seconds)
                results[name].append(found)
                print(
                    f"slice {n + 1} {name}: {found[0]:7.2f} transactions/s, "
                    f"workers' CPU {found[1]:5.2f} s/min",
                    flush=True,
                )
        medians = {
            name: (
                statistics.median(r[0] for r in found),
                statistics.median(r[1] for r in found),
            )
            for name, found in results.items()
        }
        a, b = medians["A"], medians["B"]
        print(f"\n{WORKERS} idle workers, {args.seconds:g} s a slice, medians of {SLICES}:")
        print(f"  (A) polling:   {a[0]:7.2f} transactions/s   CPU {a[1]:5.2f} s/min")
        print(f"  (B) wake-ups:  {b[0]:7.2f} transactions/s   CPU {b[1]:5.2f} s/min")
        print(f"  B/A: transactions {b[0] / a[0]:.3f}, CPU {b[1] / a[1]:.3f}")


if __name__ == "__main__":
    main()
