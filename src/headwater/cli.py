"""The `headwater` command. Commands call the same services the routes call."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import json
import os
import shutil
import signal
import sys
import uuid
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager, nullcontext
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from headwater.config import Settings
    from headwater.db import Database

# Heavy modules (SQLAlchemy, Alembic, the services, rich) are imported by the commands that
# need them, so that `headwater --help` and a single command start quickly.


# Plain help (click's): argument names in capitals, no type placeholders, and no rich
# rendering to import before a command can start.
def _group(help_text: str) -> typer.Typer:
    return typer.Typer(help=help_text, no_args_is_help=True, rich_markup_mode=None)


app = typer.Typer(
    help="Headwater data platform: the API server, its worker, and the operator's commands.",
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    rich_markup_mode=None,
)
db_app = _group("Database schema.")
companies_app = _group("Companies (customer organisations).")
clients_app = _group("Ingestion clients.")
credentials_app = _group("API credentials.")
keys_app = _group("Token signing keys.")
activity_app = _group("The activity log's hash chains.")
datasets_app = _group("Dataset schemas (draft-06) and options.")
sftp_accounts_app = _group("SFTP accounts: logins for a company's systems.")
inboxes_app = _group("Email inboxes: an address per dataset.")
transforms_app = _group("A dataset's transform steps: versions, and a preview.")
app.add_typer(db_app, name="db")
app.add_typer(companies_app, name="companies")
app.add_typer(clients_app, name="clients")
app.add_typer(credentials_app, name="credentials")
app.add_typer(keys_app, name="keys")
app.add_typer(activity_app, name="activity")
app.add_typer(datasets_app, name="datasets")
datasets_app.add_typer(transforms_app, name="transforms")
app.add_typer(sftp_accounts_app, name="sftp-accounts")
app.add_typer(inboxes_app, name="inboxes")

# Written as author_id on what `headwater import` creates unless --author-id says otherwise.
IMPORT_AUTHOR = uuid.uuid5(uuid.NAMESPACE_URL, "urn:headwater:cli-import")
# Written as author_id on dataset changes made with `headwater datasets ...`.
CLI_OPERATOR = uuid.uuid5(uuid.NAMESPACE_URL, "urn:headwater:cli-operator")


@functools.cache
def _console(*, stderr: bool = False) -> Console:
    """Rich's console, imported when a command first prints through it (18 ms)."""
    from rich.console import Console

    return Console(stderr=stderr)


# Arguments and options used by several commands: a name in capitals and a help text each.
CompanyId = Annotated[
    uuid.UUID, typer.Argument(metavar="COMPANY_ID", help="The company's id (uuid).")
]
ClientId = Annotated[
    str, typer.Argument(metavar="CLIENT_ID", help="The ingestion client's id, e.g. acme-crm.")
]
DatasetId = Annotated[
    str, typer.Argument(metavar="DATASET_ID", help="The dataset's id, e.g. orders.")
]
CompanyOption = Annotated[
    uuid.UUID | None,
    typer.Option(metavar="COMPANY_ID", help="Only this company (default: every company)."),
]
Host = Annotated[str, typer.Option(metavar="HOST", help="Interface to listen on.")]
Port = Annotated[int, typer.Option(metavar="PORT", help="TCP port.")]


def _json_value(value: object) -> object:
    """What JSON cannot hold as it is: times as the API writes them (UTC, milliseconds,
    `Z`), anything else (uuids) as its text."""
    if isinstance(value, datetime):
        from headwater.kit.clock import iso_ms

        return iso_ms(value)
    return str(value)


def _print(data: object) -> None:
    """JSON on standard output: coloured by rich on a terminal, elsewhere as rich writes it
    there too (`json.dumps`, indented by 2), without importing rich."""
    if sys.stdout.isatty():
        _console().print_json(json.dumps(data, default=_json_value))
        return
    sys.stdout.write(json.dumps(data, default=_json_value, indent=2, ensure_ascii=False) + "\n")


def get_settings() -> Settings:
    """The settings (read from the environment the first time)."""
    from headwater.config import get_settings as settings

    return settings()


def _fresh_settings() -> Settings:
    """The settings read again, after this process changed its environment."""
    from headwater.config import get_settings as settings

    settings.cache_clear()
    return settings()


