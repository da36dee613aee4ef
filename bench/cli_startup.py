"""Start-up (issues 18, 24 and 35): wall and CPU time (user + system, the process's
own) of `headwater --help` and `headwater-client --help`, of operator commands on
SQLite (`companies create`, `credentials create`, `datasets show`), and of what an API
process does before it serves (`import headwater.main` and `create_app()`), median of
--runs, beside the bare interpreter's start (`python -c pass`, the anchor, in turns with
them), optionally A/B against an older revision of this repository (a git worktree,
run with this .venv), alternating the two in the same minutes. Targets (issue 35): an
operator command <= 0.5 s CPU beside its database work, `--help` <= 0.3 s CPU. An
operator command's own work is its second run in one process, everything imported.

    .venv/bin/python -m bench.cli_startup [--runs 5] [--against befad81] [--no-bytecode-too]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = ["-m", "headwater.cli"]
SCHEMA = ROOT / "bench" / "cli_schema.json"
# The anchor: the bare interpreter starting and stopping, in turns with the commands.
BARE = "bare python"
COMMANDS = {
    BARE: ["-c", "pass"],
    "--help": [*CLI, "--help"],
    "client --help": ["-m", "headwater_client.cli", "--help"],
    "companies create": [*CLI, "companies", "create", "Bench"],
    "credentials create": [*CLI, "credentials", "create", "ops", "--scope", "admin"],
    "datasets show": [*CLI, "datasets", "show", "bench-crm", "orders"],
    "API app (serve)": ["-c", "import headwater.main; headwater.main.create_app()"],
}


# An operator command's own work: run twice in one process, the second timed, when
# everything it imports is loaded already. What a command costs beside that is its start.
OPERATOR = ("companies create", "credentials create", "datasets show")
OWN_WORK = """
import sys, time
from headwater.cli import app

def run():
    try:
        app(args=sys.argv[1:], standalone_mode=False)
    except SystemExit:
        pass

run()
start = time.process_time()
run()
print(time.process_time() - start, file=sys.stderr)
"""


@dataclass
class Tree:
    """Source to run, and what its processes' environment adds."""

    src: Path
    env: dict[str, str] = field(default_factory=dict)


def own_work(tree: Tree, data: Path, argv: list[str]) -> float:
    """CPU seconds of the command's second run in one process (its database work)."""
    done = subprocess.run(
        [sys.executable, "-c", OWN_WORK, *argv[len(CLI) :]],
        env=_env(tree, data),
        check=True,
        capture_output=True,
        text=True,
    )
    return float(done.stderr.strip().splitlines()[-1])


def prepare(tree: Tree, data: Path) -> None:
    """A database with the client and dataset `datasets show` reads."""
    company = subprocess.run(
        [sys.executable, *CLI, "companies", "create", "Bench"],
        env=_env(tree, data),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    company_id = json.loads(company)["id"]
    for argv in (
        [*CLI, "clients", "create", company_id, "bench-crm", "Bench"],
        [*CLI, "datasets", "register", "bench-crm", "orders", str(SCHEMA)],
    ):
        subprocess.run(
            [sys.executable, *argv], env=_env(tree, data), check=True, capture_output=True
        )


def _env(tree: Tree, data: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}
    own = {"PYTHONPATH": str(tree.src), "HEADWATER_DATA_DIR": str(data), "COLUMNS": "100"}
    return env | own | tree.env


def timed(tree: Tree, data: Path, argv: list[str]) -> tuple[float, float]:
    """Wall seconds, and the CPU seconds (user + system) of the process alone."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, *argv], env=_env(tree, data), check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--against", help="a revision to compare with (git worktree)")
    parser.add_argument(
        "--no-bytecode-too",
        action="store_true",
        help="also run this tree as with no bytecode written (every module compiled at start)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        trees = {"this tree": Tree(ROOT / "src")}
        if args.no_bytecode_too:
            empty = {"PYTHONPYCACHEPREFIX": str(Path(scratch) / "no-bytecode")}
            trees["no bytecode"] = Tree(ROOT / "src", empty | {"PYTHONDONTWRITEBYTECODE": "1"})
        if args.against:
            old = Path(scratch) / "old"
            subprocess.run(
                [
                    "git",
                    "-C",
                    str(ROOT),
                    "worktree",
                    "add",
                    "-q",
                    "--detach",
                    str(old),
                    args.against,
                ],
                check=True,
            )
            trees = {args.against: Tree(old / "src"), **trees}
        try:
            times: dict[tuple[str, str], list[tuple[float, float]]] = {}
            for name, tree in trees.items():  # each its own database, migrated once
                prepare(tree, Path(scratch) / name.replace(" ", "-"))
            work: dict[tuple[str, str], list[float]] = {}
            for _ in range(args.runs):
                for name, tree in trees.items():
                    data = Path(scratch) / name.replace(" ", "-")
                    for label, argv in COMMANDS.items():
                        times.setdefault((name, label), []).append(timed(tree, data, argv))
                    for label in OPERATOR:
                        work.setdefault((name, label), []).append(
                            own_work(tree, data, COMMANDS[label])
                        )
        finally:
            if args.against:
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)],
                    check=False,
                )
    for (name, label), values in times.items():
        wall = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        bare = statistics.median(v[1] for v in times[(name, BARE)])
        runs = " ".join(f"{v[1]:.2f}" for v in values)
        print(
            f"{name:12s} {label:19s} wall {wall:.2f} s  CPU {cpu:.2f} s = {cpu / bare:.1f}x "
            f"the bare interpreter's {bare:.2f} s  (CPU: {runs})"
        )
        if (name, label) in work:
            own = statistics.median(work[(name, label)])
            print(
                f"{'':32s} its own work (database) {own:.3f} s CPU; "
                f"beside it {cpu - own:.2f} s (target <= 0.5)"
            )


if __name__ == "__main__":
    main()
