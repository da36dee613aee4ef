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
)
# the protocol adapters: HTTP routers and the SFTP server
ROUTERS = ("router.py", "token_router.py", "server.py")
WIRING = ("headwater.runtime", "headwater.main", "headwater.cli", "headwater.worker")
HTTP = ("fastapi", "starlette", "headwater.web", "headwater.ops")
# The tables each domain owns: no other module inserts, updates or deletes their rows.
OWNED = {
    "ingestion": {
        "Transaction",
        "Record",
        "RecordCount",
        "Dataset",
        "DatasetSchema",
        "FeedHead",
        "StagedTransaction",
    },
    "events": {"Event"},
    "files": {"FileJob", "FileUpload", "QuarantinedRow"},
    "sftp": {"SftpAccount", "SftpUpload", "SftpHeldFile"},
    "inbox": {"Inbox", "InboxMessage", "InboxMessageId"},
    "exports": {"Export"},
}
SQL_TABLES = {
    "ingestion": (
        "transactions",
        "records",
        "dataset_record_counts",
        "datasets",
        "record_feed_heads",
        "record_staging",
    ),
    "events": ("events",),
    "files": ("file_jobs", "file_uploads", "quarantined_rows"),
    "sftp": ("sftp_accounts", "sftp_uploads", "sftp_held_files"),
    "inbox": ("inboxes", "inbox_messages", "inbox_message_ids"),
    "exports": ("exports",),
}


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
    wrong = [
        f"{module} imports {imported}"
        for module, path, tree in _modules()
        if _domain(module) and path.name not in ROUTERS
        for imported in _imports(tree)
        if _under(imported, HTTP + WIRING)
    ]
    assert wrong == []


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
        if imported.rsplit(".", 1)[-1] in ("router", "token_router")
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
    """The ORM classes a module inserts, updates or deletes, and the tables its SQL text
    writes."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("insert", "update", "delete", "dialect_insert")
            and node.args
            and isinstance(node.args[0], ast.Name)
        ):
            yield node.args[0].id
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = " ".join(node.value.lower().split())
            for verb in ("insert into ", "update ", "delete from "):
                for tables in SQL_TABLES.values():
                    for table in tables:
                        if verb + table + " " in text or text.endswith(verb + table):
                            yield table


def test_each_domain_writes_only_its_own_tables() -> None:
    wrong = []
    for module, _, tree in _modules():
        domain = _domain(module)
        for written in _writes(tree):
            for owner in OWNED:
                theirs = written in OWNED[owner] or written in SQL_TABLES[owner]
                # the lifecycle writes the outbox: an event with its change
                allowed = owner == domain or (owner == "events" and domain == "ingestion")
                if theirs and not allowed:
                    wrong.append(f"{module} writes {written} ({owner}'s)")
    assert wrong == []


def test_the_checks_would_see_a_violation() -> None:
    """The finders find what they look for (a check that cannot fail is no check)."""
    tree = ast.parse(
        "from headwater.runtime import Runtime\n"
        "update(Transaction)\n"
        "x = 'INSERT INTO records (a) VALUES (1)'\n"
    )
    assert "headwater.runtime" in _imports(tree)
    assert set(_writes(tree)) == {"Transaction", "records"}