def _database() -> Database:
    from headwater import migrations
    from headwater.db import Database

    settings = get_settings()
    database = Database(settings)
    migrations.bring_current(settings, database.engine)
    _check_sealing(database)
    return database


def _check_sealing(database: Database) -> None:
    """End a command or a node's start with one line if its sealing material differs
    from the other nodes' (contract 19): it would seal secrets they cannot open. A
    database that cannot be reached is left to what comes next (a node serves 503 until
    it is back)."""
    from headwater.errors import is_unreachable
    from headwater.identity import shared

    try:
        with _refused_on_mismatch(), database.unit_of_work() as session:
            shared.check_sealing(session)
    except Exception as exc:
        if not is_unreachable(exc):
            raise


@contextmanager
def _refused_on_mismatch() -> Iterator[None]:
    """A node whose sealing material differs from the others' ends with one line."""
    from headwater.identity.errors import SealingMismatch

    try:
        yield
    except SealingMismatch as exc:
        sys.stderr.write(f"headwater: {exc}\n")
        raise SystemExit(1) from None


@app.command()
def serve(
    host: Host = "127.0.0.1",
    port: Port = 8000,
    workers: Annotated[
        int, typer.Option(metavar="N", help="API processes (production: one per core).")
    ] = 1,
    no_worker: Annotated[
        bool, typer.Option("--no-worker", help="Leave background jobs to `headwater worker`.")
    ] = False,
    no_sftp: Annotated[
        bool, typer.Option("--no-sftp", help="Leave SFTP to `headwater sftp`.")
    ] = False,
    no_smtp: Annotated[
        bool, typer.Option("--no-smtp", help="Leave email to `headwater smtp`.")
    ] = False,
) -> None:
    """Run the API, the embedded identity provider, the background worker and the SFTP
    and SMTP servers; each `--no-...` leaves one out, to run as a role of its own."""
    import uvicorn

    from headwater import migrations

    _address_as_public_url(host, port)
    if no_worker:  # the API processes read their settings from the environment
        os.environ["HEADWATER_WORKER_ENABLED"] = "false"
    from headwater.ops.logs import configure_logging

    settings = _fresh_settings()
    # uvicorn's supervisor logs here (a worker that died or did not report healthy): with
    # logging unconfigured in this process, those lines went nowhere
    configure_logging(level=settings.log_level, json=settings.log_json)
    from headwater.db import Database

    checked = Database(settings)
    if settings.auto_migrate:  # once here, before the worker processes start
        migrations.bring_current(settings, checked.engine)
    _check_sealing(checked)
    checked.dispose()
    sftp_port = 0 if no_sftp else settings.sftp_port
    smtp_port = 0 if no_smtp else settings.smtp_port
    with (
        # several processes (API workers, the SFTP server) share one metrics directory
        _multiprocess_metrics(Path(settings.data_dir))
        if workers > 1 or sftp_port or smtp_port
        else nullcontext(),
        _beside(settings, host, "sftp", sftp_port, settings.sftp_host),
        _beside(settings, host, "smtp", smtp_port, settings.smtp_host),
    ):
        uvicorn.run(
            "headwater.main:create_app",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_config=None,
            access_log=False,
            server_header=False,
            proxy_headers=False,
            http="headwater.ops.protocol:GuardedHttpToolsProtocol",
            timeout_graceful_shutdown=max(1, int(settings.shutdown_timeout_seconds) - 5),
            # a worker imports the app before it reports healthy: on a loaded machine
            # that takes longer than uvicorn's 5 s default, and it was killed each time
            timeout_worker_healthcheck=60,
        )


