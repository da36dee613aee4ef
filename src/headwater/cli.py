"""The `headwater` command. Commands call the same services the routes call."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from headwater import migrations
from headwater.activity import service as activity
from headwater.config import get_settings
from headwater.db import Database
from headwater.errors import DomainError
from headwater.identity import service as identity
from headwater.kit.actor import Actor

app = typer.Typer(
    help="Headwater data platform.", no_args_is_help=True, pretty_exceptions_enable=False
)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
companies_app = typer.Typer(help="Companies (customer organisations).", no_args_is_help=True)
clients_app = typer.Typer(help="Ingestion clients.", no_args_is_help=True)
credentials_app = typer.Typer(help="API credentials.", no_args_is_help=True)
keys_app = typer.Typer(help="Token signing keys.", no_args_is_help=True)
activity_app = typer.Typer(help="The activity log's hash chains.", no_args_is_help=True)
datasets_app = typer.Typer(help="Dataset schemas (draft-06) and options.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(companies_app, name="companies")
app.add_typer(clients_app, name="clients")
app.add_typer(credentials_app, name="credentials")
app.add_typer(keys_app, name="keys")
app.add_typer(activity_app, name="activity")
app.add_typer(datasets_app, name="datasets")

# Written as author_id on what `headwater import` creates unless --author-id says otherwise.
IMPORT_AUTHOR = uuid.uuid5(uuid.NAMESPACE_URL, "urn:headwater:cli-import")
# Written as author_id on dataset changes made with `headwater datasets ...`.
CLI_OPERATOR = uuid.uuid5(uuid.NAMESPACE_URL, "urn:headwater:cli-operator")

out = Console()


def _print(data: object) -> None:
    out.print_json(json.dumps(data, default=str))


def _database() -> Database:
    settings = get_settings()
    migrations.upgrade(settings)
    return Database(settings)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    workers: Annotated[int, typer.Option(help="API processes (production: one per core).")] = 1,
) -> None:
    """Run the API, the embedded identity provider and the background worker."""
    import uvicorn

    # Child processes read settings from the environment, so the address goes there.
    os.environ.setdefault("HEADWATER_PUBLIC_URL", f"http://{host}:{port}")
    get_settings.cache_clear()
    settings = get_settings()
    if settings.auto_migrate:  # once here, before the worker processes start
        migrations.upgrade(settings)
    with _multiprocess_metrics(Path(settings.data_dir)) if workers > 1 else nullcontext():
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
        )


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


@app.command()
def demo(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
) -> None:
    """Seed a demo company, client and credentials, print how to call the API, and serve."""
    from headwater import demo as demo_data

    os.environ.setdefault("HEADWATER_PUBLIC_URL", f"http://{host}:{port}")
    get_settings.cache_clear()
    settings = get_settings()
    with _database().session() as session:
        data = demo_data.seed(session)
    out.print(
        demo_data.instructions(data, base_url=settings.public_url, audience=settings.audience),
        highlight=False,
        soft_wrap=True,
    )
    serve(host=host, port=port, workers=1)


@app.command("worker")
def run_worker() -> None:
    """Run only the background worker (production: separate from the API processes)."""
    import asyncio

    from headwater import worker
    from headwater.runtime import build_runtime, start

    settings = get_settings()
    runtime = build_runtime(settings)
    start(runtime)

    async def run() -> None:
        stop = asyncio.Event()
        await asyncio.gather(
            worker.run_forever(runtime, stop),
            *(
                worker.run_files_forever(runtime, stop, slot)
                for slot in range(max(1, settings.file_workers))
            ),
        )

    asyncio.run(run())


@db_app.command("upgrade")
def db_upgrade(revision: str = "head") -> None:
    """Apply migrations up to REVISION (default: the newest)."""
    migrations.upgrade(get_settings(), revision)
    out.print(f"database at {revision}")


@companies_app.command("create")
def companies_create(name: str) -> None:
    """Register a company; prints it with its id."""
    with _database().session() as session:
        company = identity.create_company(session, name=name)
        _print({"id": company.id, "name": company.name, "created_at": company.created_at})


@clients_app.command("create")
def clients_create(company_id: uuid.UUID, client_id: str, name: str) -> None:
    """Register an ingestion client for a company."""
    with _database().session() as session:
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
    name: str,
    scopes: Annotated[list[str], typer.Option("--scope", help="Repeat for each scope.")],
    company_id: Annotated[uuid.UUID | None, typer.Option(help="Omit for an operator.")] = None,
    client_ids: Annotated[list[str] | None, typer.Option("--client-id")] = None,
) -> None:
    """Issue an API credential. The secret is printed once and never again."""
    with _database().session() as session:
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
def credentials_revoke(client_id: str) -> None:
    """Revoke a credential: it gets no new token."""
    with _database().session() as session:
        identity.revoke_credential(session, client_id)
    out.print(f"revoked {client_id}")


@keys_app.command("rotate")
def keys_rotate() -> None:
    """Add a new signing key; tokens signed by older keys keep verifying until removed."""
    settings = get_settings()
    with _database().session() as session:
        key = identity.rotate_signing_key(session, passphrase=settings.signing_key_passphrase)
    out.print(f"signing with {key.kid}")


@keys_app.command("list")
def keys_list() -> None:
    """Every key that verifies tokens, newest (the signing key) first."""
    with _database().session() as session:
        _print(
            [
                {"kid": k.kid, "algorithm": k.algorithm, "created_at": k.created_at}
                for k in identity.list_signing_keys(session)
            ]
        )


@keys_app.command("remove")
def keys_remove(kid: str) -> None:
    """Remove an old key: tokens it signed stop verifying."""
    with _database().session() as session:
        identity.remove_signing_key(session, kid)
    out.print(f"removed {kid}")


@app.command("import")
def import_file(
    file: Annotated[Path, typer.Argument(help="YAML or JSON: categories, templates, workflows.")],
    company_id: Annotated[uuid.UUID, typer.Option(help="The company to import into.")],
    author_id: Annotated[uuid.UUID, typer.Option(help="Author written on the changes.")] = (
        IMPORT_AUTHOR
    ),
) -> None:
    """Load categories, templates and workflows for a company, all or nothing."""
    from headwater.workflows import importer

    document = importer.read(file)
    with _database().session() as session:
        identity.get_company(session, company_id)
        summary = importer.load(
            session, actor=Actor(company_id=company_id, author_id=author_id), document=document
        )
    _print(summary.__dict__)


@activity_app.command("checkpoint")
def activity_checkpoint(
    company_id: Annotated[uuid.UUID | None, typer.Option(help="One company; default all.")] = None,
) -> None:
    """Print each company's chain head (count, hash): keep it outside the database."""
    with _database().session() as session:
        heads = activity.checkpoints(session, company_id=company_id)
        _print([{"company_id": h.company_id, "count": h.count, "hash": h.hash} for h in heads])


