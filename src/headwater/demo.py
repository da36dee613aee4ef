"""Demo data for `headwater demo`: a company, an ingestion client, two credentials,
workflow configuration imported from demo_workflows.yaml, and some traffic for the
console to show; and a webhook receiver on loopback, so that webhooks can be tried
without a server of one's own."""

# ruff: noqa: E501 - the printed curl lines are meant to be copied whole

from __future__ import annotations

import sys
import threading
import uuid
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import select
from sqlalchemy.orm import Session

from headwater.config import Settings
from headwater.db import Database
from headwater.identity import service as identity
from headwater.identity.models import Company, IngestionClient
from headwater.identity.secrets import new_secret
from headwater.identity.tokens import COMPANY_SCOPES
from headwater.inbox import service as inboxes
from headwater.ingestion import datasets
from headwater.ingestion.models import Dataset, Transaction
from headwater.ingestion.schemas import DatasetOptions
from headwater.ingestion.service import Limits, push
from headwater.kit.actor import Actor
from headwater.sftp import service as sftp
from headwater.workflows import importer
from headwater.workflows.models import WorkflowCategory

DEMO_COMPANY = "Demo Company"
DEMO_CLIENT = "demo-crm"
DEMO_CREDENTIAL = "demo-client"
DEMO_OPERATOR = "demo-operator"
DEMO_DATASET = "orders"
DEMO_SFTP_USER = "demo"
DEMO_SENDER = "@example.com"
DEMO_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-06/schema#",
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "minLength": 1},
        "customer-email": {"type": "string", "format": "email"},
        "amount": {"type": "number", "minimum": 0},
        "quantity": {"type": "integer", "minimum": 1, "default": 1},
        "placed_at": {"type": "string", "format": "date-time"},
    },
    "required": ["order_id", "amount"],
    "additionalProperties": False,
    "examples": [{"order_id": "A-1", "amount": 12.5, "placed_at": "2026-11-22T09:30:00.000Z"}],
}


@dataclass(frozen=True)
class DemoData:
    company_id: uuid.UUID
    ingestion_client: str
    client_id: str
    client_secret: str
    operator_id: str
    operator_secret: str
    sftp_port: int = 0
    sftp_key: Path | None = None
    inbox_address: str = ""
    smtp_port: int = 0
    receiver_url: str = ""
    received: Path | None = None

    def with_sftp(self, *, port: int, key_file: Path) -> DemoData:
        return replace(self, sftp_port=port, sftp_key=key_file)

    def with_smtp(self, *, port: int, domain: str) -> DemoData:
        return replace(self, smtp_port=port, inbox_address=f"{self.inbox_local_part}@{domain}")

    inbox_local_part: str = ""


DEMO_WORKFLOWS = Path(__file__).with_name("demo_workflows.yaml")


@dataclass(frozen=True)
class DemoKey:
    path: Path
    public: str


def sftp_key(data_dir: Path) -> DemoKey:
    """The demo SFTP account's key pair, made once under `<data_dir>/sftp/` (0600)."""
    import asyncssh

    path = data_dir / "sftp" / "demo_key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        key = asyncssh.generate_private_key("ssh-ed25519", comment="headwater-demo")
        path.touch(mode=0o600)
        path.write_bytes(key.export_private_key("openssh"))
    path.chmod(0o600)
    public = asyncssh.read_private_key(str(path)).export_public_key("openssh").decode().strip()
    return DemoKey(path=path, public=public)


def seed(session: Session, *, sftp_public_key: str | None = None) -> DemoData:
    """Create the demo tenant once; give both demo credentials a fresh secret every time."""
    company = session.scalars(select(Company).where(Company.name == DEMO_COMPANY)).first()
    if company is None:
        company = identity.create_company(session, name=DEMO_COMPANY)
    if session.get(IngestionClient, DEMO_CLIENT) is None:
        identity.create_client(
            session, company_id=company.id, client_id=DEMO_CLIENT, name="Demo CRM export"
        )
    secret, operator_secret = new_secret(), new_secret()
    credential = identity.ensure_credential(
        session,
        client_id=DEMO_CREDENTIAL,
        client_secret=secret,
        name="demo",
        company_id=company.id,
        scopes=sorted(COMPANY_SCOPES),
        client_ids=[DEMO_CLIENT],
    )
    has_workflows = session.scalar(
        select(WorkflowCategory.id).where(WorkflowCategory.company_id == company.id).limit(1)
    )
    if has_workflows is None:
        actor = Actor(company_id=company.id, author_id=credential.author_id)
        importer.load_file(session, actor=actor, path=DEMO_WORKFLOWS)
    operator = identity.ensure_credential(
        session,
        client_id=DEMO_OPERATOR,
        client_secret=operator_secret,
        name="demo operator",
        company_id=None,
        scopes=["admin"],
    )
    if session.scalar(select(Dataset.id).where(Dataset.client_id == DEMO_CLIENT).limit(1)) is None:
        datasets.register(
            session,
            author_id=operator.author_id,
            client_id=DEMO_CLIENT,
            dataset_id=DEMO_DATASET,
            schema=DEMO_SCHEMA,
            options=DatasetOptions(coerce_types=True),
            max_schema_bytes=len(orjson.dumps(DEMO_SCHEMA)),
        )
    if (
        session.scalar(
            select(Dataset.id)
            .where(Dataset.client_id == DEMO_CLIENT, Dataset.dataset_id == TRAFFIC_DATASET)
            .limit(1)
        )
        is None
    ):
        datasets.register(
            session,
            author_id=operator.author_id,
            client_id=DEMO_CLIENT,
            dataset_id=TRAFFIC_DATASET,
            schema=TRAFFIC_SCHEMA,
            options=DatasetOptions(),
            max_schema_bytes=len(orjson.dumps(TRAFFIC_SCHEMA)),
        )
    inbox = inboxes.ensure_inbox(
        session, client_id=DEMO_CLIENT, dataset_id=DEMO_DATASET, allowed_senders=[DEMO_SENDER]
    )
    if sftp_public_key is not None:
        sftp.ensure_account(
            session, company_id=company.id, username=DEMO_SFTP_USER, public_key=sftp_public_key
        )
    return DemoData(
        company_id=company.id,
        ingestion_client=DEMO_CLIENT,
        client_id=DEMO_CREDENTIAL,
        client_secret=secret,
        operator_id=DEMO_OPERATOR,
        operator_secret=operator_secret,
        inbox_local_part=inbox.local_part,
    )