@contextmanager
def _beside(
    settings: Settings, host: str, server: str, port: int, own_host: str | None
) -> Iterator[None]:
    """`headwater sftp` or `headwater smtp` in a process of its own while the API runs
    (unless its port is 0); it stops with the API, or by itself if this process dies.

    The API starts only once the channel listens: a channel that cannot start (its port
    taken) ends `serve` with its one-line error, and one that dies later stops `serve`,
    so that no instance says it is ready without every channel it was asked to run."""
    if port == 0:
        yield
        return
    import subprocess
    import tempfile
    import threading
    import time

    ready = Path(tempfile.mkdtemp(prefix="headwater-")) / f"{server}.port"
    command = [sys.executable, "-m", "headwater.cli", server, "--parent", str(os.getpid())]
    command += ["--host", own_host or host, "--port", str(port), "--ready-file", str(ready)]
    child = subprocess.Popen(command)  # noqa: S603 (this interpreter, our own arguments)
    deadline = time.monotonic() + CHANNEL_START_SECONDS
    while not ready.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if not ready.exists():
        _stop(child)
        shutil.rmtree(ready.parent, ignore_errors=True)
        if child.returncode != LISTEN_FAILED:  # the child said nothing of its own
            sys.stderr.write(f"headwater: the {server.upper()} server did not start\n")
        raise SystemExit(1)
    stopping = threading.Event()

    def watch() -> None:
        child.wait()
        if not stopping.is_set():
            sys.stderr.write(f"headwater: the {server.upper()} server stopped; stopping\n")
            os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True).start()
    try:
        yield
    finally:
        stopping.set()
        _stop(child)
        shutil.rmtree(ready.parent, ignore_errors=True)


def _stop(child: Any) -> None:
    import subprocess

    child.terminate()
    try:
        child.wait(timeout=10)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


@contextmanager
def _multiprocess_metrics(data_dir: Path) -> Iterator[None]:
    """A metrics directory for this instance's worker processes while it runs (unless
    PROMETHEUS_MULTIPROC_DIR names one), removed when it stops.

    One directory per instance: instances sharing a data directory must neither mix
    their counts nor clear each other's files. Directories of instances that are gone
    (killed before they could remove theirs) are removed at start.
    """
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        yield
        return
    root = data_dir / "prometheus"
    for stale in root.glob("*"):
        if stale.name.isdigit() and not _running(int(stale.name)):
            shutil.rmtree(stale, ignore_errors=True)
    directory = root / str(os.getpid())
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
    try:
        yield
    finally:
        del os.environ["PROMETHEUS_MULTIPROC_DIR"]
        shutil.rmtree(directory, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _address_as_public_url(host: str, port: int) -> None:
    """Child processes read settings from the environment, so the address goes there when
    HEADWATER_PUBLIC_URL is not set, marked as this instance's own address (it does not
    name the token issuer, which instances sharing a database share)."""
    if "HEADWATER_PUBLIC_URL" not in os.environ:
        os.environ["HEADWATER_PUBLIC_URL"] = f"http://{host}:{port}"
        os.environ["HEADWATER_PUBLIC_URL_FROM_ADDRESS"] = "true"


@app.command()
def demo(
    host: Host = "127.0.0.1",
    port: Port = 8000,
) -> None:
    """Seed a demo company, client and credentials, print how to call the API, and serve."""
    from headwater import demo as demo_data

    _address_as_public_url(host, port)
    # webhooks to the demo's receiver on loopback, over http (set either to false to refuse)
    os.environ.setdefault("HEADWATER_WEBHOOK_ALLOW_HTTP", "true")
    os.environ.setdefault("HEADWATER_WEBHOOK_ALLOW_PRIVATE", "true")
    settings = _fresh_settings()
    data_dir = Path(settings.data_dir).resolve()
    sftp_key = demo_data.sftp_key(data_dir)
    receiver_url, received = demo_data.start_receiver(data_dir)
    database = _database()
    with database.unit_of_work() as session:
        data = demo_data.seed(session, sftp_public_key=sftp_key.public)
    demo_data.traffic(database, settings)
    data = data.with_sftp(port=settings.sftp_port, key_file=sftp_key.path).with_smtp(
        port=settings.smtp_port, domain=settings.inbound_email_domain
    )
    data = dataclasses.replace(data, receiver_url=receiver_url, received=received)
    env_file = data_dir / "demo.env"
    env_file.touch(mode=0o600)
    env_file.chmod(0o600)  # it holds the demo's secrets
    env_file.write_text(
        demo_data.environment(
            data, base_url=settings.public_url, audience=settings.audience, data_dir=data_dir
        )
    )
    _console().print(
        demo_data.instructions(data, base_url=settings.public_url, env_file=env_file),
        highlight=False,
        soft_wrap=True,
    )
    serve(host=host, port=port, workers=1)


ReadyFile = Annotated[
    Path | None, typer.Option(hidden=True, help="Write the bound port here once listening.")
]
ParentPid = Annotated[int | None, typer.Option(hidden=True)]
LISTEN_FAILED = 3  # the exit status of a channel that cannot listen on its port
CHANNEL_START_SECONDS = 120  # a channel's process is listening within this, or serve stops


def _run_protocol_server(
    serve_forever: Callable[..., Coroutine[Any, Any, None]],
    host: str,
    port: int,
    *,
    ready_file: Path | None,
    parent: int | None,
    setting: str,
) -> None:
    """Run `serve_forever(settings, host, port, ready=...)` until SIGTERM or SIGINT, or
    until the process that started it (`parent`) is gone. A port it cannot listen on
    ends it at once with one line naming the port and its `setting`."""
    import asyncio

    from headwater.ops.logs import configure_logging

    settings = get_settings()
    configure_logging(level=settings.log_level, json=settings.log_json)
    _database().dispose()  # migrated and its sealing checked before the first client

    async def run() -> None:
        loop = asyncio.get_running_loop()
        task = loop.create_task(serve_forever(settings, host, port, ready=ready_file))
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, task.cancel)
        while parent is not None and not task.done():
            await asyncio.sleep(1)
            if os.getppid() != parent:  # the API that started it is gone
                task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    try:
        asyncio.run(run())
    except OSError as exc:
        if exc.errno not in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
            raise
        name = "SFTP" if setting == "HEADWATER_SFTP_PORT" else "SMTP"
        sys.stderr.write(
            f"headwater: the {name} server cannot listen on {host}:{port} "
            f"({exc.strerror or exc}): set {setting} to a free port, or 0 to turn it off\n"
        )
        raise SystemExit(LISTEN_FAILED) from None


