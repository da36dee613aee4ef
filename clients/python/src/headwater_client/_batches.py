"""Cutting a stream of records into push bodies within the service's limits."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from headwater_client.errors import HeadwaterError

# The service's defaults (HEADWATER_MAX_BATCH_RECORDS, HEADWATER_MAX_BODY_BYTES).
MAX_BATCH_RECORDS = 1000
MAX_BATCH_BYTES = 5 * 1024 * 1024


class InvalidRecord(HeadwaterError, ValueError):
    """A record that cannot be sent: not a JSON object, not JSON-serialisable, or alone
    larger than a push body may be. `index` is its position in the caller's iterable."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(f"record {index} {reason}")
        self.index = index


def encode_record(index: int, record: Any) -> bytes:
    if not isinstance(record, Mapping):
        raise InvalidRecord(index, f"is a {type(record).__name__}, not a JSON object")
    try:
        text = json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidRecord(index, f"cannot be sent as JSON: {exc}") from None
    return text.encode()


@dataclass(frozen=True, slots=True)
class Batch:
    """Records `first_record`.. of the caller's iterable, each already encoded."""

    first_record: int
    parts: tuple[bytes, ...]
    prefix: bytes

    @property
    def count(self) -> int:
        return len(self.parts)

    @property
    def body(self) -> bytes:
        return self.prefix + b",".join(self.parts) + b"]}"

    def idempotency_key(self, base: str) -> str:
        # Stable for the same records at the same place of the same push, so that a
        # retry, or a rerun with the caller's own key, is answered from the first try.
        return f"{base}-{self.first_record}-{self.count}"

    def halves(self) -> tuple[Batch, Batch]:
        middle = self.count // 2
        return (
            Batch(self.first_record, self.parts[:middle], self.prefix),
            Batch(self.first_record + middle, self.parts[middle:], self.prefix),
        )


class Batcher:
    """Gathers encoded records into batches of at most `max_records` records and
    `max_bytes` bytes of body. Feed it with `add`; `flush` gives the last batch.
    The limits only shrink, when the service turns out to allow less (`shrink`)."""

    def __init__(
        self,
        *,
        client_id: str,
        dataset_id: str,
        max_records: int = MAX_BATCH_RECORDS,
        max_bytes: int = MAX_BATCH_BYTES,
    ) -> None:
        envelope = json.dumps({"client_id": client_id, "dataset_id": dataset_id})
        self.prefix = (envelope[:-1] + ', "data": [').encode()
        self.max_records = max_records
        self.max_bytes = max_bytes
        self._record_limit = max_bytes - self._overhead
        self._parts: list[bytes] = []
        self._first = 0
        self._size = 0

    @property
    def _overhead(self) -> int:
        return len(self.prefix) + 2

    def add(self, index: int, record: Any) -> Batch | None:
        """Take record `index`; answers the batch it closed, if it closed one."""
        encoded = encode_record(index, record)
        if len(encoded) > self._record_limit:
            raise InvalidRecord(
                index,
                f"is {len(encoded)} bytes as JSON; a push body may hold {self._record_limit}",
            )
        full = len(self._parts) >= self.max_records or (
            self._overhead + self._size + len(encoded) + 1 > self.max_bytes
        )
        closed = self.flush() if full else None
        if not self._parts:
            self._first = index
        self._parts.append(encoded)
        self._size += len(encoded) + 1
        return closed

    def flush(self) -> Batch | None:
        if not self._parts:
            return None
        batch = Batch(self._first, tuple(self._parts), self.prefix)
        self._parts, self._size = [], 0
        return batch

    def fits(self, batch: Batch) -> bool:
        """Whether `batch`, cut before the limits shrank, is within them still."""
        return batch.count <= self.max_records and len(batch.body) <= self.max_bytes

    def shrink(self, batch: Batch, *, code: str) -> None:
        """The service refused `batch` as too large (`batch_too_large`: too many records;
        otherwise too many bytes): later batches are cut at half its size, so that
        `batch` itself no longer `fits`."""
        if code == "batch_too_large":
            self.max_records = min(self.max_records, max(1, batch.count // 2))
        else:
            self.max_bytes = min(self.max_bytes, max(1, len(batch.body) // 2))