TRAFFIC_DATASET = "shipments"
TRAFFIC_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-06/schema#",
    "type": "object",
    "properties": {
        "shipment_id": {"type": "string", "minLength": 1},
        "carrier": {"enum": ["dhl", "ups", "postnl"]},
        "weight_kg": {"type": "number", "minimum": 0},
    },
    "required": ["shipment_id", "carrier", "weight_kg"],
}
TRAFFIC_PUSHES = 36


def traffic(db: Database, settings: Settings) -> int:
    """On a first start, pushes to the demo's `shipments` dataset, one in six of them
    rejected, so that the console's overview and lists show something before the tour
    (the tour's `orders` are left alone). Through the push service, as the API pushes;
    how many pushes it made (0 once there are some)."""
    with db.read_session() as session:
        caller = identity.active_principal(session, DEMO_CREDENTIAL)
        dataset = datasets.find(session, client_id=DEMO_CLIENT, dataset_id=TRAFFIC_DATASET)
        pushed = session.scalar(
            select(Transaction.id).where(Transaction.dataset_pk == dataset.id).limit(1)
        )
    if caller is None or pushed is not None:
        return 0
    carriers = ["dhl", "ups", "postnl"]
    for n in range(TRAFFIC_PUSHES):
        records: list[dict[str, Any]] = [
            {"shipment_id": f"S-{n}-{i}", "carrier": carriers[(n + i) % 3], "weight_kg": 1 + i}
            for i in range(1 + n % 5)
        ]
        if n % 6 == 5:
            records.append({"shipment_id": f"S-{n}-x", "carrier": "pigeon", "weight_kg": -1})
        body = orjson.dumps(
            {"client_id": DEMO_CLIENT, "dataset_id": TRAFFIC_DATASET, "data": records}
        )
        push(db, caller, body=body, idempotency_key=None, limits=Limits.of(settings))
    return TRAFFIC_PUSHES


class _Receiver(BaseHTTPRequestHandler):
    """Every POST: one line of `received` (its `webhook-*` headers and body), then 204."""

    received: Path

    def do_POST(self) -> None:
        length = min(int(self.headers.get("content-length") or 0), 1 << 20)
        body = self.rfile.read(length).decode("utf-8", "replace")
        headers = {
            k.lower(): v for k, v in self.headers.items() if k.lower().startswith("webhook-")
        }
        line = orjson.dumps({"path": self.path, "headers": headers, "body": body})
        with self.received.open("ab") as out:
            out.write(line + b"\n")
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the file is the log
        return