@app.command("sftp")
def run_sftp(
    host: Annotated[
        str | None, typer.Option(metavar="HOST", help="Interface (default HEADWATER_SFTP_HOST).")
    ] = None,
    port: Annotated[
        int | None, typer.Option(metavar="PORT", help="TCP port (default HEADWATER_SFTP_PORT).")
    ] = None,
    ready_file: ReadyFile = None,
    parent: ParentPid = None,
) -> None:
    """Run the SFTP server alone (`headwater serve` runs it too)."""
    from headwater.sftp import server

    settings = get_settings()
    _run_protocol_server(
        server.serve,
        host or settings.sftp_host or "127.0.0.1",
        settings.sftp_port if port is None else port,
        ready_file=ready_file,
        parent=parent,
        setting="HEADWATER_SFTP_PORT",
    )


@app.command("smtp")
def run_smtp(
    host: Annotated[
        str | None, typer.Option(metavar="HOST", help="Interface (default HEADWATER_SMTP_HOST).")
    ] = None,
    port: Annotated[
        int | None, typer.Option(metavar="PORT", help="TCP port (default HEADWATER_SMTP_PORT).")
    ] = None,
    ready_file: ReadyFile = None,
    parent: ParentPid = None,
) -> None:
    """Run the SMTP server alone (`headwater serve` runs it too)."""
    from headwater.inbox import server

    settings = get_settings()
    _run_protocol_server(
        server.serve,
        host or settings.smtp_host or "127.0.0.1",
        settings.smtp_port if port is None else port,
        ready_file=ready_file,
        parent=parent,
        setting="HEADWATER_SMTP_PORT",
    )


@app.command("worker")
def run_worker() -> None:
    """Run only the background worker (production: separate from the API processes)."""
    import asyncio

    from headwater import worker
    from headwater.kit import memory
    from headwater.runtime import build_runtime, start

    settings = get_settings()
    runtime = build_runtime(settings, role="other")
    with _refused_on_mismatch():  # the start checks the sealing material
        start(runtime)

    async def run() -> None:
        stop = asyncio.Event()
        # SIGTERM (and Ctrl-C): stop taking work; file jobs in progress are handed back
        loop = asyncio.get_running_loop()
        for stopping in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(stopping, stop.set)
        tasks = runtime.listen(stop)
        tasks += worker.start_jobs(runtime, stop, file_workers=max(1, settings.file_workers))
        await stop.wait()
        await worker.stop_jobs(runtime, stop, tasks)
        await runtime.close()

    with memory.collecting_less():
        asyncio.run(run())


