"""Start-up (issues 18, 24 and 35): wall and CPU time (user + system, the process's
own) of `headwater --help` and `headwater-client --help`, of operator commands on
SQLite (`companies create`, `credentials create`, `datasets show`), and of what an API
process does before it serves (`import headwater.main` and `create_app()`), median of
--runs, beside the bare interpreter's start (`python -c pass`, the anchor, in turns with
them), optionally A/B against an older revision of this repository (a git worktree,
run with this .venv), alternating the two in the same minutes. Targets (issue 35): an
operator command <= 0.5 s CPU beside its database work, `--help` <= 0.3 s CPU.

    .venv/bin/python -m bench.cli_startup [--runs 5] [--against befad81]
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


def prepare(src: Path, data: Path) -> None:
    """A database with the client and dataset `datasets show` reads."""
    company = subprocess.run(
        [sys.executable, *CLI, "companies", "create", "Bench"],
        env=_env(src, data),
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
            [sys.executable, *argv], env=_env(src, data), check=True, capture_output=True
        )


def _env(src: Path, data: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}
    return env | {"PYTHONPATH": str(src), "HEADWATER_DATA_DIR": str(data), "COLUMNS": "100"}


def timed(src: Path, data: Path, argv: list[str]) -> tuple[float, float]:
    """Wall seconds, and the CPU seconds (user + system) of the process alone."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, *argv], env=_env(src, data), check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--against", help="a revision to compare with (git worktree)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        trees = {"this tree": ROOT / "src"}
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
            trees = {args.against: old / "src", **trees}
        try:
            times: dict[tuple[str, str], list[tuple[float, float]]] = {}
            for name, src in trees.items():  # each its own database, migrated once
                prepare(src, Path(scratch) / name.replace(" ", "-"))
            for _ in range(args.runs):
                for name, src in trees.items():
                    for label, argv in COMMANDS.items():
                        data = Path(scratch) / name.replace(" ", "-")
                        times.setdefault((name, label), []).append(timed(src, data, argv))
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


if __name__ == "__main__":
    main()
