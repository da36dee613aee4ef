"""Hostile load on the SFTP and SMTP doors (issue 32), phases (c) and (d) of
`bench.hostile`, each against `headwater serve` with both channels on, on PostgreSQL:

(c) an SFTP descriptor flood: one company's accounts open every session, channel and
    upload handle the server allows and keep them open, while another company logs in
    over SFTP every second and uploads a file. Targets: the other company's login under
    2 s, its file `completed`, no 5xx. Anchor: the SFTP process's descriptor limit
    (the flood of the unbounded server reached it).
(d) 100 SMTP connections (10 addresses, 10 each) each sending 25 MB messages, while another
    company logs in over SFTP, uploads a file and sends one small message. Targets: the
    other company's login under 2 s and its file and message `completed`; the SMTP
    process's peak RSS under 300 MB; no 5xx. Anchor: a bare aiosmtpd sink receiving the
    same messages from the same senders (its peak RSS), measured A B A B.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import smtplib
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from email.message import EmailMessage
from email.policy import SMTP as SMTP_POLICY
from pathlib import Path
from typing import Any

import asyncssh
import httpx
from tests.http_server import free_port

from bench.common import OPERATOR, SECRET, BenchCompany, Sampling, kept_client, token

DOMAIN = "ingest.localhost"
CSV = b"order_id,amount\n" + b"".join(b"V-%d,%d.5\n" % (i, i) for i in range(20))


def listening_pid(port: int, seconds: float = 60) -> int:
    """The process that listens on `port` (loopback TCP), once one does."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return _listening_pid(port)
        except LookupError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _listening_pid(port: int) -> int:
    inodes = {
        line.split()[9]
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]
        if line.split()[1].endswith(f":{port:04X}") and line.split()[3] == "0A"
    }
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    return int(pid)
        except OSError:
            continue
    raise LookupError(f"nothing listens on {port}")


