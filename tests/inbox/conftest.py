"""A real `headwater smtp` process on a loopback port, inboxes, and an aiosmtpd sink on
loopback standing in for the relay that replies go through."""

from __future__ import annotations

import smtplib
import time
from collections.abc import Callable, Iterator
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from starlette.testclient import TestClient

from tests.files.conftest import FileTenant
from tests.http_server import Listener, free_port, start_listener
from tests.sftp.conftest import settings_env

DOMAIN = "ingest.localhost"


class Sink:
    """The relay: keeps every message it is given."""

    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        parsed = BytesParser(policy=policy.default).parsebytes(envelope.content)
        self.messages.append(parsed)  # type: ignore[arg-type]
        return "250 OK"

    def wait_for(self, count: int, seconds: float = 20) -> list[EmailMessage]:
        deadline = time.monotonic() + seconds
        while len(self.messages) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.messages


@pytest.fixture
def relay() -> Iterator[tuple[Sink, int]]:
    sink = Sink()
    port = free_port()
    controller = Controller(sink, hostname="127.0.0.1", port=port)
    controller.start()
    yield sink, port
    controller.stop()


def start_smtp(base_settings: dict[str, Any], tmp: Path, **extra: Any) -> Listener:
    return start_listener("smtp", settings_env(base_settings, **extra), tmp)


@pytest.fixture(scope="module")
def smtp_server(
    base_settings: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Listener]:
    server = start_smtp(base_settings, tmp_path_factory.mktemp("smtp"))
    yield server
    server.stop()


@pytest.fixture
def make_smtp(base_settings: dict[str, Any], tmp_path: Path) -> Iterator[Callable[..., Listener]]:
    started: list[Listener] = []

    def make(**extra: Any) -> Listener:
        server = start_smtp(base_settings, tmp_path, **extra)
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture
def mail_tenant(client: TestClient, admin: dict[str, str], company: str) -> FileTenant:
    return FileTenant(client, admin, company)


def create_inbox(
    tenant: FileTenant, senders: list[str] | None = None, *, status: int = 201
) -> dict[str, Any]:
    answer = tenant.client.post(
        f"/admin/v1/clients/{tenant.client_id}/datasets/orders/inboxes",
        json={"allowed_senders": senders or ["ann@example.com", "@example.org"]},
        headers=tenant.admin,
    )
    assert answer.status_code == status, answer.text
    return answer.json()  # type: ignore[no-any-return]


@pytest.fixture
def inbox(mail_tenant: FileTenant) -> dict[str, Any]:
    return create_inbox(mail_tenant)


def message(
    to: str,
    *,
    sender: str = "ann@example.com",
    attachments: list[tuple[str, str, bytes]] = (),  # type: ignore[assignment]
    subject: str = "Orders",
    message_id: str | None = None,
) -> EmailMessage:
    mail = EmailMessage()
    mail["From"] = sender
    mail["To"] = to
    mail["Subject"] = subject
    if message_id:
        mail["Message-ID"] = message_id
    mail.set_content("Here are the orders.\n")
    for name, content_type, data in attachments:
        maintype, subtype = content_type.split("/")
        mail.add_attachment(data, maintype=maintype, subtype=subtype, filename=name)
    return mail


def send(port: int, mail: EmailMessage, *, sender: str = "ann@example.com") -> Any:
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as smtp:
        return smtp.send_message(mail, from_addr=sender)