@db_app.command("upgrade")
def db_upgrade(
    revision: Annotated[
        str, typer.Argument(metavar="REVISION", help="A migration's revision id (default: head).")
    ] = "head",
) -> None:
    """Apply migrations up to REVISION (default: the newest)."""
    from headwater import migrations

    migrations.upgrade(get_settings(), revision)
    _console().print(f"database at {revision}")


@companies_app.command("create")
def companies_create(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The company's name.")],
) -> None:
    """Register a company; prints it with its id."""
    from headwater.identity import service as identity

    with _database().unit_of_work() as session:
        company = identity.create_company(session, name=name)
        _print({"id": company.id, "name": company.name, "created_at": company.created_at})


@clients_app.command("create")
def clients_create(
    company_id: CompanyId,
    client_id: Annotated[
        str,
        typer.Argument(
            metavar="CLIENT_ID",
            help="The new client's id: 1-64 of A-Z a-z 0-9 _ . - (e.g. acme-crm).",
        ),
    ],
    name: Annotated[str, typer.Argument(metavar="NAME", help="A name for people.")],
) -> None:
    """Register an ingestion client for a company."""
    from headwater.identity import service as identity

    with _database().unit_of_work() as session:
        client = identity.create_client(
            session, company_id=company_id, client_id=client_id, name=name
        )
        _print(
            {
                "client_id": client.client_id,
                "company_id": client.company_id,
                "name": client.name,
                "created_at": client.created_at,
            }
        )


@credentials_app.command("create")
def credentials_create(
    name: Annotated[str, typer.Argument(metavar="NAME", help="What the credential is for.")],
    scopes: Annotated[
        list[str],
        typer.Option(
            "--scope",
            metavar="SCOPE",
            help="A scope it may ask for (data:write, data:read, workflows:read, "
            "workflows:write, activities:read; admin for operators); repeat for each.",
        ),
    ],
    company_id: Annotated[
        uuid.UUID | None,
        typer.Option(metavar="COMPANY_ID", help="Its company; omit for an operator credential."),
    ] = None,
    client_ids: Annotated[
        list[str] | None,
        typer.Option(
            "--client-id",
            metavar="CLIENT_ID",
            help="An ingestion client it may use; repeat for each (none: all of its company's).",
        ),
    ] = None,
) -> None:
    """Issue an API credential. The secret is printed once and never again."""
    from headwater.identity import service as identity

    with _database().unit_of_work() as session:
        issued = identity.create_credential(
            session, company_id=company_id, name=name, scopes=scopes, client_ids=client_ids or []
        )
        c = issued.credential
        _print(
            {
                "client_id": c.client_id,
                "client_secret": issued.client_secret,
                "author_id": c.author_id,
                "company_id": c.company_id,
                "scopes": c.scopes,
                "client_ids": c.client_ids,
                "created_at": c.created_at,
            }
        )


@credentials_app.command("revoke")
def credentials_revoke(
    client_id: Annotated[
        str, typer.Argument(metavar="CLIENT_ID", help="The credential's client id (hw_...).")
    ],
) -> None:
    """Revoke a credential: it gets no new token."""
    from headwater.identity import service as identity

    with _database().unit_of_work() as session:
        identity.revoke_credential(session, client_id)
    _console().print(f"revoked {client_id}")


@keys_app.command("rotate")
def keys_rotate() -> None:
    """Add a new signing key; tokens signed by older keys keep verifying until removed."""
    from headwater.identity import service as identity

    settings = get_settings()
    with _database().unit_of_work() as session:
        key = identity.rotate_signing_key(session, passphrase=settings.signing_key_passphrase)
    _console().print(f"signing with {key.kid}")


@keys_app.command("list")
def keys_list() -> None:
    """Every key that verifies tokens, newest (the signing key) first."""
    from headwater.identity import service as identity

    with _database().unit_of_work() as session:
        _print(
            [
                {"kid": k.kid, "algorithm": k.algorithm, "created_at": k.created_at}
                for k in identity.list_signing_keys(session)
            ]
        )


