"""The Python client end to end against a real `headwater serve` (PostgreSQL):

- push: 200,000 records of about 100 bytes from a generator, through `Client.push`
  (batches of 1000, one Idempotency-Key each): records/s;
- upload: a 100 MiB CSV through `Client.upload_file`, in a separate process whose peak
  resident memory (VmHWM) is read before and after the upload; then the wait for the
  transaction to complete.

    .venv/bin/python -m bench.client
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, bench_database, production_server, server_env

sys.path.insert(0, str(ROOT / "clients" / "python" / "tests"))

from tests.factories import OPERATOR_ID, OPERATOR_SECRET

from conftest import Tenant, upload_in_own_process, write_wide_csv

PUSH_RECORDS = 200_000
UPLOAD_ROWS = 104_000  # about 1 KB each: 100 MiB


def bench_push(tenant: Tenant) -> None:
    records = ({"order_id": f"P-{n}", "amount": n + 0.5} for n in range(PUSH_RECORDS))
    with tenant.client() as hw:
        hw.token()
        start = time.perf_counter()
        result = hw.push(tenant.client_id, tenant.dataset_id, records)
        elapsed = time.perf_counter() - start
    assert result.records_accepted == PUSH_RECORDS
    print(
        f"push   {PUSH_RECORDS:,} records in {len(result.batches)} batches: {elapsed:.1f} s, "
        f"{PUSH_RECORDS / elapsed:,.0f} records/s"
    )


def bench_upload(tenant: Tenant, folder: Path) -> None:
    path = folder / "orders.csv"
    size = write_wide_csv(path, UPLOAD_ROWS)
    started = time.perf_counter()
    report = upload_in_own_process(tenant, path)
    uploaded = time.perf_counter() - started
    with tenant.client() as hw:
        transaction = hw.wait_for_transaction(report["transaction_id"], timeout=1800)
    processed = time.perf_counter() - started
    before, after = report["before_kib"] / 1024, report["after_kib"] / 1024
    print(
        f"upload {size / 2**20:.1f} MiB: PUT done after {uploaded:.1f} s (process start "
        f"included), {transaction.status} with {transaction.records_accepted:,} records after "
        f"{processed:.1f} s"
    )
    print(
        f"       client peak RSS {before:.1f} MiB before the upload, {after:.1f} MiB after "
        f"(+{after - before:.1f} MiB for a {size / 2**20:.0f} MiB file)"
    )


def main() -> None:
    with bench_database("hw_bench_client") as database, tempfile.TemporaryDirectory() as folder:
        # the tenant set-up of the client tests signs in as the tests' operator
        env = server_env(
            database,
            HEADWATER_BOOTSTRAP_CLIENT_ID=OPERATOR_ID,
            HEADWATER_BOOTSTRAP_CLIENT_SECRET=OPERATOR_SECRET,
        )
        with production_server(env, workers=2) as url:
            bench_push(Tenant(url))
            bench_upload(Tenant(url), Path(folder))


if __name__ == "__main__":
    main()
