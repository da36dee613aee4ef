"""kill -9 of the SMTP process at every moment of a message's handling (contract 12):
a message is stored whole or not at all, no transaction waits for bytes that are not
there, and the sender's retry after the restart stores exactly one copy."""

from __future__ import annotations

import smtplib
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.files.conftest import CSV_HEADER, FileTenant, csv_rows, run_worker
from tests.inbox.conftest import message, send

pytestmark = pytest.mark.http

ATTACHMENTS = 20


def _mail(address: str, message_id: str) -> Any:
    body = (CSV_HEADER + csv_rows(2000)).encode()  # about 150 KB each
    files = [(f"part{n}.csv", "text/csv", body) for n in range(ATTACHMENTS)]
    return message(address, attachments=files, message_id=message_id)


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.15, 0.3, 0.6])
def test_a_kill_at_any_step_stores_a_message_whole_or_not_at_all(
    make_smtp: Any, mail_tenant: FileTenant, inbox: dict[str, Any], delay: float
) -> None:
    server = make_smtp()
    message_id = f"<{uuid.uuid4()}@example.com>"
    mail = _mail(inbox["address"], message_id)
    sent = threading.Event()

    def deliver() -> None:
        try:
            with smtplib.SMTP("127.0.0.1", server.port, timeout=30) as smtp:
                smtp.ehlo()
                smtp.mail("ann@example.com")
                smtp.rcpt(inbox["address"])
                smtp.putcmd("data")
                smtp.getreply()
                smtp.send(mail.as_bytes(policy=mail.policy.clone(linesep="\r\n")) + b"\r\n.\r\n")
                sent.set()
                smtp.getreply()
        except (OSError, smtplib.SMTPException):
            sent.set()

    sender = threading.Thread(target=deliver)
    sender.start()
    assert sent.wait(30)
    time.sleep(delay)
    server.process.kill()  # SIGKILL: nothing of the process runs after this
    server.process.wait()
    sender.join()

    run_worker(mail_tenant.client)
    made = mail_tenant.transactions(channel="email", page_size=100)["data"]
    assert len(made) in (0, ATTACHMENTS), [t["status"] for t in made]
    assert all(t["status"] == "completed" for t in made), [t["errors"] for t in made]

    # the sender retries against the restarted server: exactly one copy in the end
    again = make_smtp()
    assert send(again.port, mail) == {}
    run_worker(mail_tenant.client)
    made = mail_tenant.transactions(channel="email", page_size=100)["data"]
    assert len(made) == ATTACHMENTS
    assert all(t["status"] == "completed" for t in made)
    assert {t["records_accepted"] for t in made} == {2000}
    log = Path(again.log).read_text()
    assert "Traceback" not in log, log