def start_receiver(data_dir: Path) -> tuple[str, Path]:
    """A webhook receiver on a free loopback port, in a thread of this process: its URL,
    and the file each delivery is written to, one JSON line each."""
    received = data_dir / "webhooks-received.ndjson"
    received.touch()
    handler = type("Receiver", (_Receiver,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, name="demo-receiver", daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/hooks", received


def environment(data: DemoData, *, base_url: str, audience: str, data_dir: Path) -> str:
    """A shell file that sets what the README's examples use: BASE, the two credentials,
    a company token (TOKEN) and an operator token (OPERATOR), COMPANY_ID, and the Python
    client's variables. Sourcing it asks for fresh tokens."""
    extract = "python3 -c 'import json,sys; print(json.load(sys.stdin)[\"access_token\"])'"
    return f"""# Written by `headwater demo`; `source {data_dir}/demo.env` in another terminal.
export BASE={base_url}
export COMPANY_ID={data.company_id}
export CLIENT_ID={data.client_id} CLIENT_SECRET={data.client_secret}
export OPERATOR_ID={data.operator_id} OPERATOR_SECRET={data.operator_secret}
export HEADWATER_URL=$BASE HEADWATER_CLIENT_ID=$CLIENT_ID HEADWATER_CLIENT_SECRET=$CLIENT_SECRET
export HEADWATER_DATA_DIR={data_dir}
export SFTP_PORT={data.sftp_port} SFTP_USER={DEMO_SFTP_USER} SFTP_KEY={data.sftp_key}
export SMTP_PORT={data.smtp_port} INBOX={data.inbox_address}
export RECEIVER={data.receiver_url} RECEIVED={data.received}
export TOKEN=$(curl -s $BASE/oauth/token -H 'Content-Type: application/json' \\
  -d '{{"client_id": "'$CLIENT_ID'", "client_secret": "'$CLIENT_SECRET'", "audience": "{audience}"}}' | {extract})
export OPERATOR=$(curl -s $BASE/oauth/token -u "$OPERATOR_ID:$OPERATOR_SECRET" \\
  -d grant_type=client_credentials -d audience={audience} | {extract})
"""


def instructions(data: DemoData, *, base_url: str, env_file: Path) -> str:
    """How to call the demo: source the environment file, then a few calls; the README's
    examples all run as written after the same `source`."""
    beside = Path(sys.executable).parent / "headwater-client"
    client_cli = str(beside) if beside.exists() else "headwater-client"
    data_dir = env_file.parent
    return f"""
Headwater is starting at {base_url} (SQLite and files under {data_dir}).

Demo company {data.company_id}, ingestion client {data.ingestion_client}, dataset {DEMO_DATASET}.
Company credential:  client_id={data.client_id}  client_secret={data.client_secret}
Operator credential: client_id={data.operator_id}  client_secret={data.operator_secret}
(These secrets are shown once; running the demo again makes new ones.)

In another terminal, set BASE, TOKEN (company) and OPERATOR (operator) with fresh tokens;
every example in the README then runs as written:

  source {env_file}
  curl -s $BASE/platform/v1/whoami -H "Authorization: Bearer $TOKEN"; echo
  curl -s $BASE/platform/v1/data/json -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
    -d '{{"client_id": "{data.ingestion_client}", "dataset_id": "{DEMO_DATASET}", "data": [{{"order_id": "A-1", "amount": "12.50", "placed_at": "2026-11-22T10:30:00+01:00"}}, {{"order_id": "A-2", "amount": 3}}]}}'; echo
  curl -s "$BASE/platform/v1/data?client_id={data.ingestion_client}&dataset_id={DEMO_DATASET}" -H "Authorization: Bearer $TOKEN" -H 'Accept: application/x-ndjson'
  curl -s $BASE/platform/v1/transactions -H "Authorization: Bearer $TOKEN"; echo
  curl -s $BASE/admin/v1/companies/$COMPANY_ID/clients -H "Authorization: Bearer $OPERATOR"; echo

Or with the Python client's command line (clients/python/README.md), files kept under {data_dir}:

  printf 'order_id,amount\\nC-1,4.25\\nC-2,5\\n' > {data_dir}/demo-orders.csv
  {client_cli} upload {data_dir}/demo-orders.csv -c {data.ingestion_client} -d {DEMO_DATASET}
  {client_cli} records export -c {data.ingestion_client} -d {DEMO_DATASET}

{_sftp_lines(data)}
{_smtp_lines(data)}
Webhooks: the demo allows http and loopback receivers, and runs one at {data.receiver_url}
(each delivery a line of {data.received}); see docs/events-and-webhooks.md.

Web console: {base_url}/console (sign in with either credential above)
Interactive API docs: {base_url}/docs    OpenAPI: {base_url}/openapi.json
"""


def _smtp_lines(data: DemoData) -> str:
    if not data.smtp_port:
        return "(Email is off: HEADWATER_SMTP_PORT=0.)\n"
    return f"""Email: send a CSV attachment from any address @example.com to {data.inbox_address}:

  python3 -c "import smtplib, email.message as m; e = m.EmailMessage(); e['From'] = 'ann@example.com'; e['To'] = '{data.inbox_address}'; e['Subject'] = 'Orders'; e.set_content('see attached'); e.add_attachment(b'order_id,amount\\nE-1,3\\n', maintype='text', subtype='csv', filename='orders.csv'); smtplib.SMTP('127.0.0.1', {data.smtp_port}).send_message(e)"
"""


def _sftp_lines(data: DemoData) -> str:
    if not data.sftp_port:
        return "(SFTP is off: HEADWATER_SFTP_PORT=0.)\n"
    return f"""SFTP (user {DEMO_SFTP_USER}, key {data.sftp_key}): drop a file in /{data.ingestion_client}/{DEMO_DATASET}/,
its receipt appears in /{data.ingestion_client}/{DEMO_DATASET}/receipts/ once processed:

  sftp -P {data.sftp_port} -i {data.sftp_key} -o StrictHostKeyChecking=accept-new {DEMO_SFTP_USER}@127.0.0.1
"""