@keys_app.command("remove")
def keys_remove(
    kid: Annotated[
        str,
        typer.Argument(
            help="The key's id, from `keys list`. An id can start with '-': "
            "then write `--` before it (headwater keys remove -- -sEoB...)."
        ),
    ],
) -> None:
    """Remove an old key: tokens it signed stop verifying."""
    from headwater.identity import service as identity

    with _database().unit_of_work() as session:
        identity.remove_signing_key(session, kid)
    _console().print(f"removed {kid}")


@app.command("import")
def import_file(
    file: Annotated[
        Path,
        typer.Argument(metavar="FILE", help="YAML or JSON: categories, templates, workflows."),
    ],
    company_id: Annotated[
        uuid.UUID, typer.Option(metavar="COMPANY_ID", help="The company to import into.")
    ],
    author_id: Annotated[
        uuid.UUID, typer.Option(metavar="UUID", help="Author written on the changes.")
    ] = (IMPORT_AUTHOR),
) -> None:
    """Load categories, templates and workflows for a company, all or nothing."""
    from headwater.identity import service as identity
    from headwater.kit.actor import Actor
    from headwater.workflows import importer

    document = importer.read(file)
    with _database().unit_of_work() as session:
        identity.get_company(session, company_id)
        summary = importer.load(
            session, actor=Actor(company_id=company_id, author_id=author_id), document=document
        )
    _print(summary.__dict__)


@activity_app.command("checkpoint")
def activity_checkpoint(
    company_id: CompanyOption = None,
) -> None:
    """Print each company's chain head (count, hash): keep it outside the database."""
    from headwater.activity import service as activity

    with _database().unit_of_work() as session:
        heads = activity.checkpoints(session, company_id=company_id)
        _print([{"company_id": h.company_id, "count": h.count, "hash": h.hash} for h in heads])


@activity_app.command("verify")
def activity_verify(
    checkpoint: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="A file written by `activity checkpoint`."),
    ] = (None),
    company_id: CompanyOption = None,
) -> None:
    """Check the chains (those of the checkpoint, when given, against it); exit 1 on a break."""
    from headwater.activity import chain
    from headwater.activity import service as activity

    expected: dict[uuid.UUID, chain.Head] = {}
    if checkpoint is not None:
        try:
            for item in json.loads(checkpoint.read_text()):
                expected[uuid.UUID(item["company_id"])] = chain.Head(
                    int(item["count"]), str(item["hash"])
                )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise typer.BadParameter(f"not a checkpoint file: {exc}") from None
    broken = 0
    with _database().unit_of_work() as session:
        # A checkpoint file names the companies to check; without one, every company.
        known = set(expected) or {h.company_id for h in activity.checkpoints(session)}
        companies = [company_id] if company_id else sorted(known)
        for company in companies:
            result = activity.verify(session, company_id=company, checkpoint=expected.get(company))
            if result.finding is None:
                _console().print(
                    f"ok       {company}  {result.head.count} entries  {result.head.hash}"
                )
            else:
                broken += 1
                f = result.finding
                _console().print(
                    f"[red]BROKEN[/red]   {company}  {f.kind} at entry {f.seq}: {f.detail}"
                )
    if broken:
        raise typer.Exit(1)


