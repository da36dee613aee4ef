"""The docs' listings, ```text and ```sql blocks: not calls to run against the demo (those
are the ```sh and ```python blocks, run by test_readme.py) but each says something of
the code, which a check here holds true: a command's subcommands and options exist, a
setting is one Headwater reads and takes, a benchmark is a module that runs, a path in
a diagram is a file, a name is a function, a status is a transaction's status, a query
runs. A new listing that no check recognises fails the suite until one does."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from unittest.mock import patch

import psycopg
import pytest
from typer.testing import CliRunner

from headwater.cli import app
from headwater.config import Settings
from headwater.db import Base
from headwater.ingestion.lifecycle import Status
from headwater.models import load_all
from headwater.webhooks.router import router
from tests.factories import PG_ADMIN_URL

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "headwater"
PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]


def listings() -> list[tuple[str, str, str]]:
    """Every ```text and ```sql block: (page, language, text)."""
    found = []
    for page in PAGES:
        text = (ROOT / page).read_text()
        found += [
            (page, lang, block)
            for lang, block in re.findall(r"^```(text|sql)\n(.*?)^```", text, re.M | re.S)
        ]
    return found


def lines(block: str) -> list[str]:
    """The block's lines without comments, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [re.sub(r"\s+#\s.*$", "", ln).strip() for ln in joined.splitlines() if ln.strip()]


# -- headwater commands ------------------------------------------------------------------


def check_commands(block: str) -> None:
    """Each `headwater ...` command (several on a line joined by ` | `): its subcommands
    exist and every option it names is one of theirs."""
    commands = [
        part.strip()
        for line in lines(block)
        if line.startswith("headwater ")
        for part in line.split(" | ")
    ]
    assert commands
    for command in commands:
        words = command.split()[1:]
        path = []
        for word in words:
            if not re.fullmatch(r"[a-z][a-z-]*", word):
                break
            path.append(word)
        shown = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert shown.exit_code == 0, (command, shown.output)
        assert "Usage: " in shown.output and " ".join(path) in shown.output, command
        for option in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", command):
            assert re.search(re.escape(option) + r"(?![\w-])", shown.output), (command, option)


# -- settings for other machines -----------------------------------------------------------


