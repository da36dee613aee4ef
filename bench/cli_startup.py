"""Start-up (issues 18 and 24): wall time of `headwater --help`, of `headwater companies
create` on SQLite, and of what an API process does before it serves (`import
headwater.main` and `create_app()`), median of --runs, optionally A/B against an older
revision of this repository (a git worktree, run with this .venv), alternating the two
in the same minutes.

    .venv/bin/python -m bench.cli_startup [--runs 5] [--against befad81]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = ["-m", "headwater.cli"]
COMMANDS = {
    "--help": [*CLI, "--help"],
    "companies create": [*CLI, "companies", "create", "Bench"],
    "API app (serve)": ["-c", "import headwater.main; headwater.main.create_app()"],
}


def timed(src: Path, data: Path, argv: list[str]) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}
    env |= {"PYTHONPATH": str(src), "HEADWATER_DATA_DIR": str(data)}
    start = time.perf_counter()
    subprocess.run([sys.executable, *argv], env=env, check=True, capture_output=True)
    return time.perf_counter() - start


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
            times: dict[tuple[str, str], list[float]] = {}
            for name, src in trees.items():  # each its own database, migrated once
                timed(src, Path(scratch) / name.replace(" ", "-"), COMMANDS["companies create"])
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
        runs = " ".join(f"{v:.2f}" for v in values)
        print(f"{name:12s} {label:17s} median {statistics.median(values):.2f} s  ({runs})")


if __name__ == "__main__":
    main()
