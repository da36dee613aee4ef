"""Email ingestion end to end (issue 21's benchmark).

PostgreSQL and the embedded store; `headwater serve` (API and file workers) and
`headwater smtp` as separate processes, as in production:

  (1) CLIENTS concurrent SMTP clients (smtplib, one connection each) send MESSAGES
      messages in all, each with one CSV attachment of ROWS rows
      → messages/s accepted, p50/p99 of DATA (end of data to the 250), rows/s to
        every transaction `completed`
  (2) one message with a BIG_MB attachment → its DATA time, rows/s to `completed`

and the SMTP process's peak RSS (VmHWM). The size limit is raised for (2): base64 makes
a 20 MB attachment a 27 MB message, over the 25 MiB default. Targets: >= 50 messages/s
accepted, p99 DATA <= 500 ms, peak RSS <= 300 MB.

    uv run python -m bench.email [--clients 10 --messages 2000 --rows 1000 --big-mb 20]
"""

from __future__ import annotations

import argparse
import os
import smtplib
import statistics
import tempfile
import threading
import time
from email.message import EmailMessage
from pathlib import Path

import httpx
from tests.http_server import start_listener

from bench.common import (
    OPERATOR,
    SECRET,
    bench_database,
    data_tenant,
    production_server,
    server_env,
    token,
)
from bench.sftp import HEADER, SCHEMA, finished_after, peak_rss_mb, rows, wait_completed


def mail(to: str, name: str, data: bytes, n: int) -> bytes:
    message = EmailMessage()
    message["From"] = "bench@example.com"
    message["To"] = to
    message["Subject"] = f"orders {n}"
    message["Message-ID"] = f"<bench-{n}@example.com>"
    message.set_content("orders attached")
    message.add_attachment(data, maintype="text", subtype="csv", filename=name)
    return message.as_bytes(policy=message.policy.clone(linesep="\r\n"))


def send_all(port: int, to: str, bodies: list[bytes], timings: list[float]) -> None:
    with smtplib.SMTP("127.0.0.1", port, timeout=120) as smtp:
        smtp.ehlo()
        for body in bodies:
            smtp.mail("bench@example.com")
            code, _ = smtp.rcpt(to)
            assert code == 250, code
            started = time.perf_counter()
            code, reply = smtp.data(body)
            timings.append(time.perf_counter() - started)
            assert code == 250, reply


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--big-mb", type=int, default=20)
    parser.add_argument("--file-workers", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()

    with (
        bench_database("headwater_bench_email") as database_url,
        tempfile.TemporaryDirectory() as tmp,
    ):
        env = server_env(
            database_url,
            HEADWATER_FILE_WORKERS=str(args.file_workers),
            HEADWATER_FILE_POLL_SECONDS="0.2",
            # base64 makes a 20 MB attachment a 27 MB message: over the 25 MiB default
            HEADWATER_MAX_EMAIL_BYTES=str(max(26214400, 2 * args.big_mb * 1024 * 1024)),
        )
        data_dir = str(Path(tmp) / "data")
        with production_server(env, workers=1, data_dir=data_dir) as url:
            headers, _ = data_tenant(url, dataset_id="orders", schema=SCHEMA)
            admin = {"Authorization": f"Bearer {token(url, OPERATOR, SECRET)}"}
            created = httpx.post(
                f"{url}/admin/v1/clients/bench-crm/datasets/orders/inboxes",
                json={"allowed_senders": ["@example.com"]},
                headers=admin,
                timeout=30,
            )
            assert created.status_code == 201, created.text
            address = created.json()["address"]
            smtp = start_listener(
                "smtp",
                {"HEADWATER_DATA_DIR": data_dir, "HEADWATER_LOG_LEVEL": "WARNING", **env},
                Path(tmp),
            )
            try:
                attachment = HEADER + rows(args.rows)
                bodies = [mail(address, f"o{n}.csv", attachment, n) for n in range(args.messages)]
                shares = [bodies[i :: args.clients] for i in range(args.clients)]
                timings: list[float] = []
                print(
                    f"(1) {args.clients} clients, {args.messages} messages, one "
                    f"{len(attachment) / 1e3:.0f} kB CSV of {args.rows:,} rows each"
                )
                started, wall = time.perf_counter(), time.time()
                threads = [
                    threading.Thread(target=send_all, args=(smtp.port, address, share, timings))
                    for share in shares
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                accepted = time.perf_counter() - started
                finals = wait_completed(url, headers, args.messages, timeout=3600, channel="email")
                elapsed = finished_after(finals, wall)
                bad = [
                    t
                    for t in finals
                    if t["status"] != "completed" or t["records_accepted"] != args.rows
                ]
                cuts = statistics.quantiles(timings, n=100)
                p50, p99 = cuts[49] * 1e3, cuts[98] * 1e3
                rate = args.messages * args.rows / elapsed
                print(
                    f"    accepted in {accepted:.1f} s: {args.messages / accepted:.1f} messages/s "
                    f"(target >= 50); DATA p50 {p50:.0f} ms, p99 {p99:.0f} ms (target <= 500); "
                    f"all completed after {elapsed:.1f} s: {rate:,.0f} rows/s; "
                    f"not as expected: {len(bad)}"
                )
                big_rows = 0
                chunks = []
                size = 0
                while size < args.big_mb * 1024 * 1024:
                    chunk = rows(50_000, big_rows)
                    chunks.append(chunk)
                    size += len(chunk)
                    big_rows += 50_000
                big = mail(address, "big.csv", HEADER + b"".join(chunks), 10**9)
                print(f"(2) one message with a {size / 1e6:.0f} MB CSV of {big_rows:,} rows")
                one: list[float] = []
                started, wall = time.perf_counter(), time.time()
                send_all(smtp.port, address, [big], one)
                finals = wait_completed(
                    url, headers, args.messages + 1, timeout=3600, channel="email"
                )
                [done] = [t for t in finals if t["file_name"] == "big.csv"]
                elapsed = finished_after([done], wall)
                print(
                    f"    DATA {one[0] * 1e3:.0f} ms; {done['status']} with "
                    f"{done['records_accepted']:,} rows after {elapsed:.1f} s "
                    f"({big_rows / elapsed:,.0f} rows/s end to end)"
                )
                rss = peak_rss_mb(smtp.process.pid)
                print(f"SMTP process peak RSS {rss:.0f} MB (target <= 300 MB)")
            finally:
                smtp.stop()


if __name__ == "__main__":
    main()
