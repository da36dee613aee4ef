"""Imports run one way, and each domain writes only its own tables (README, Layout).

kit < config, db, errors < domain services (identity, events, ingestion, files,
workflows, activity) < web < routers < runtime < main, cli, worker
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "headwater"
DOMAINS = (
    "identity",
    "events",
    "ingestion",
    "files",
    "workflows",
    "activity",
    "sftp",
    "inbox",
    "exports",
    "webhooks",
    "subjects",
    "console",
)
# the protocol adapters: HTTP routers and their dependencies, the SFTP and SMTP servers
ROUTERS = ("router.py", "token_router.py", "transform_router.py", "server.py", "deps.py")
# the console's pages are HTTP adapters too, a module an area
CONSOLE_PAGES = ("headwater.console.pages",)
WIRING = ("headwater.runtime", "headwater.main", "headwater.cli", "headwater.worker")
HTTP = ("fastapi", "starlette", "headwater.web", "headwater.ops")
# The tables each domain owns: no other module inserts, updates or deletes their rows.
OWNED = {
    "identity": {
        "Company",
        "IngestionClient",
        "Credential",
        "TokenIssuer",
        "SigningKey",
        "SharedKey",
    },
    "ingestion": {
        "Transaction",
        "Record",
        "RecordCount",
        "Dataset",
        "DatasetSchema",
        "FeedHead",
        "IdempotencyKey",
        "StagedTransaction",
        "DatasetTransform",
        "CompanyHashKey",
        "DedupeKey",
        "RecordTombstone",
        "Suppression",
    },
    "events": {"Event", "EventHead", "EventHorizon"},
    "files": {"FileJob", "FileUpload", "QuarantinedRow"},
    "sftp": {"SftpAccount", "SftpUpload", "SftpHeldFile"},
    "inbox": {"Inbox", "InboxMessage", "InboxMessageId"},
    "exports": {"Export"},
    "workflows": {"WorkflowCategory", "WorkflowTemplate", "Workflow", "WorkflowTask"},
    "activity": {"ActivityEntry", "ActivityHead"},
    "webhooks": {"WebhookEndpoint", "WebhookDelivery", "WebhookAttempt"},
    "subjects": {"Erasure", "ErasureItem"},
    "console": {"ConsoleSession"},
}
SQL_TABLES = {
    "identity": (
        "companies",
        "ingestion_clients",
        "credentials",
        "token_issuer",
        "signing_keys",
        "shared_keys",
    ),
    "ingestion": (
        "transactions",
        "records",
        "dataset_record_counts",
        "datasets",
        "dataset_schemas",
        "record_feed_heads",
        "record_staging",
        "idempotency_keys",
        "dataset_transforms",
        "company_hash_keys",
        "dedupe_keys",
        "record_tombstones",
        "suppressions",
    ),
    "events": ("events", "event_heads", "event_horizons"),
    "files": ("file_jobs", "file_uploads", "quarantined_rows"),
    "sftp": ("sftp_accounts", "sftp_uploads", "sftp_held_files"),
    "inbox": ("inboxes", "inbox_messages", "inbox_message_ids"),
    "exports": ("exports",),
    "workflows": ("workflow_categories", "workflow_templates", "workflows", "workflow_tasks"),
    "activity": ("activity_entries", "activity_heads"),
    "webhooks": ("webhook_endpoints", "webhook_deliveries", "webhook_attempts"),
    "subjects": ("erasures", "erasure_items"),
    "console": ("console_sessions",),
}
MODELS = {name for names in OWNED.values() for name in names}


def _name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> Iterator[tuple[str, Path, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" not in path.parts:
            yield _name(path), path, ast.parse(path.read_text())


def _imports(tree: ast.Module) -> set[str]:
    """What a module imports at run time (not under `if TYPE_CHECKING`)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _domain(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in DOMAINS else None


def test_domain_services_know_no_http_and_no_wiring() -> None:
    assert _http_in_services(list(_modules())) == []


def test_the_wiring_is_imported_by_nothing_below_it() -> None:
    wrong = [
        f"{module} imports {imported}"
        for module, _, tree in _modules()
        if module not in WIRING
        for imported in _imports(tree)
        if _under(imported, WIRING)
    ]
    assert wrong == []


def test_web_plumbing_imports_no_router() -> None:
    wrong = [
        f"{module} imports {imported}"
        for module, _, tree in _modules()
        if _under(module, ("headwater.web",))
        for imported in _imports(tree)
        if imported.rsplit(".", 1)[-1] in ("router", "token_router", "transform_router")
    ]
    assert wrong == []


def test_no_module_import_cycle() -> None:
    graph: dict[str, set[str]] = {}
    modules = {module for module, _, _ in _modules()}
    for module, _, tree in _modules():
        graph[module] = {m for m in _imports(tree) if m in modules and m != module}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = [*stack[stack.index(nxt) :], nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)


def _writes(tree: ast.Module) -> Iterator[str]:
    """The ORM classes a module inserts, updates or deletes (Core statements on a model or
    its `__table__`, and a row object made to be added), and the tables its SQL text
    writes."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                yield from _sql_writes(node.value)
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in MODELS:
            yield func.id  # `Record(...)`: a row made to be added to a session
        elif (
            isinstance(func, ast.Name)
            and func.id in ("insert", "update", "delete", "dialect_insert")
            and node.args
        ):
            target = node.args[0]
            if isinstance(target, ast.Attribute) and target.attr == "__table__":
                target = target.value
            if isinstance(target, ast.Name):
                yield target.id
        elif (
            isinstance(func, ast.Attribute)
            and func.attr in ("insert", "update", "delete")
            and isinstance(func.value, ast.Attribute)
            and func.value.attr == "__table__"
            and isinstance(func.value.value, ast.Name)
        ):
            yield func.value.value.id  # `Record.__table__.insert()`


def _sql_writes(value: str) -> Iterator[str]:
    text = " ".join(value.lower().split())
    for verb in ("insert into ", "update ", "delete from "):
        for tables in SQL_TABLES.values():
            for table in tables:
                if verb + table + " " in text or text.endswith(verb + table):
                    yield table


def _wrong_writes(modules: list[tuple[str, Path, ast.Module]]) -> list[str]:
    wrong = []
    for module, _, tree in modules:
        domain = _domain(module)
        for written in _writes(tree):
            for owner in OWNED:
                theirs = written in OWNED[owner] or written in SQL_TABLES[owner]
                # the lifecycle writes the outbox: an event with its change
                allowed = owner == domain or (owner == "events" and domain == "ingestion")
                if theirs and not allowed:
                    wrong.append(f"{module} writes {written} ({owner}'s)")
    return wrong


def _http_in_services(modules: list[tuple[str, Path, ast.Module]]) -> list[str]:
    return [
        f"{module} imports {imported}"
        for module, path, tree in modules
        if _domain(module) and path.name not in ROUTERS and not _under(module, CONSOLE_PAGES)
        for imported in _imports(tree)
        if _under(imported, HTTP + WIRING)
    ]


def _package_loops(modules: list[tuple[str, Path, ast.Module]]) -> list[list[str]]:
    """The groups of packages that import one another round a loop (strongly connected
    components of the package import graph)."""
    graph: dict[str, set[str]] = {}
    for module, _, tree in modules:
        package = module.split(".")[1] if module.count(".") else module
        for imported in _imports(tree):
            parts = imported.split(".")
            if parts[0] == "headwater" and len(parts) > 1 and parts[1] != package:
                graph.setdefault(package, set()).add(parts[1])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    loops: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                loops.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return loops


CHANNELS = ("files", "sftp", "inbox")


def _past_the_core(modules: list[tuple[str, Path, ast.Module]]) -> list[str]:
    """Imports of ingestion by a channel (files, SFTP, email) other than `ingestion.api`,
    the core as channels use it."""
    return [
        f"{module} imports {imported}"
        for module, _, tree in modules
        if _domain(module) in CHANNELS
        for imported in _imports(tree)
        if _under(imported, ("headwater.ingestion",))
        and not _under(imported, ("headwater.ingestion.api",))
        and imported != "headwater.ingestion"
    ]


def test_channels_use_the_ingestion_core_through_its_api_alone() -> None:
    assert _past_the_core(list(_modules())) == []


def test_each_domain_writes_only_its_own_tables() -> None:
    assert _wrong_writes(list(_modules())) == []


# Where a domain names another's tables (reads them in its own queries), and why; any
# other read goes through the owner's functions.
READS = {
    # a dataset belongs to an ingestion client: its checks join the client's row
    ("ingestion", "identity"),
    # webhooks deliver the event log: a delivery is an event's, written by its sequencing
    ("webhooks", "events"),
}


def _foreign_tables(modules: list[tuple[str, Path, ast.Module]]) -> list[str]:
    """Imports of another domain's models by a domain, past `READS`."""
    wrong = []
    for module, _, tree in modules:
        domain = _domain(module)
        for imported in _imports(tree):
            owner = _domain(imported)
            if (
                domain
                and owner
                and owner != domain
                and imported.split(".")[2] == "models"
                and (domain, owner) not in READS
                and imported.count(".") == 2
            ):
                wrong.append(f"{module} imports {imported}")
    return wrong


def test_a_domain_reads_anothers_tables_through_its_functions() -> None:
    assert _foreign_tables(list(_modules())) == []


def test_no_package_imports_another_round_a_loop() -> None:
    """web/ names no domain type: a domain router names its own parts of the runtime."""
    assert _package_loops(list(_modules())) == []


PROBE = """
from fastapi import Request
from headwater.ingestion.models import Record, Transaction
from sqlalchemy import insert

def sneak(session, connection):
    session.add(Record(data={}))
    connection.execute(insert(Transaction.__table__), [{}])
    connection.execute(Transaction.__table__.delete())
    connection.exec_driver_sql("UPDATE transactions SET status = 'completed'")
"""


def test_the_checks_would_see_a_violation() -> None:
    """The finders find what they look for (a check that cannot fail is no check): a
    probe module in `webhooks/` that makes a `Record`, writes `transactions` three ways
    and imports FastAPI, and a loop between two packages."""
    probe = ("headwater.webhooks.probe", PACKAGE / "webhooks" / "probe.py", ast.parse(PROBE))
    assert sorted(_wrong_writes([probe])) == [
        "headwater.webhooks.probe writes Record (ingestion's)",
        "headwater.webhooks.probe writes Transaction (ingestion's)",
        "headwater.webhooks.probe writes Transaction (ingestion's)",
        "headwater.webhooks.probe writes transactions (ingestion's)",
    ]
    assert _foreign_tables([probe]) == [
        "headwater.webhooks.probe imports headwater.ingestion.models",
    ]
    assert sorted(_http_in_services([probe])) == [
        "headwater.webhooks.probe imports fastapi",
        "headwater.webhooks.probe imports fastapi.Request",
    ]
    reaching = (
        "headwater.sftp.probe",
        PACKAGE / "sftp" / "probe.py",
        ast.parse(
            "from headwater.ingestion.service import transaction_read\n"
            "from headwater.ingestion import api as ingestion\n"
        ),
    )
    assert sorted(_past_the_core([reaching])) == [
        "headwater.sftp.probe imports headwater.ingestion.service",
        "headwater.sftp.probe imports headwater.ingestion.service.transaction_read",
    ]
    looped = [
        ("headwater.web.x", PACKAGE / "web" / "x.py", ast.parse("import headwater.files.y")),
        ("headwater.files.y", PACKAGE / "files" / "y.py", ast.parse("import headwater.web.x")),
    ]
    assert _package_loops(looped) == [["files", "web"]]
    tree = ast.parse("from headwater.runtime import Runtime\n")
    assert "headwater.runtime" in _imports(tree)
