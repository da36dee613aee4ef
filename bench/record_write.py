"""How a batch of records is best handed to PostgreSQL (issue 24's "try binary COPY").

Writes 500-record batches of bench.ingest's 1 KB records into a migrated `records`
table, one client, three ways in turn (A B C A B C ...):

  (S) the sink's statement: the texts as one binary text[], INSERT ... SELECT FROM
      unnest(...) WITH ORDINALITY, in autocommit (`headwater.ingestion.sinks._UNNEST`)
  (R) binary COPY, psycopg's write_row for each row, in a transaction (what
      bench.common.copy_limit does: the issues' "physical limit")
  (B) binary COPY of one block built in Python (ids made in bulk), in a transaction

and prints, per batch (medians): the wall time, the client's CPU and the PostgreSQL
backend's CPU (from /proc: run it on the database's machine), and their sum, which is
what a batch costs a machine where both share the cores.

    .venv/bin/python -m bench.record_write [--batches 200]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from bench.common import RECORD_COPY_COLUMNS, RECORD_COPY_TYPES, bench_database, process_cpu
from bench.validate import record

COPY_IN = f"COPY records ({RECORD_COPY_COLUMNS}) FROM STDIN (FORMAT BINARY)"
SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
TRAILER = b"\xff\xff"
EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
# a version 4 UUID: random but for its version (4) and variant (10) bits
V4_MASK = bytes.fromhex("ffffffffffff0fff3fffffffffffffff")
V4_BITS = bytes.fromhex("00000000000040008000000000000000")


def uuid4_block(count: int) -> bytes:
    """`count` version 4 UUIDs, 16 bytes each, made in a few C-speed steps."""
    raw = int.from_bytes(os.urandom(16 * count), "big")
    mask = int.from_bytes(V4_MASK * count, "big")
    bits = int.from_bytes(V4_BITS * count, "big")
    return ((raw & mask) | bits).to_bytes(16 * count, "big")


def copy_block(
    ids: tuple[uuid.UUID, uuid.UUID, uuid.UUID], at: datetime, texts: list[bytes]
) -> bytes:
    """The binary COPY data of one batch (every column but the id and the text is the
    same for each row)."""
    company, dataset, transaction = ids
    micros = (at - EPOCH) // timedelta(microseconds=1)
    same = b"".join(
        [
            *(b"\x00\x00\x00\x10" + value.bytes for value in (company, dataset, transaction)),
            b"\x00\x00\x00\x04" + struct.pack("!i", 1),
            b"\x00\x00\x00\x08" + struct.pack("!q", micros),
        ]
    )
    record_ids = uuid4_block(len(texts))
    parts = [SIGNATURE]
    for index, text in enumerate(texts):
        parts += (
            b"\x00\x07\x00\x00\x00\x10",
            record_ids[16 * index : 16 * index + 16],
            same,
            len(text).to_bytes(4, "big"),
            text,
        )
    parts.append(TRAILER)
    return b"".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=200)
    args = parser.parse_args()

    from headwater.config import Settings
    from headwater.ingestion.sinks import _UNNEST
    from headwater.migrations import upgrade

    batch = [record(i) | {"notes": "n" * 500} for i in range(500)]
    texts = [json.dumps(r, separators=(",", ":")) for r in batch]
    encoded = [text.encode() for text in texts]
    company, dataset = uuid.uuid4(), uuid.uuid4()

    def statement(conn: psycopg.Connection[Any]) -> None:
        conn.execute(
            _UNNEST,
            {
                "company_id": company,
                "dataset_pk": dataset,
                "transaction_id": uuid.uuid4(),
                "schema_version": 1,
                "ingested_at": datetime.now(UTC),
                "data": texts,
            },
        )

    def rows(conn: psycopg.Connection[Any]) -> None:
        transaction, now = uuid.uuid4(), datetime.now(UTC)
        with (
            conn.transaction(),
            conn.cursor().copy(COPY_IN) as copy,
        ):
            copy.set_types(RECORD_COPY_TYPES)
            for text in texts:
                copy.write_row((uuid.uuid4(), company, dataset, transaction, 1, now, text))

    def block(conn: psycopg.Connection[Any]) -> None:
        data = copy_block((company, dataset, uuid.uuid4()), datetime.now(UTC), encoded)
        with (
            conn.transaction(),
            conn.cursor().copy(COPY_IN) as copy,
        ):
            copy.write(data)

    ways: dict[str, Callable[[psycopg.Connection[Any]], None]] = {
        "(S) the sink's INSERT ... unnest": statement,
        "(R) binary COPY, write_row": rows,
        "(B) binary COPY, one block": block,
    }
    with bench_database("headwater_bench_record_write") as url:
        upgrade(Settings(database_url=url))
        with psycopg.connect(url, autocommit=True) as conn:
            backend = conn.execute("SELECT pg_backend_pid()").fetchone()
            assert backend is not None
            pid = backend[0]

            wall: dict[str, list[float]] = {name: [] for name in ways}
            client: dict[str, list[float]] = {name: [] for name in ways}
            server: dict[str, float] = dict.fromkeys(ways, 0.0)
            for _ in range(args.batches):
                for name, write in ways.items():
                    before = process_cpu(pid)
                    began, cpu = time.perf_counter(), time.process_time()
                    write(conn)
                    wall[name].append(time.perf_counter() - began)
                    client[name].append(time.process_time() - cpu)
                    server[name] += process_cpu(pid) - before
            stored = conn.execute("SELECT count(*) FROM records").fetchone()
            # every way stored each text as it was given
            same = conn.execute(
                "SELECT count(*) FROM records WHERE data::text = %s", (texts[0],)
            ).fetchone()
    print(f"{args.batches} batches of 500 records (~{len(encoded[0])} bytes) each way, one client")
    print(f"{'':34s} {'wall ms':>8s} {'client CPU':>11s} {'server CPU':>11s} {'CPU sum':>8s}")
    for name in ways:
        mine = statistics.median(client[name]) * 1e3
        theirs = server[name] / args.batches * 1e3  # a mean: /proc counts in ticks
        print(
            f"{name:34s} {statistics.median(wall[name]) * 1e3:8.2f} {mine:11.2f} "
            f"{theirs:11.2f} {mine + theirs:8.2f}"
        )
    assert stored is not None and stored[0] == 3 * 500 * args.batches, stored
    assert same is not None and same[0] == 3 * args.batches, same


if __name__ == "__main__":
    main()
