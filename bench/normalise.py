"""Whether normalising a CSV file a column at a time pays (issue 33, item 6).

`Normaliser.table` normalises a file's rows a column at a time; the row path
(`Normaliser.__call__` on each row's dict) gives the same records. This times both on
`bench.file_ingest`'s rows (10 columns: text, e-mail, number, integer, boolean,
date-time with `Z`, enum, two patterns), with type coercion on as a CSV dataset has it,
A B A B in the same process, and checks they agree. The anchor is the least work either
path must do: making the rows' dicts (`dict(zip(header, row))`).

    uv run python -m bench.normalise [--rows 200000 --rounds 3]
"""

from __future__ import annotations

import argparse
import csv
import io
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.file_ingest import SCHEMA, csv_chunks
from headwater.ingestion.normalise import Options, compile_normaliser


def _rows(count: int) -> tuple[list[str], list[list[str]]]:
    text = b"".join(csv_chunks(count)).decode()
    reader = csv.reader(io.StringIO(text))
    header = next(reader)
    return header, list(reader)


def _rate(work: Callable[[], Any], rows: int) -> float:
    started = time.perf_counter()
    work()
    return rows / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    header, rows = _rows(args.rows)
    normaliser = compile_normaliser(SCHEMA, Options(coerce_types=True))
    by_rows = [normaliser(dict(zip(header, row, strict=True))) for row in rows]
    assert normaliser.table(header, rows) == by_rows, "the two paths disagree"
    paths: dict[str, Callable[[], Any]] = {
        "dicts only (anchor)": lambda: [dict(zip(header, row, strict=True)) for row in rows],
        "row at a time": lambda: [normaliser(dict(zip(header, row, strict=True))) for row in rows],
        "column at a time": lambda: normaliser.table(header, rows),
    }
    rates: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(args.rounds):
        for name, work in paths.items():
            rates[name].append(_rate(work, len(rows)))
    print(f"{len(rows):,} rows, {args.rounds} rounds (median rows/s):")
    median = {name: statistics.median(found) for name, found in rates.items()}
    for name, rate in median.items():
        print(f"  {name:22s} {rate:12,.0f}")
    print(
        f"column / row: {median['column at a time'] / median['row at a time']:.2f}x; "
        f"row path at {median['row at a time'] / median['dicts only (anchor)']:.2f} "
        f"and column path at {median['column at a time'] / median['dicts only (anchor)']:.2f} "
        "of making the dicts"
    )


if __name__ == "__main__":
    main()
