"""Soak: mixed load for a long run, with the memory of every service process over time
(issue 7's benchmark).

On PostgreSQL, `headwater serve --workers 2` (file worker off) and a separate
`headwater worker`. Eight client threads mix: batches of 50 records, single records,
CSV uploads of 500 rows, transaction and record reads, activity searches and category
writes and lists. Every 30 s it prints requests/s, errors and the resident memory (RSS)
of each process; at the end, throughput and error rate per kind of request, and each
process's memory after warm-up against its memory at the end.

    uv run python -m bench.soak [--seconds 600] [--threads 8]
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench.common import (
    OPERATOR,
    SECRET,
    ServerProcess,
    bench_database,
    data_tenant,
    server_env,
    token,
)
from bench.file_ingest import SCHEMA, csv_chunks

WEIGHTS = {
    "push_batch": 30,
    "push_one": 20,
    "upload": 3,
    "transactions": 12,
    "records": 10,
    "search": 15,
    "category_write": 5,
    "categories": 5,
}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def processes(api: ServerProcess, worker: ServerProcess) -> dict[str, int]:
    """The API supervisor, its worker processes, and the file worker, by name."""
    assert api.process is not None and worker.process is not None
    found = {"api supervisor": api.process.pid, "file worker": worker.process.pid}
    children = Path(f"/proc/{api.process.pid}/task/{api.process.pid}/children")
    workers = [
        pid
        for pid in sorted(int(p) for p in children.read_text().split())
        # multiprocessing's resource tracker is a child too; it serves no requests
        if b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    for n, pid in enumerate(workers):
        found[f"api {n}"] = pid
    return found


def row(i: int) -> dict[str, Any]:
    return {
        "order_id": f"S-{i}",
        "amount": i % 1000,
        "quantity": i % 7 + 1,
        "placed_at": "2026-11-22T10:00:00Z",
        "country": "DE",
        "note": "soak",
    }


class Load:
    def __init__(self, url: str, data: dict[str, str], app: dict[str, str], seconds: int) -> None:
        self.url, self.data, self.app = url, data, app
        self.deadline = time.monotonic() + seconds
        self.done: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.seconds: dict[str, list[float]] = {kind: [] for kind in WEIGHTS}
        self.lock = threading.Lock()
        self.seq = 0

    def next_seq(self, n: int) -> int:
        with self.lock:
            self.seq += n
            return self.seq - n

    def one(self, http: httpx.Client, kind: str) -> bool:
        if kind == "push_batch":
            start = self.next_seq(50)
            body = {
                "client_id": "bench-crm",
                "dataset_id": "orders",
                "data": [row(i) for i in range(start, start + 50)],
            }
            return http.post("/platform/v1/data/json", json=body, headers=self.data).is_success
        if kind == "push_one":
            body = {"client_id": "bench-crm", "dataset_id": "orders", "data": row(self.next_seq(1))}
            return http.post("/platform/v1/data/json", json=body, headers=self.data).is_success
        if kind == "upload":
            ticket = http.get(
                "/platform/v1/data/file_upload_url",
                params={
                    "client_id": "bench-crm",
                    "dataset_id": "orders",
                    "file_name": "soak.csv",
                    "content_type": "text/csv",
                },
                headers=self.data,
            )
            if not ticket.is_success:
                return False
            put = http.put(
                ticket.json()["upload_url"],
                content=b"".join(csv_chunks(500)),
                headers=ticket.json()["headers"],
            )
            return put.is_success
        if kind == "transactions":
            return http.get("/platform/v1/transactions", headers=self.data).is_success
        if kind == "records":
            params = {"client_id": "bench-crm", "dataset_id": "orders", "page_size": 50}
            return http.get("/platform/v1/data", params=params, headers=self.data).is_success
        if kind == "search":
            body = {"page_size": 20, "filter": {"resource_type": "workflow_category"}}
            return http.post("/app/v1/activities/search", json=body, headers=self.app).is_success
        if kind == "category_write":
            created = http.post(
                "/app/v1/workflow_categories",
                json={"name": f"Soak {self.next_seq(1)}"},
                headers=self.app,
            )
            if not created.is_success:
                return False
            changed = http.patch(
                f"/app/v1/workflow_categories/{created.json()['id']}",
                json={"description": "changed"},
                headers=self.app,
            )
            return changed.is_success
        params = {"name": "soak", "page_size": 20}
        return http.get("/app/v1/workflow_categories", params=params, headers=self.app).is_success

    def run(self, seed: int) -> None:
        rng = random.Random(seed)
        kinds, weights = list(WEIGHTS), list(WEIGHTS.values())
        with httpx.Client(base_url=self.url, timeout=30) as http:
            while time.monotonic() < self.deadline:
                kind = rng.choices(kinds, weights)[0]
                began = time.perf_counter()
                try:
                    ok = self.one(http, kind)
                except httpx.HTTPError:
                    ok = False
                with self.lock:
                    (self.done if ok else self.failed)[kind] += 1
                    self.seconds[kind].append(time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--seconds", type=int, default=600)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--interval", type=int, default=30)
    parser.add_argument("--warm-up", type=int, default=60)
    args = parser.parse_args()

    with bench_database("headwater_bench_soak") as database_url:
        data_dir = Path(tempfile.mkdtemp(prefix="headwater-soak-"))
        env = server_env(database_url, HEADWATER_DATA_DIR=str(data_dir))
        env |= {"HEADWATER_FILE_WORKERS": "0", "HEADWATER_LOG_LEVEL": "WARNING"}
        api = ServerProcess(env, "--workers", "2", log=data_dir / "api.log")
        env["HEADWATER_PUBLIC_URL"] = api.env["HEADWATER_PUBLIC_URL"] = api.url
        worker = ServerProcess(env, log=data_dir / "worker.log", command="worker")
        try:
            api.start()
            worker.start()
            data, company = data_tenant(api.url, dataset_id="orders", schema=SCHEMA)
            admin = {"Authorization": f"Bearer {token(api.url, OPERATOR, SECRET)}"}
            credential = httpx.post(
                f"{api.url}/admin/v1/companies/{company}/credentials",
                json={
                    "name": "soak",
                    "scopes": ["workflows:read", "workflows:write", "activities:read"],
                },
                headers=admin,
            ).json()
            app = {
                "Authorization": "Bearer "
                + token(api.url, credential["client_id"], credential["client_secret"])
            }
            pids = processes(api, worker)
            load = Load(api.url, data, app, args.seconds)
            threads = [
                threading.Thread(target=load.run, args=(n,), daemon=True)
                for n in range(args.threads)
            ]
            began = time.monotonic()
            for thread in threads:
                thread.start()
            samples: list[tuple[float, dict[str, float]]] = []
            print(f"{'t s':>6} {'req/s':>8} {'errors':>7}  " + "  ".join(f"{n:>15}" for n in pids))
            last_total, last_t = 0, began
            while time.monotonic() < load.deadline:
                time.sleep(min(args.interval, max(0.0, load.deadline - time.monotonic())))
                if time.monotonic() >= load.deadline:  # the last sample: after the load
                    for thread in threads:
                        thread.join()
                now = time.monotonic()
                memory = {name: rss_mb(pid) for name, pid in pids.items()}
                samples.append((now - began, memory))
                total = sum(load.done.values()) + sum(load.failed.values())
                rate = (total - last_total) / (now - last_t)
                last_total, last_t = total, now
                print(
                    f"{now - began:6.0f} {rate:8.1f} {sum(load.failed.values()):7d}  "
                    + "  ".join(f"{memory[n]:12.1f} MB" for n in pids),
                    flush=True,
                )
            elapsed = time.monotonic() - began
        finally:
            worker.stop()
            api.stop()
            shutil.rmtree(data_dir, ignore_errors=True)
        with psycopg.connect(database_url) as conn:
            stored = conn.execute("SELECT count(*) FROM records").fetchone()
    print(f"\n{elapsed:.0f} s, {args.threads} client threads; records stored: {stored[0]:,}")
    for kind in WEIGHTS:
        done, failed = load.done[kind], load.failed[kind]
        rate = failed / (done + failed) if done + failed else 0.0
        times = load.seconds[kind] or [0.0]
        tenth = max(1, len(times) // 10)
        first, last = times[:tenth], times[-tenth:]
        print(
            f"  {kind:15s} {done / elapsed:8.1f} req/s   errors {failed} ({rate:.2%})   "
            f"mean {sum(first) / len(first) * 1000:7.1f} ms in the first tenth, "
            f"{sum(last) / len(last) * 1000:7.1f} ms in the last"
        )
    total_failed = sum(load.failed.values())
    total = sum(load.done.values()) + total_failed
    print(
        f"  {'all':15s} {total / elapsed:8.1f} req/s   errors {total_failed} "
        f"({total_failed / max(total, 1):.2%})"
    )
    warm = next((m for t, m in samples if t >= args.warm_up), samples[0][1])
    end = samples[-1][1]
    print(f"\nmemory (RSS) after {args.warm_up} s warm-up -> at the end:")
    for name in warm:
        growth = end[name] - warm[name]
        print(f"  {name:15s} {warm[name]:7.1f} MB -> {end[name]:7.1f} MB ({growth:+.1f} MB)")


if __name__ == "__main__":
    main()
