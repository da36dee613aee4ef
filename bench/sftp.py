"""SFTP ingestion end to end (issue 20's benchmark).

PostgreSQL and the embedded store; `headwater serve` (API and file workers) and
`headwater sftp` as separate processes, as in production:

  (1) SESSIONS concurrent sessions each upload FILES CSV files of ROWS rows
      → files/s and rows/s from the first byte sent to the last transaction `completed`
  (2) one large CSV (BIG_MB) → upload bytes/s, rows/s to `completed`
  (3) a CSV of COMPARE_MB to OpenSSH's sshd (internal-sftp, writing to disk; started
      here on loopback with a config and host key of its own; Debian's openssh-server,
      installed when missing) and to ours, with OpenSSH's `sftp` and with asyncssh as
      the client, sshd (A) and ours (B), A B A B → upload bytes/s and our ratio to sshd's
      with each client (ours waits for each upload's transaction to complete before
      the next upload, so that none is measured while the file workers run)

and the SFTP process's peak RSS (VmHWM). Targets: upload bytes/s >= 0.8 of sshd's with
each client; peak RSS <= 300 MB whatever the file size; every transaction `completed`
with its row count.

    uv run python -m bench.sftp [--sessions 20 --files 50 --rows 10000 --big-mb 1024
                                 --compare-mb 200]
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncssh
import httpx
from tests.http_server import free_port, process_env

from bench.common import (
    OPERATOR,
    SECRET,
    bench_database,
    data_tenant,
    ensure_tool,
    kept_client,
    production_server,
    server_env,
    token,
    wait_listening,
)

SCHEMA = {
    "$schema": "http://json-schema.org/draft-06/schema#",
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "minLength": 1},
        "email": {"type": "string"},
        "amount": {"type": "number", "minimum": 0},
        "quantity": {"type": "integer"},
        "paid": {"type": "boolean"},
    },
    "required": ["order_id", "amount"],
    "additionalProperties": False,
}
HEADER = b"order_id,email,amount,quantity,paid\n"


def rows(count: int, start: int = 0) -> bytes:
    return b"".join(
        b"O-%d,c%d@example.com,%d.25,%d,true\n" % (i, i, i % 1000, i % 7)
        for i in range(start, start + count)
    )


def big_file(path: Path, megabytes: int) -> int:
    """A CSV of about `megabytes` MiB, written in pieces; its row count."""
    count = 0
    with path.open("wb") as out:
        out.write(HEADER)
        while out.tell() < megabytes * 1024 * 1024:
            out.write(rows(100_000, count))
            count += 100_000
    return count


def start_sftp(env: dict[str, str], data_dir: str) -> tuple[subprocess.Popen[bytes], int]:
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    ready = Path(data_dir) / "sftp-ready"
    log = Path(data_dir) / "sftp.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "headwater.cli", "sftp", "--port", "0", "--ready-file", ready],
            env=process_env(
                {"HEADWATER_DATA_DIR": data_dir, "HEADWATER_LOG_LEVEL": "WARNING", **env}
            ),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while not (ready.exists() and ready.read_text().strip()):
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("sftp did not start:\n" + log.read_text())
        time.sleep(0.05)
    return process, int(ready.read_text())


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def upload_many(
    port: int, user: str, key: asyncssh.SSHKey, *, sessions: int, files: int, body: bytes
) -> None:
    # the server lets 8 connections of an address wait to log in at once (contract 11,
    # like OpenSSH's MaxStartups): the sessions log in 4 at a time, then upload together
    logins = asyncio.Semaphore(4)

    async def one(session: int) -> None:
        async with logins:
            conn = await asyncssh.connect(
                "127.0.0.1",
                port,
                username=user,
                client_keys=[key],
                known_hosts=None,
                agent_path=None,
            )
        async with conn, conn.start_sftp_client() as sftp:
            for n in range(files):
                async with sftp.open(f"/bench-crm/orders/s{session}-{n}.csv", "wb") as remote:
                    await remote.write(body)

    await asyncio.gather(*(one(s) for s in range(sessions)))


async def upload_file(port: int, user: str, key: asyncssh.SSHKey, path: Path, target: str) -> float:
    """Seconds to upload `path` (asyncssh's parallel put, as a client would)."""
    started = time.perf_counter()
    async with (
        asyncssh.connect(
            "127.0.0.1",
            port,
            username=user,
            client_keys=[key],
            known_hosts=None,
            agent_path=None,
        ) as conn,
        conn.start_sftp_client() as sftp,
    ):
        await sftp.put(str(path), target)
    return time.perf_counter() - started


SSHD_CONFIG = """\
ListenAddress 127.0.0.1
Port {port}
HostKey {dir}/host_key
PidFile {dir}/sshd.pid
AuthorizedKeysFile {dir}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
LogLevel QUIET
"""


def start_sshd(folder: Path, key: asyncssh.SSHKey) -> tuple[subprocess.Popen[bytes], int]:
    """OpenSSH's sshd on a free loopback port, with a host key and config of its own in
    `folder`, letting `key` log in as the current user: the process and its port."""
    sshd = ensure_tool("/usr/sbin/sshd", "openssh-server")
    Path("/run/sshd").mkdir(exist_ok=True)  # its privilege separation directory
    port = free_port()
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    (folder / "host_key").write_bytes(host_key.export_private_key())
    (folder / "host_key").chmod(0o600)
    (folder / "authorized_keys").write_bytes(key.export_public_key())
    (folder / "sshd_config").write_text(SSHD_CONFIG.format(port=port, dir=folder))
    process = subprocess.Popen([sshd, "-D", "-e", "-f", str(folder / "sshd_config")])
    wait_listening(port, lambda: process.poll() is None)
    return process, port


def openssh_put(port: int, user: str, key_file: Path, path: Path, target: str) -> float:
    """Seconds for OpenSSH's `sftp` to upload `path` (its default buffers and requests in
    flight), logging in and out included, as `upload_file` does."""
    started = time.perf_counter()
    subprocess.run(
        [
            ensure_tool("sftp", "openssh-client"),
            "-q",
            "-b",
            "-",
            "-i",
            str(key_file),
            "-P",
            str(port),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "BatchMode=yes",
            f"{user}@127.0.0.1",
        ],
        input=f'put "{path}" "{target}"\n'.encode(),
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started


def finished_after(finals: list[Any], started: float) -> float:
    """Seconds from `started` (a `time.time()`) to the last of `finals` ending, by the
    service's own `completed_at` (same clock): not rounded up to `wait_completed`'s
    polling."""
    ended = max(datetime.fromisoformat(t["completed_at"]).timestamp() for t in finals)
    return ended - started


def wait_completed(
    url: str, headers: dict[str, str], expected: int, timeout: float, *, channel: str = "sftp"
) -> list[Any]:
    """The channel's transactions once `expected` of them are final."""
    deadline = time.monotonic() + timeout
    while True:
        done: list[Any] = []
        page = 0  # pages count from 0
        while True:
            reply = kept_client().get(
                url + "/platform/v1/transactions",
                params={"channel": channel, "page": page, "page_size": 100},
                headers=headers,
                timeout=60,
            )
            answer = reply.json()
            done += [t for t in answer["data"] if t["status"] not in ("processing",)]
            if page + 1 >= answer["total_pages"]:
                break
            page += 1
        if len(done) >= expected:
            return done
        if time.monotonic() > deadline:
            raise SystemExit(f"only {len(done)} of {expected} transactions final in {timeout} s")
        time.sleep(1)


def compare(
    args: argparse.Namespace,
    tmp: Path,
    key: asyncssh.SSHKey,
    port: int,
    url: str,
    headers: dict[str, str],
    *,
    done: int,
) -> None:
    """(3): sshd (A) and ours (B), A B A B, with each client; `done`: transactions
    completed so far."""
    path = tmp / "compare.csv"
    compare_rows = big_file(path, args.compare_mb)
    size = path.stat().st_size
    folder = tmp / "sshd"
    folder.mkdir()
    key_file = folder / "client_key"
    key_file.write_bytes(key.export_private_key())
    key_file.chmod(0o600)
    user = getpass.getuser()
    landing = tmp / "sshd-files"
    landing.mkdir()
    sshd, sshd_port = start_sshd(folder, key)
    print(f"(3) one CSV of {size / 1e6:.0f} MB, {compare_rows:,} rows: sshd (A), ours (B)")
    rates: dict[tuple[str, str], list[float]] = {}
    try:
        for trial in (1, 2):
            for client in ("OpenSSH sftp", "asyncssh"):
                for server in ("sshd", "ours"):
                    if server == "sshd":
                        port_and_user, target = (sshd_port, user), str(landing / f"{trial}.csv")
                    else:
                        port_and_user = (port, "bench")
                        target = f"/bench-crm/orders/c{trial}-{client[0]}.csv"
                    seconds = (
                        openssh_put(*port_and_user, key_file, path, target)
                        if client == "OpenSSH sftp"
                        else asyncio.run(upload_file(*port_and_user, key, path, target))
                    )
                    rates.setdefault((client, server), []).append(size / seconds)
                    if server == "sshd":
                        Path(target).unlink()
                    else:
                        done += 1
                        wait_completed(url, headers, done, timeout=3600)
                    print(
                        f"    trial {trial}, {client} to {server}: {seconds:.2f} s = "
                        f"{size / seconds / 1e6:.1f} MB/s",
                        flush=True,
                    )
    finally:
        sshd.terminate()
        sshd.wait()
    for client in ("OpenSSH sftp", "asyncssh"):
        ours = statistics.median(rates[client, "ours"])
        bare = statistics.median(rates[client, "sshd"])
        print(
            f"    {client}: ours {ours / 1e6:.1f} MB/s = {ours / bare:.2f} of sshd's "
            f"{bare / 1e6:.1f} MB/s (target >= 0.8: {'met' if ours / bare >= 0.8 else 'NOT met'})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--big-mb", type=int, default=1024)
    parser.add_argument("--compare-mb", type=int, default=200)
    parser.add_argument("--file-workers", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()

    with (
        bench_database("headwater_bench_sftp") as database_url,
        tempfile.TemporaryDirectory() as tmp,
    ):
        env = server_env(
            database_url,
            HEADWATER_FILE_WORKERS=str(args.file_workers),
            HEADWATER_FILE_POLL_SECONDS="0.2",
            HEADWATER_MAX_FILE_BYTES=str(4 * 1024**3),
            HEADWATER_SFTP_MAX_SESSIONS=str(max(10, 2 * args.sessions)),
        )
        data_dir = str(Path(tmp) / "data")
        with production_server(env, workers=1, data_dir=data_dir) as url:
            headers, company = data_tenant(url, dataset_id="orders", schema=SCHEMA)
            key = asyncssh.generate_private_key("ssh-ed25519")
            admin = {"Authorization": f"Bearer {token(url, OPERATOR, SECRET)}"}
            created = httpx.post(
                f"{url}/admin/v1/companies/{company}/sftp_accounts",
                json={"username": "bench", "public_keys": [key.export_public_key().decode()]},
                headers=admin,
                timeout=30,
            )
            assert created.status_code == 201, created.text
            # the SFTP process shares the API's data directory, so its store
            sftp_process, port = start_sftp(env, data_dir)
            try:
                body = HEADER + rows(args.rows)
                total = args.sessions * args.files
                print(
                    f"(1) {args.sessions} sessions x {args.files} files x {args.rows:,} rows "
                    f"({len(body) / 1e6:.1f} MB a file)"
                )
                started, wall = time.perf_counter(), time.time()
                asyncio.run(
                    upload_many(
                        port, "bench", key, sessions=args.sessions, files=args.files, body=body
                    )
                )
                uploaded = time.perf_counter() - started
                finals = wait_completed(url, headers, total, timeout=3600)
                elapsed = finished_after(finals, wall)
                bad = [
                    t
                    for t in finals
                    if t["status"] != "completed" or t["records_accepted"] != args.rows
                ]
                rate = total * len(body) / uploaded / 1e6
                print(
                    f"    uploads {uploaded:.1f} s ({rate:.1f} MB/s); "
                    f"all completed after {elapsed:.1f} s: {total / elapsed:.1f} files/s, "
                    f"{total * args.rows / elapsed:,.0f} rows/s; not as expected: {len(bad)}"
                )

                path = Path(tmp) / "big.csv"
                big_rows = big_file(path, args.big_mb)
                size = path.stat().st_size
                print(f"(2) one CSV of {size / 1e6:.0f} MB, {big_rows:,} rows")
                started, wall = time.perf_counter(), time.time()
                seconds = asyncio.run(
                    upload_file(port, "bench", key, path, "/bench-crm/orders/big.csv")
                )
                finals = wait_completed(url, headers, total + 1, timeout=7200)
                [big] = [t for t in finals if t["file_name"] == "big.csv"]
                elapsed = finished_after([big], wall)
                ours = size / seconds
                print(
                    f"    upload {seconds:.1f} s ({ours / 1e6:.1f} MB/s); {big['status']} with "
                    f"{big['records_accepted']:,} rows after {elapsed:.1f} s "
                    f"({big_rows / elapsed:,.0f} rows/s end to end)"
                )
                compare(args, Path(tmp), key, port, url, headers, done=total + 1)
                rss = peak_rss_mb(sftp_process.pid)
            finally:
                sftp_process.terminate()
                sftp_process.wait()
            print(
                f"SFTP process peak RSS {rss:.0f} MB (target <= 300 MB: "
                f"{'met' if rss <= 300 else 'NOT met'})"
            )


if __name__ == "__main__":
    main()