def status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def descriptor_limit(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    return 0


class Tenant(BenchCompany):
    """A company with a client, an `orders` dataset, a data credential, an SFTP account
    (or several) and an inbox."""

    def __init__(self, url: str, admin: dict[str, str], name: str, *, accounts: int = 1) -> None:
        super().__init__(url, admin, name)

        def post(path: str, body: dict[str, Any]) -> Any:
            answer = httpx.post(url + path, json=body, headers=admin, timeout=30)
            assert answer.status_code == 201, answer.text
            return answer.json()

        self.key = asyncssh.generate_private_key("ssh-ed25519")
        self.usernames = []
        for n in range(accounts):
            username = f"{name}-{n}-{uuid.uuid4().hex[:6]}"
            post(
                f"/admin/v1/companies/{self.company_id}/sftp_accounts",
                {"username": username, "public_keys": [self.key.export_public_key().decode()]},
            )
            self.usernames.append(username)
        inbox = post(
            f"/admin/v1/clients/{self.client_id}/datasets/orders/inboxes",
            {"allowed_senders": ["@bench.example"]},
        )
        self.address = str(inbox["address"])

    def connect(self, port: int, username: str | None = None) -> Any:
        return asyncssh.connect(
            "127.0.0.1",
            port,
            username=username or self.usernames[0],
            client_keys=[self.key],
            known_hosts=None,
            agent_path=None,
            login_timeout=60,
        )

    def transactions(self, channel: str) -> list[dict[str, Any]]:
        answer = kept_client().get(
            f"{self.url}/platform/v1/transactions",
            params={"channel": channel, "page_size": 100},
            headers=self.headers,
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        return list(answer.json()["data"])

    def wait_final(self, channel: str, count: int, seconds: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + seconds
        while True:
            found = self.transactions(channel)
            final = [t for t in found if t["status"] not in ("processing", "awaiting_upload")]
            if len(final) >= count or time.monotonic() > deadline:
                return final
            time.sleep(0.5)


def _login_loop(port: int, username: str, key: str, stop: Any, results: Any) -> None:
    """In a process of its own (the bench's sender threads hold its GIL): an SFTP login
    every second until `stop`; each login's seconds, or the error's name, to `results`."""

    async def once() -> float | str:
        started = time.perf_counter()
        try:
            async with (
                asyncssh.connect(
                    "127.0.0.1",
                    port,
                    username=username,
                    client_keys=[asyncssh.import_private_key(key)],
                    known_hosts=None,
                    agent_path=None,
                    login_timeout=60,
                ) as conn,
                conn.start_sftp_client() as sftp,
            ):
                await sftp.listdir("/")
            return time.perf_counter() - started
        except (OSError, asyncssh.Error) as exc:
            return type(exc).__name__

    while not stop.is_set():
        results.put(asyncio.run(once()))
        stop.wait(1.0)


class Victim:
    """The other company: an SFTP login every second (timed, from a process of its own),
    and the work it does."""

    def __init__(self, tenant: Tenant, sftp_port: int) -> None:
        self.tenant = tenant
        self.port = sftp_port
        self.logins: list[float] = []
        self.failures: Counter[str] = Counter()
        self.context = multiprocessing.get_context("spawn")
        self.stop = self.context.Event()

    def run(self) -> None:
        """Log in every second until `stop` is set (blocks: run it on a thread)."""
        results = self.context.Queue()
        key = self.tenant.key.export_private_key().decode()
        process = self.context.Process(
            target=_login_loop,
            args=(self.port, self.tenant.usernames[0], key, self.stop, results),
        )
        process.start()
        process.join()
        while not results.empty():
            outcome = results.get()
            if isinstance(outcome, float):
                self.logins.append(outcome)
            else:
                self.failures[outcome] += 1

    async def upload(self, name: str) -> None:
        async with (
            self.tenant.connect(self.port) as conn,
            conn.start_sftp_client() as sftp,
            sftp.open(f"/{self.tenant.client_id}/orders/{name}", "wb") as remote,
        ):
            await remote.write(CSV)

    def report(self) -> str:
        if not self.logins:
            return f"no login succeeded ({dict(self.failures)})"
        return (
            f"{len(self.logins)} logins, p50 {statistics.median(self.logins):.2f} s, "
            f"max {max(self.logins):.2f} s, failed {sum(self.failures.values())}"
        )


def admin_headers(url: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(url, OPERATOR, SECRET)}"}


def health_errors(url: str, stop: threading.Event, found: Counter[int]) -> None:
    """/healthz and /readyz every 200 ms: any 5xx is counted."""
    with httpx.Client(base_url=url, timeout=30) as http:
        while not stop.is_set():
            for path in ("/healthz", "/readyz"):
                try:
                    status = http.get(path).status_code
                except httpx.TransportError:
                    # a keep-alive connection the server closed as it idled (this
                    # thread starved of CPU past the keep-alive timeout): not an answer
                    found[0] += 1
                    continue
                if status >= 500:
                    found[status] += 1
            stop.wait(0.2)


# --- (c) ---------------------------------------------------------------------------------


async def _hold_handles(tenant: Tenant, port: int, held: list[Any], refused: Counter[str]) -> None:
    """Every session (10 an account), channel (4) and handle (64) the server allows."""

    logging_in = asyncio.Semaphore(4)  # under the 8 a single address may have waiting

    async def session(username: str, n: int) -> None:
        try:
            async with logging_in:
                conn = await tenant.connect(port, username)
        except (OSError, asyncssh.Error) as exc:
            refused[f"login {type(exc).__name__}"] += 1
            return
        held.append(conn)
        for c in range(8):
            try:
                sftp = await conn.start_sftp_client()
            except (OSError, asyncssh.Error):
                refused["channel"] += 1
                continue
            for h in range(100):
                try:
                    name = f"/{tenant.client_id}/orders/flood-{n}-{c}-{h}.csv.part"
                    held.append(await sftp.open(name, "wb"))
                except asyncssh.SFTPFailure:
                    refused["handle"] += 1
                    break

    await asyncio.gather(*(session(u, n) for u in tenant.usernames for n in range(12)))


def phase_c(url: str, sftp_port: int, seconds: int) -> None:
    admin = admin_headers(url)
    hostile = Tenant(url, admin, "flood", accounts=3)
    victim = Victim(Tenant(url, admin, "calm"), sftp_port)
    pid = listening_pid(sftp_port)
    before = descriptors(pid)
    errors: Counter[int] = Counter()
    stop = threading.Event()
    watchers = [
        threading.Thread(target=victim.run),
        threading.Thread(target=health_errors, args=(url, stop, errors)),
    ]
    for watcher in watchers:
        watcher.start()

    async def flood() -> tuple[int, Counter[str], int]:
        held: list[Any] = []
        refused: Counter[str] = Counter()
        await _hold_handles(hostile, sftp_port, held, refused)
        during = descriptors(pid)
        await victim.upload("calm.csv")
        await asyncio.sleep(seconds)
        for item in held:
            if isinstance(item, asyncssh.SSHClientConnection):
                item.close()
        return len(held), refused, during

    try:
        held, refused, during = asyncio.run(flood())
        done = victim.tenant.wait_final("sftp", 1, 60)
    finally:
        victim.stop.set()
        stop.set()
        for watcher in watchers:
            watcher.join()
    print("(c) SFTP descriptor flood: 3 accounts of one company, 12 sessions each tried")
    print(
        f"    held open: {held} sessions and handles; refused: {dict(refused)}; "
        f"SFTP process descriptors {before} -> {during} (limit {descriptor_limit(pid)})"
    )
    print(f"    other company: {victim.report()}; its file: {[t['status'] for t in done]}")
    print(f"    5xx on /healthz and /readyz: {sum(errors[c] for c in errors if c)}")


# --- (d) ---------------------------------------------------------------------------------


def big_message(to: str, megabytes: float) -> Callable[[], bytes]:
    """A message of about `megabytes` (an ignored PDF beside a small CSV), with a new
    Message-ID at each call."""
    mail = EmailMessage()
    mail["From"] = "hostile@bench.example"
    mail["To"] = to
    mail["Subject"] = "big"
    mail["Message-ID"] = "<MESSAGE-ID@bench.example>"
    mail.set_content("big\n")
    pdf = os.urandom(int(megabytes * 1024 * 1024 * 3 / 4))
    mail.add_attachment(pdf, maintype="application", subtype="pdf", filename="big.pdf")
    mail.add_attachment(CSV, maintype="text", subtype="csv", filename="small.csv")
    raw = mail.as_bytes(policy=SMTP_POLICY)  # CRLF: smtplib sends bytes as they are
    return lambda: raw.replace(b"MESSAGE-ID", uuid.uuid4().hex.encode(), 1)


def send_flood(
    port: int, to: str, make: Callable[[], bytes], *, senders: int, each: int
) -> Counter[str]:
    """`senders` connections (10 an address, from 127.0.0.1-10) each sending `each`
    messages; their answers by class."""
    answers: Counter[str] = Counter()
    lock = threading.Lock()

    def sender(n: int) -> None:
        source = (f"127.0.0.{1 + n // 10}", 0)
        for _ in range(each):
            try:
                with smtplib.SMTP("127.0.0.1", port, timeout=300, source_address=source) as smtp:
                    smtp.sendmail("hostile@bench.example", [to], make())
                outcome = "250"
            except smtplib.SMTPResponseException as exc:
                outcome = str(exc.smtp_code)
            except (OSError, smtplib.SMTPException) as exc:
                outcome = type(exc).__name__
            with lock:
                answers[outcome] += 1

    threads = [threading.Thread(target=sender, args=(n,)) for n in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def send_small(port: int, to: str, mail: EmailMessage) -> tuple[float, int]:
    """Send as a mail server does: a 4xx answer is tried again a second later. How long
    until it was accepted, and how many tries were answered 4xx."""
    calm = ("127.0.0.200", 0)  # an address of its own
    started, busy = time.monotonic(), 0
    while True:
        try:
            with smtplib.SMTP("127.0.0.1", port, timeout=120, source_address=calm) as smtp:
                smtp.sendmail("calm@bench.example", [to], mail.as_bytes(policy=SMTP_POLICY))
            return time.monotonic() - started, busy
        except (smtplib.SMTPConnectError, smtplib.SMTPResponseException) as exc:
            if not 400 <= exc.smtp_code < 500:
                raise
            busy += 1
            time.sleep(1)


class PeakRss(Sampling):
    """The peak RSS of a process, sampled every 50 ms (and its VmHWM at the end)."""

    def __init__(self, pid: int) -> None:
        super().__init__()
        self.pid = pid
        self.peak = 0.0

    def sample(self) -> None:
        while not self.stopped.is_set():
            try:
                self.peak = max(self.peak, status_mb(self.pid, "VmRSS"))
            except OSError:
                return
            self.stopped.wait(0.05)

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self.peak = max(self.peak, status_mb(self.pid, "VmHWM"))


_SINK = textwrap.dedent(
    """
    import asyncio, sys
    from aiosmtpd.controller import Controller
    class Sink:
        async def handle_DATA(self, server, session, envelope):
            return "250 OK"
    controller = Controller(Sink(), hostname="127.0.0.1", port=int(sys.argv[1]),
                            data_size_limit=26214400)
    controller.start()
    print("ready", flush=True)
    sys.stdin.read()
    """
)


def bare_sink_peak(
    to: str, make: Callable[[], bytes], senders: int, each: int
) -> tuple[float, Counter[str]]:
    """The anchor: a bare aiosmtpd sink taking the same messages from the same senders."""
    port = free_port()
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
        script.write(_SINK)
    sink = subprocess.Popen(
        [sys.executable, script.name, str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert sink.stdout is not None and sink.stdout.readline().strip() == "ready"
        with PeakRss(sink.pid) as rss:
            answers = send_flood(port, to, make, senders=senders, each=each)
        return rss.peak, answers
    finally:
        sink.kill()
        sink.wait()
        os.unlink(script.name)


def phase_d(
    url: str,
    sftp_port: int,
    smtp_port: int,
    *,
    senders: int,
    each: int,
    megabytes: float,
    rounds: int,
) -> None:
    admin = admin_headers(url)
    hostile = Tenant(url, admin, "bulk")
    victim = Victim(Tenant(url, admin, "quiet"), sftp_port)
    make = big_message(hostile.address, megabytes)
    size = len(make()) / 1e6
    pid = listening_pid(smtp_port)
    print(
        f"(d) SMTP flood: {senders} connections from {max(1, senders // 10)} addresses, "
        f"{each} message(s) of {size:.1f} MB each, {rounds} rounds A B"
    )
    for round_ in range(rounds):
        errors: Counter[int] = Counter()
        stop = threading.Event()
        watchers = [
            threading.Thread(target=victim.run),
            threading.Thread(target=health_errors, args=(url, stop, errors)),
        ]
        victim.stop.clear()
        victim.logins.clear()
        for watcher in watchers:
            watcher.start()
        small = EmailMessage()
        small["From"] = "calm@bench.example"
        small["To"] = victim.tenant.address
        small["Subject"] = "small"
        small.set_content("small\n")
        small.add_attachment(CSV, maintype="text", subtype="csv", filename="small.csv")
        started = time.monotonic()
        try:
            answers: Counter[str] = Counter()

            def hostile_flood(found: Counter[str] = answers) -> None:
                found.update(
                    send_flood(smtp_port, hostile.address, make, senders=senders, each=each)
                )

            with PeakRss(pid) as rss:
                flood = threading.Thread(target=hostile_flood)
                flood.start()
                time.sleep(2)
                asyncio.run(victim.upload(f"quiet-{round_}.csv"))
                mailed = send_small(smtp_port, victim.tenant.address, small)
                flood.join()
            took = time.monotonic() - started
            sftp_done = victim.tenant.wait_final("sftp", round_ + 1, 120)
            mail_done = victim.tenant.wait_final("email", round_ + 1, 120)
        finally:
            victim.stop.set()
            stop.set()
            for watcher in watchers:
                watcher.join()
        print(
            f"  A headwater smtp: peak RSS {rss.peak:.0f} MB; answers {dict(answers)} "
            f"in {took:.1f} s; 5xx on /healthz and /readyz {sum(errors[c] for c in errors if c)}, "
            f"idle keep-alive connections closed {errors[0]}"
        )
        print(
            f"    other company: its message accepted {mailed[0]:.1f} s after it was first "
            f"sent, after {mailed[1]} answers 421 (every connection of the server taken)"
        )
        print(
            f"    other company: {victim.report()}; its SFTP file "
            f"{[t['status'] for t in sftp_done]}, its message {[t['status'] for t in mail_done]}"
        )
        peak, bare = bare_sink_peak(hostile.address, make, senders, each)
        print(f"  B bare aiosmtpd sink: peak RSS {peak:.0f} MB; answers {dict(bare)}")
        print(f"  ratio A/B peak RSS: {rss.peak / peak:.3f}")