def _json_document(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(f"{path}: {exc}") from None


def _json_file(path: Path) -> dict[str, object]:
    value = _json_document(path)
    if not isinstance(value, dict):
        raise typer.BadParameter(f"{path}: must hold a JSON object")
    return value


def _json_array(path: Path) -> list[Any]:
    """A file holding an array, or an object holding one under its only key."""
    value = _json_document(path)
    if isinstance(value, dict) and len(value) == 1:
        value = next(iter(value.values()))
    if not isinstance(value, list):
        raise typer.BadParameter(f"{path}: must hold a JSON array")
    return value


SchemaFile = Annotated[
    Path, typer.Argument(metavar="SCHEMA_FILE", help="A JSON file holding the draft-06 schema.")
]
OptionsFile = Annotated[
    Path | None,
    typer.Option("--options", metavar="FILE", help="A JSON file holding the dataset's options."),
]


@datasets_app.command("register")
def datasets_register(
    client_id: ClientId, dataset_id: DatasetId, schema: SchemaFile, options: OptionsFile = None
) -> None:
    """Register a dataset for an ingestion client with its first schema version."""
    from headwater.ingestion import datasets
    from headwater.ingestion.schemas import DatasetOptions

    parsed = DatasetOptions.model_validate(_json_file(options) if options else {})
    with _database().unit_of_work() as session:
        view = datasets.register(
            session,
            author_id=CLI_OPERATOR,
            client_id=client_id,
            dataset_id=dataset_id,
            schema=_json_file(schema),
            options=parsed,
            max_schema_bytes=get_settings().max_schema_bytes,
        )
        _print(view.model_dump(mode="json"))


@datasets_app.command("add-version")
def datasets_add_version(client_id: ClientId, dataset_id: DatasetId, schema: SchemaFile) -> None:
    """Add a schema version (checked for compatibility as the dataset's options say)."""
    from headwater.ingestion import datasets

    with _database().unit_of_work() as session:
        view = datasets.add_version(
            session,
            author_id=CLI_OPERATOR,
            client_id=client_id,
            dataset_id=dataset_id,
            schema=_json_file(schema),
            max_schema_bytes=get_settings().max_schema_bytes,
        )
        _print(view.model_dump(mode="json"))


@datasets_app.command("show")
def datasets_show(
    client_id: ClientId,
    dataset_id: DatasetId,
    version: Annotated[
        int | None, typer.Option(metavar="N", help="Print this schema version (default: all).")
    ] = None,
) -> None:
    """Print a dataset (current schema, versions, options), or one schema version."""
    from headwater.ingestion import datasets

    with _database().unit_of_work() as session:
        if version is None:
            view = datasets.get(session, client_id=client_id, dataset_id=dataset_id)
            _print(view.model_dump(mode="json"))
        else:
            one = datasets.version(
                session, client_id=client_id, dataset_id=dataset_id, number=version
            )
            _print(one.model_dump(mode="json"))


StepsFile = Annotated[
    Path,
    typer.Argument(
        metavar="STEPS_FILE", help='A JSON file holding the steps: an array, or {"steps": [...]}.'
    ),
]


@transforms_app.command("set")
def transforms_set(client_id: ClientId, dataset_id: DatasetId, steps: StepsFile) -> None:
    """Store the steps as the dataset's next transform version."""
    from headwater.ingestion import transform_service

    with _database().unit_of_work() as session:
        view = transform_service.set_steps(
            session,
            author_id=CLI_OPERATOR,
            client_id=client_id,
            dataset_id=dataset_id,
            steps=_json_array(steps),
        )
        _print(view.model_dump(mode="json"))


@transforms_app.command("show")
def transforms_show(
    client_id: ClientId,
    dataset_id: DatasetId,
    version: Annotated[
        int | None, typer.Option(metavar="N", help="Print this version (default: the current).")
    ] = None,
) -> None:
    """Print the dataset's current transform steps, or one version of them."""
    from headwater.ingestion import transform_service

    with _database().read_session() as session:
        if version is None:
            view = transform_service.current(session, client_id=client_id, dataset_id=dataset_id)
        else:
            view = transform_service.version(
                session, client_id=client_id, dataset_id=dataset_id, number=version
            )
        _print(view.model_dump(mode="json"))


@transforms_app.command("preview")
def transforms_preview(
    client_id: ClientId,
    dataset_id: DatasetId,
    records: Annotated[
        Path,
        typer.Argument(
            metavar="RECORDS_FILE", help="A JSON file holding an array of 1-100 records."
        ),
    ],
    steps: Annotated[
        Path | None,
        typer.Option("--steps", metavar="FILE", help="Steps to try (default: the current)."),
    ] = None,
) -> None:
    """Print how each record would fare if pushed now; nothing is stored."""
    from headwater.ingestion import transform_service
    from headwater.ingestion.schemas import PreviewRequest

    body = PreviewRequest(
        records=_json_array(records), steps=None if steps is None else _json_array(steps)
    )
    view = transform_service.preview(
        _database(),
        client_id=client_id,
        dataset_id=dataset_id,
        records=body.records,
        steps=body.steps,
    )
    _print(view.model_dump(mode="json"))


@sftp_accounts_app.command("create")
def sftp_accounts_create(
    company_id: CompanyId,
    username: Annotated[str, typer.Argument(metavar="USERNAME", help="[a-z0-9][a-z0-9_.-]{0,63}")],
    public_keys: Annotated[
        list[Path] | None,
        typer.Option(
            "--public-key", metavar="FILE", help="An OpenSSH public key file; repeat for each."
        ),
    ] = None,
    password: Annotated[
        bool, typer.Option("--password", help="Generate a password (printed once).")
    ] = False,
    client_ids: Annotated[
        list[str] | None,
        typer.Option("--client-id", metavar="CLIENT_ID", help="A client it may use; repeat."),
    ] = None,
) -> None:
    """Create an SFTP account (section 11 of the contract)."""
    from headwater.sftp import service as sftp
    from headwater.sftp.schemas import AccountCreate

    data = AccountCreate(
        username=username,
        public_keys=[path.read_text().strip() for path in public_keys or []],
        password=password,
        client_ids=client_ids or [],
    )
    with _database().unit_of_work() as session:
        created = sftp.create_account(session, company_id=company_id, data=data)
    _print(created.model_dump(mode="json", exclude_none=True))


@sftp_accounts_app.command("list")
def sftp_accounts_list(company_id: CompanyOption = None) -> None:
    """Every SFTP account, or one company's."""
    from headwater.kit.pagination import PageQuery
    from headwater.sftp import service as sftp

    with _database().unit_of_work() as session:
        rows, _ = sftp.list_accounts(
            session, company_id=company_id, params=PageQuery(page_size=100)
        )
        _print([sftp.view(row).model_dump(mode="json") for row in rows])


@sftp_accounts_app.command("delete")
def sftp_accounts_delete(
    username: Annotated[str, typer.Argument(metavar="USERNAME")],
) -> None:
    """Delete an SFTP account: no new login; open sessions end within 5 s."""
    from headwater.sftp import service as sftp

    with _database().unit_of_work() as session:
        sftp.delete_account(session, username)
    _console().print(f"deleted {username}")


@inboxes_app.command("create")
def inboxes_create(
    client_id: ClientId,
    dataset_id: DatasetId,
    senders: Annotated[
        list[str],
        typer.Option("--sender", metavar="ADDRESS", help="An allowed sender (or @domain); repeat."),
    ],
) -> None:
    """Create an inbox for a dataset (section 12 of the contract)."""
    from headwater.inbox import service as inboxes
    from headwater.inbox.schemas import InboxCreate

    data = InboxCreate(allowed_senders=senders)
    domain = get_settings().inbound_email_domain
    with _database().unit_of_work() as session:
        inbox = inboxes.create_inbox(
            session,
            client_id=client_id,
            dataset_id=dataset_id,
            allowed_senders=data.allowed_senders,
        )
        _print(inboxes.view(inbox, domain=domain).model_dump(mode="json"))


@inboxes_app.command("list")
def inboxes_list(
    client_id: Annotated[
        str | None, typer.Option(metavar="CLIENT_ID", help="Only this client's.")
    ] = None,
) -> None:
    """Every inbox, or one client's."""
    from headwater.inbox import service as inboxes
    from headwater.inbox.schemas import InboxQuery

    domain = get_settings().inbound_email_domain
    with _database().unit_of_work() as session:
        rows, _ = inboxes.list_inboxes(session, InboxQuery(client_id=client_id, page_size=100))
        _print([inboxes.view(row, domain=domain).model_dump(mode="json") for row in rows])


@inboxes_app.command("delete")
def inboxes_delete(
    inbox_id: Annotated[uuid.UUID, typer.Argument(metavar="INBOX_ID")],
) -> None:
    """Delete an inbox: mail to its address is refused from now on."""
    from headwater.inbox import service as inboxes

    with _database().unit_of_work() as session:
        inboxes.delete_inbox(session, inbox_id)
    _console().print(f"deleted {inbox_id}")


def main() -> None:
    """Entry point: domain errors become one line on stderr and exit status 1."""
    try:
        app()
    except Exception as exc:
        from headwater.errors import DomainError

        if not isinstance(exc, DomainError):
            raise
        _console(stderr=True).print(f"[red]error:[/red] {exc.detail}")
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