@activity_app.command("verify")
def activity_verify(
    checkpoint: Annotated[Path | None, typer.Option(help="Output of `activity checkpoint`.")] = (
        None
    ),
    company_id: Annotated[uuid.UUID | None, typer.Option(help="One company; default all.")] = None,
) -> None:
    """Check the chains (those of the checkpoint, when given, against it); exit 1 on a break."""
    from headwater.activity import chain

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
    with _database().session() as session:
        # A checkpoint file names the companies to check; without one, every company.
        known = set(expected) or {h.company_id for h in activity.checkpoints(session)}
        companies = [company_id] if company_id else sorted(known)
        for company in companies:
            result = activity.verify(session, company_id=company, checkpoint=expected.get(company))
            if result.finding is None:
                out.print(f"ok       {company}  {result.head.count} entries  {result.head.hash}")
            else:
                broken += 1
                f = result.finding
                out.print(f"[red]BROKEN[/red]   {company}  {f.kind} at entry {f.seq}: {f.detail}")
    if broken:
        raise typer.Exit(1)


def _json_file(path: Path) -> dict[str, object]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(f"{path}: {exc}") from None
    if not isinstance(value, dict):
        raise typer.BadParameter(f"{path}: must hold a JSON object")
    return value


SchemaFile = Annotated[Path, typer.Argument(help="A JSON file holding the draft-06 schema.")]
OptionsFile = Annotated[
    Path | None, typer.Option("--options", help="A JSON file holding the dataset's options.")
]


@datasets_app.command("register")
def datasets_register(
    client_id: str, dataset_id: str, schema: SchemaFile, options: OptionsFile = None
) -> None:
    """Register a dataset for an ingestion client with its first schema version."""
    from headwater.ingestion import datasets
    from headwater.ingestion.schemas import DatasetOptions

    parsed = DatasetOptions.model_validate(_json_file(options) if options else {})
    with _database().session() as session:
        view = datasets.register(
            session,
            author_id=CLI_OPERATOR,
            client_id=client_id,
            dataset_id=dataset_id,
            schema=_json_file(schema),
            options=parsed,
        )
        _print(view.model_dump(mode="json"))


@datasets_app.command("add-version")
def datasets_add_version(client_id: str, dataset_id: str, schema: SchemaFile) -> None:
    """Add a schema version (checked for compatibility as the dataset's options say)."""
    from headwater.ingestion import datasets

    with _database().session() as session:
        view = datasets.add_version(
            session,
            author_id=CLI_OPERATOR,
            client_id=client_id,
            dataset_id=dataset_id,
            schema=_json_file(schema),
        )
        _print(view.model_dump(mode="json"))


@datasets_app.command("show")
def datasets_show(
    client_id: str,
    dataset_id: str,
    version: Annotated[int | None, typer.Option(help="Print this schema version.")] = None,
) -> None:
    """Print a dataset (current schema, versions, options), or one schema version."""
    from headwater.ingestion import datasets

    with _database().session() as session:
        if version is None:
            view = datasets.get(session, client_id=client_id, dataset_id=dataset_id)
            _print(view.model_dump(mode="json"))
        else:
            one = datasets.version(
                session, client_id=client_id, dataset_id=dataset_id, number=version
            )
            _print(one.model_dump(mode="json"))


def main() -> None:
    """Entry point: domain errors become one line on stderr and exit status 1."""
    try:
        app()
    except DomainError as exc:
        Console(stderr=True).print(f"[red]error:[/red] {exc.detail}")
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
