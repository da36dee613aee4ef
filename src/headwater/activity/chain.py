"""The hash chain: pure functions, no database.

hash(n) = sha256(hash(n-1) "\\n" canonical-json(entry n)), with hash(0) = 64 zeros. The
canonical form covers every field the API shows plus the entry id and company; `seq` is
left out so that a row moved to another position breaks the link to its predecessor and
is reported as reordered rather than altered.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

GENESIS = "0" * 64


def canonical(fields: Mapping[str, Any]) -> bytes:
    return json.dumps(
        fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def link(prev_hash: str, fields: Mapping[str, Any]) -> str:
    return hashlib.sha256(prev_hash.encode() + b"\n" + canonical(fields)).hexdigest()


@dataclass(frozen=True)
class Link:
    """What verification needs of one stored entry."""

    seq: int
    fields: Mapping[str, Any]
    prev_hash: str
    hash: str


@dataclass(frozen=True)
class Finding:
    kind: str  # "altered", "missing", "reordered"
    seq: int
    detail: str


@dataclass(frozen=True)
class Head:
    count: int
    hash: str


def walk(links: Iterable[Link]) -> tuple[Head, Finding | None]:
    """Follow the chain in `seq` order; the head reached and the first break, if any."""
    expected_prev, expected_seq = GENESIS, 1
    for entry in links:
        if entry.seq > expected_seq:
            return Head(expected_seq - 1, expected_prev), Finding(
                "missing",
                expected_seq,
                f"entry {expected_seq} is missing (the next stored entry is {entry.seq})",
            )
        if entry.seq < expected_seq:
            return Head(expected_seq - 1, expected_prev), Finding(
                "reordered", entry.seq, f"entry {entry.seq} appears twice"
            )
        if link(entry.prev_hash, entry.fields) != entry.hash:
            return Head(expected_seq - 1, expected_prev), Finding(
                "altered", entry.seq, f"entry {entry.seq} does not match its hash"
            )
        if entry.prev_hash != expected_prev:
            return Head(expected_seq - 1, expected_prev), Finding(
                "reordered",
                entry.seq,
                f"entry {entry.seq} does not follow entry {entry.seq - 1}",
            )
        expected_prev, expected_seq = entry.hash, expected_seq + 1
    return Head(expected_seq - 1, expected_prev), None


def compare(reached: Head, expected: Head, *, source: str, exact: bool) -> Finding | None:
    """Check the chain's end against a head kept elsewhere (the head row or a checkpoint).

    A checkpoint is an earlier head, so the chain may have grown past it; the head row
    must match `exact`ly.
    """
    if reached.count < expected.count:
        return Finding(
            "missing",
            reached.count + 1,
            f"entries {reached.count + 1}..{expected.count} are missing ({source} counts "
            f"{expected.count})",
        )
    if exact and reached != expected:
        return Finding(
            "altered",
            expected.count + (reached.count > expected.count),
            f"the chain ends at entry {reached.count} but {source} says {expected.count} "
            "with another hash",
        )
    return None


def matches_checkpoint(hash_at_count: str | None, checkpoint: Head) -> Finding | None:
    """The entry at the checkpoint's position must still carry the checkpoint's hash."""
    if checkpoint.count == 0 or hash_at_count == checkpoint.hash:
        return None
    return Finding(
        "altered",
        checkpoint.count,
        f"entry {checkpoint.count} differs from the checkpoint: history was rewritten",
    )