def check_settings(block: str) -> None:
    """The `export HEADWATER_...` lines, expanded by bash as a shell would: every name is
    a setting and the values together are settings Headwater takes."""
    exports = "\n".join(ln for ln in block.splitlines() if not ln.startswith("headwater "))
    shell = subprocess.run(
        ["bash", "-c", f"set -eu\n{exports}\nenv -0"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    values = dict(
        item.split("=", 1) for item in shell.stdout.split("\0") if item.startswith("HEADWATER_")
    )
    assert values
    fields = {name.upper() for name in Settings.model_fields}
    unknown = {name for name in values if name.removeprefix("HEADWATER_") not in fields}
    assert not unknown, unknown
    with patch.dict(os.environ, values):
        settings = Settings(_env_file=None)  # type: ignore[call-arg]
    for name, value in values.items():
        assert getattr(settings, name.removeprefix("HEADWATER_").lower()) not in (None, ""), value
    if any(line.startswith("headwater ") for line in lines(block)):
        check_commands(block)


# -- the README's two set-up commands ------------------------------------------------------


def check_setup(block: str) -> None:
    scripts = [line.split()[0] for line in lines(block)]
    assert scripts == ["./scripts/demo", "./scripts/test"], scripts
    for script in scripts:
        assert (ROOT / script).stat().st_mode & 0o111, script
    assert "scripts/test" in (ROOT / ".ci" / "run").read_text()


# -- benchmarks ----------------------------------------------------------------------------


def check_benchmarks(block: str) -> None:
    """Every benchmark listed is a module with a `main`, and every one is listed."""
    listed = [re.fullmatch(r"\.venv/bin/python -m bench\.(\w+)", line) for line in lines(block)]
    assert all(listed), lines(block)
    names = {match.group(1) for match in listed if match}
    runnable = {p.stem for p in (ROOT / "bench").glob("*.py") if "\ndef main(" in p.read_text()}
    assert names == runnable, names ^ runnable
    for name in names:
        assert importlib.util.find_spec(f"bench.{name}") is not None, name


# -- architecture diagrams -----------------------------------------------------------------


def check_layout(block: str) -> None:
    """The left column of the code's layout: each file or package exists (a `<domain>`
    stands for any package), and each domain named in the text is a package."""
    for line in block.splitlines():
        column = re.match(r"(\S.*?)(?:\s{2,}|$)", line)
        if not column:
            continue
        for token in column.group(1).split(" · "):
            pattern = re.sub(r"<\w+>", "*", token.strip()).rstrip("/").replace(" services", "")
            assert list(SRC.glob(pattern)), token
    named = re.search(r"use cases and their helpers: (.*?)\. No FastAPI", block, re.S)
    assert named is not None
    for domain in re.split(r",\s+", named.group(1)):
        assert (SRC / domain / "__init__.py").exists(), domain


def check_lifecycle(block: str) -> None:
    """The transaction diagram names every status there is, and only those, and the
    lifecycle's functions it shows."""
    words = set(re.findall(r"[a-z_]+", block))
    statuses = {status.value for status in Status}
    assert statuses <= words, statuses - words
    lifecycle = importlib.import_module("headwater.ingestion.lifecycle")
    for verb in ("new", "begin", "advance", "finish"):
        assert verb in words and callable(getattr(lifecycle, verb)), verb


def check_event_flow(block: str) -> None:
    """The event diagram's functions, classes, tables and files exist."""
    for dotted in re.findall(r"\b([a-z]+(?:\.[a-zA-Z_]+)+)\b", block):
        if dotted.endswith(".py"):
            continue
        module, _, name = dotted.rpartition(".")
        found = [
            importlib.import_module(f"headwater.{candidate}")
            for candidate in (module, *(f"{p.name}.{module}" for p in SRC.iterdir()))
            if (SRC / (candidate.replace(".", "/") + ".py")).exists()
        ]
        assert any(hasattr(m, name) for m in found), dotted
    load_all()
    tables = set(Base.metadata.tables)
    for table in ("events", "event_heads", "webhook_deliveries"):
        assert table in tables and table in block, table
    for path in re.findall(r"\b[a-z]+/[a-z_]+\.py\b", block):
        assert (SRC / path).exists(), path
    served = {(m, r.path) for r in router.routes for m in getattr(r, "methods", ())}
    assert ("GET", "/platform/v1/events") in served and "GET /platform/v1/events" in block


# -- SQL -----------------------------------------------------------------------------------


def check_sql(block: str) -> None:
    """The query runs on PostgreSQL and counts a connection named as Headwater names its
    own (`headwater <role>`)."""
    with psycopg.connect(PG_ADMIN_URL, application_name="headwater docs") as conn:
        rows = conn.execute(block).fetchall()
    assert ("headwater docs", 1) in rows, rows


def check_pgbouncer(block: str) -> None:
    """Each setting the docs recommend is the one the tests and benchmarks run PgBouncer
    with (`tests/pgbouncer.py`)."""
    from tests import pgbouncer

    config = pgbouncer.CONFIG.format(
        port=6432, directory="DIR", server_connections=8, packet_buffer=pgbouncer.PACKET_BUFFER
    )
    settings = [line for line in lines(block) if "=" in line]
    assert settings
    for line in settings:
        assert line in config.splitlines(), line


CHECKS: list[tuple[Callable[[str, str], bool], Callable[[str], None]]] = [
    (lambda lang, b: lang == "sql", check_sql),
    (lambda lang, b: b.startswith("./scripts/"), check_setup),
    (lambda lang, b: "export HEADWATER_" in b, check_settings),
    (lambda lang, b: b.startswith("headwater "), check_commands),
    (lambda lang, b: b.startswith(".venv/bin/python -m bench."), check_benchmarks),
    (lambda lang, b: b.startswith("main.py"), check_layout),
    (lambda lang, b: "awaiting_upload" in b, check_lifecycle),
    (lambda lang, b: "outbox.write" in b, check_event_flow),
    (lambda lang, b: b.startswith("[pgbouncer]"), check_pgbouncer),
]

LISTINGS = listings()


@pytest.mark.parametrize(
    ("page", "lang", "block"),
    LISTINGS,
    ids=[f"{page}:{block.splitlines()[0][:30]}" for page, _, block in LISTINGS],
)
def test_each_listing_of_the_docs_holds_true_of_the_code(page: str, lang: str, block: str) -> None:
    matching = [check for matches, check in CHECKS if matches(lang, block)]
    assert len(matching) == 1, f"{page}: no one check for this listing:\n{block}"
    matching[0](block)


def test_every_kind_of_listing_is_in_the_docs() -> None:
    """Each check has a listing to hold (a check left without one means a page lost it
    or its first line changed)."""
    for matches, check in CHECKS:
        assert any(matches(lang, block) for _, lang, block in LISTINGS), check.__name__
