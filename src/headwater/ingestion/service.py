"""Pushing JSON: a batch checked and stored atomically, idempotent by key, alone or in
a group commit (`push`, `push_group`, `decide_group`)."""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    delete,
    select,
)
from sqlalchemy.orm import Session

from headwater.config import Settings
from headwater.db import Database, dialect_insert
from headwater.errors import DomainError, MalformedJSON, is_unreachable
from headwater.identity.tokens import Principal
from headwater.ingestion import (
    check,
    compiling,
    datasets,
    dedupe,
    lifecycle,
    repository,
    sinks,
)
from headwater.ingestion.errors import (
    BatchTooLarge,
    IdempotencyKeyReused,
    InvalidEnvelope,
)
from headwater.ingestion.models import IdempotencyKey, Transaction
from headwater.ingestion.schemas import (
    ID_PATTERN,
)
from headwater.ingestion.sinks import RecordBatch
from headwater.kit import strictjson
from headwater.kit.clock import utcnow, utcnow_ms

_ID = re.compile(ID_PATTERN)
_ENVELOPE = ("client_id", "dataset_id", "data")


@dataclass(frozen=True, slots=True)
class Limits:
    max_records: int
    max_depth: int
    idempotency_ttl: timedelta

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        """The installation's limits of a push."""
        return cls(
            max_records=settings.max_batch_records,
            max_depth=settings.max_json_depth,
            idempotency_ttl=timedelta(seconds=settings.idempotency_ttl_seconds),
        )


@dataclass(frozen=True, slots=True)
class Pushed:
    """A push's outcome: its transaction (final, as `lifecycle.new` made it or as stored),
    and whether it is answered again for an Idempotency-Key. The router renders it: 200
    for `completed`, 422 for `rejected`."""

    transaction: Mapping[str, Any]
    replayed: bool = False

    @property
    def accepted(self) -> bool:
        return bool(self.transaction["status"] == lifecycle.Status.COMPLETED)


# --- push -------------------------------------------------------------------------------------


def may_hold_nul(body: bytes) -> bool:
    """Whether a strict JSON body can hold U+0000 in a string: only escaped (`\\u0000`), as
    JSON allows no raw control character in a string. Most bodies hold no backslash at
    all, which one memchr tells."""
    return b"\\" in body and b"\\u0000" in body


def envelope(body: bytes, *, limits: Limits) -> tuple[str, str, list[Any]]:
    """The envelope's members, checked; the records as a list (one object is a batch of 1)."""
    try:
        document = strictjson.loads(body, max_depth=limits.max_depth)
    except strictjson.StrictJSONError as exc:
        raise MalformedJSON.of(exc) from None
    if not isinstance(document, dict):
        raise InvalidEnvelope([("", "the body must be a JSON object")])
    problems: list[tuple[str, str]] = [
        (f"/{name}", "unknown member; the envelope takes client_id, dataset_id and data")
        for name in document
        if name not in _ENVELOPE
    ]
    for name in ("client_id", "dataset_id"):
        value = document.get(name)
        if value is None:
            problems.append((f"/{name}", "required"))
        elif not isinstance(value, str) or not _ID.match(value):
            problems.append((f"/{name}", f"must be a string matching {ID_PATTERN}"))
    data = document.get("data")
    records: list[Any] = []
    if "data" not in document:
        problems.append(("/data", "required"))
    elif isinstance(data, dict):
        records = [data]
    elif isinstance(data, list):
        if not data:
            problems.append(("/data", "an empty array holds no records"))
        problems.extend(
            (f"/data/{i}", "each record must be a JSON object")
            for i, item in enumerate(data)
            if not isinstance(item, dict)
        )
        records = data
    else:
        problems.append(("/data", "must be an object (one record) or an array of objects"))
    if problems:
        raise InvalidEnvelope(problems[:100])
    if len(records) > limits.max_records:
        raise BatchTooLarge(
            f"The batch holds {len(records)} records; the limit is {limits.max_records}."
        )
    return document["client_id"], document["dataset_id"], records


@dataclass(frozen=True, slots=True)
class _Target:
    dataset_pk: uuid.UUID
    version: int
    compiled: compiling.Compiled


def _target(connection: Connection, caller: Principal, client_id: str, dataset_id: str) -> _Target:
    """The dataset a push names, in one query; 403 unless the token may use its client."""
    row = (
        repository.target(connection, client_id, dataset_id)
        if caller.may_use_client(client_id)
        else None
    )
    return _resolve(connection, caller, client_id, dataset_id, row)


def _resolve(
    connection: Connection, caller: Principal, client_id: str, dataset_id: str, row: Any
) -> _Target:
    """The target of a push from its `repository.target` row: 403 for a client the token
    may not use (or None), 404 for a dataset the client does not have."""
    row = datasets.usable_target(caller, client_id, dataset_id, row)
    return _Target(
        dataset_pk=row.id, version=row.schema_version, compiled=_compiled(connection, row)
    )


def _compiled(connection: Connection, row: Any) -> compiling.Compiled:
    """The validator and normaliser of a `repository.target` row's dataset (compiled, and
    its schema read, the first time)."""
    return compiling.compiled(
        connection,
        dataset_pk=row.id,
        version=row.schema_version,
        options=row.options,
        coerce=None,
        transform_version=row.transform_version,
        subjects_version=row.subjects_version,
    )


_REPLAY = select(
    IdempotencyKey.request_hash,
    IdempotencyKey.created_at.label("key_created_at"),
    *lifecycle.COLUMNS,
).join(Transaction, Transaction.id == IdempotencyKey.transaction_id)


def _replay(
    connection: Connection, *, company_id: uuid.UUID, key: str, request_hash: str, limits: Limits
) -> Pushed | None:
    """The outcome of the push that holds the key, if it is within its window (409 for
    another body)."""
    row = connection.execute(
        _REPLAY.where(IdempotencyKey.company_id == company_id, IdempotencyKey.key == key)
    ).one_or_none()
    if row is None or row.key_created_at < utcnow() - limits.idempotency_ttl:
        return None
    if row.request_hash != request_hash:
        raise IdempotencyKeyReused(
            "This Idempotency-Key was used with a different body in the last "
            f"{int(limits.idempotency_ttl.total_seconds() // 3600)} h; use a new key."
        )
    transaction = {column.name: getattr(row, column.name) for column in lifecycle.COLUMNS}
    return Pushed(transaction, replayed=True)


def _claim(
    connection: Connection,
    *,
    company_id: uuid.UUID,
    key: str,
    request_hash: str,
    transaction_id: uuid.UUID,
    limits: Limits,
) -> bool:
    """Insert the key, naming the push's transaction; False if another request holds it.

    On PostgreSQL a concurrent request with the same key waits here until the first
    commits (then finds its row) or rolls back (then takes the key itself).
    """
    now = utcnow_ms()
    connection.execute(
        delete(IdempotencyKey).where(
            IdempotencyKey.company_id == company_id,
            IdempotencyKey.key == key,
            IdempotencyKey.created_at < now - limits.idempotency_ttl,
        )
    )
    result = connection.execute(
        dialect_insert(connection.dialect)(IdempotencyKey)
        .values(
            company_id=company_id,
            key=key,
            request_hash=request_hash,
            transaction_id=transaction_id,
            created_at=now,
        )
        .on_conflict_do_nothing(index_elements=["company_id", "key"])
        .returning(IdempotencyKey.key)
    )
    return result.first() is not None


@dataclass(frozen=True, slots=True)
class _Checked:
    """A push normalised and validated: its transaction row (final), and its records
    with the JSON texts known of them, when accepted."""

    transaction: dict[str, Any]
    batch: RecordBatch | None


def _check(
    caller: Principal,
    client_id: str,
    dataset_id: str,
    records: list[Any],
    target: _Target,
    *,
    nul: bool,
) -> _Checked:
    """Normalise and validate the records (no database work). `nul`: the body may hold
    U+0000, which no record may (keyword `characters`)."""
    # each record normalised, with its JSON text when normalising left it as it was
    cleaned, texts, errors = check.batch(target.compiled, records, nul=nul)
    error_count = errors.count
    # the dataset's steps, on a batch that will be stored
    kept = (
        check.Kept(records=[]) if error_count else check.transform(target.compiled, cleaned, texts)
    )
    received_at = utcnow_ms()
    transaction = lifecycle.new(
        channel="api",
        kind="json",
        status=lifecycle.Status.REJECTED if error_count else lifecycle.Status.COMPLETED,
        company_id=caller.actor.company_id,
        dataset_pk=target.dataset_pk,
        client_id=client_id,
        dataset_id=dataset_id,
        author_id=caller.author_id,
        created_at=received_at,
        schema_version=target.version,
        transform_version=target.compiled.transform_version,
        records_received=len(records),
        records_accepted=len(kept.records),
        records_rejected=errors.records,
        records_filtered=kept.filtered,
        records_duplicates=kept.duplicates,
        records_suppressed=kept.suppressed,
        error_count=error_count,
        errors=errors.listed,
    )
    if error_count:
        return _Checked(transaction, None)
    batch = RecordBatch(
        records=kept.records,
        company_id=transaction["company_id"],
        dataset_pk=target.dataset_pk,
        transaction_id=transaction["id"],
        schema_version=target.version,
        ingested_at=received_at,
        texts=kept.texts,
        transform_version=target.compiled.transform_version,
        digests=kept.digests,
        window=kept.window,
        subjects=kept.subjects,
    )
    return _Checked(transaction, batch)


def _store(
    connection: Connection,
    transactions: Sequence[dict[str, Any]],
    batches: Sequence[RecordBatch],
) -> None:
    """Write checked pushes: their final transactions with their events, and the records
    of those accepted (the database's sink). Records of a dataset with a `dedupe` step
    claim their digests first, in the same database transaction (`claims`), and those
    found duplicates are counted so and not stored."""
    if claims(batches):
        batches, lost = dedupe.claim(connection, batches)
        _count_duplicates(transactions, lost)
    sinks.for_dialect(connection.dialect.name).store(connection, transactions, batches)


def _count_duplicates(transactions: Sequence[dict[str, Any]], lost: dict[uuid.UUID, int]) -> None:
    """Records the claims found duplicates: not stored, counted so."""
    for transaction in transactions:
        count = lost.get(transaction["id"], 0)
        transaction["records_accepted"] -= count
        transaction["records_duplicates"] += count


async def claim_on_loop(
    connection: Any, transactions: Sequence[dict[str, Any]], batches: Sequence[RecordBatch]
) -> Sequence[RecordBatch]:
    """`_store`'s claims for a group written on the event loop (`sinks.ClaimAsync`)."""
    stored, lost = await dedupe.claim_async(connection, batches)
    _count_duplicates(transactions, lost)
    return stored


def claims(batches: Sequence[RecordBatch]) -> bool:
    """Whether a write of these batches claims dedupe digests: it is then a database
    transaction (`Database.begin`), never one statement in autocommit."""
    return any(batch.claims for batch in batches)


def _rows(pushes: Sequence[_Checked]) -> tuple[list[dict[str, Any]], list[RecordBatch]]:
    """The transactions and record batches of checked pushes, as a sink takes them."""
    return (
        [push.transaction for push in pushes],
        [push.batch for push in pushes if push.batch is not None],
    )


def push(
    db: Database,
    caller: Principal,
    *,
    body: bytes,
    idempotency_key: str | None,
    limits: Limits,
) -> Pushed:
    """Normalise and validate every record, then store all of them or none.

    Reads happen outside any transaction, and records are checked before the write
    transaction begins, so it is short. A push is answered only after the commit. A
    rejected push keeps its transaction (status `rejected`, with the errors) and stores
    no record.
    """
    client_id, dataset_id, records = envelope(body, limits=limits)
    company_id = caller.actor.company_id
    # only a keyed push compares bodies: hashing a 5 MiB body is not free
    request_hash = hashlib.sha256(body).hexdigest() if idempotency_key is not None else ""
    with db.read_connection() as connection:
        if idempotency_key is not None:
            replay = _replay(
                connection,
                company_id=company_id,
                key=idempotency_key,
                request_hash=request_hash,
                limits=limits,
            )
            if replay is not None:
                return replay
        target = _target(connection, caller, client_id, dataset_id)

    checked = _check(caller, client_id, dataset_id, records, target, nul=may_hold_nul(body))
    if idempotency_key is None:
        transactions, batches = _rows([checked])
        with db.begin() if claims(batches) else db.atomic() as connection:
            _store(connection, transactions, batches)
        return Pushed(checked.transaction)

    with db.begin() as connection:
        claimed = _claim(
            connection,
            company_id=company_id,
            key=idempotency_key,
            request_hash=request_hash,
            transaction_id=checked.transaction["id"],
            limits=limits,
        )
        if claimed:
            _store(connection, *_rows([checked]))
    if claimed:
        return Pushed(checked.transaction)
    # Another request holds the key and has committed: answer as it did.
    with db.read_connection() as connection:
        replay = _replay(
            connection,
            company_id=company_id,
            key=idempotency_key,
            request_hash=request_hash,
            limits=limits,
        )
    assert replay is not None, "a key that conflicts is held by a committed request"
    return replay


@dataclass(frozen=True, slots=True)
class SmallPush:
    """A push without an Idempotency-Key whose envelope is already read: what a group
    commit takes."""

    caller: Principal
    client_id: str
    dataset_id: str
    records: list[Any]
    nul: bool = False  # `may_hold_nul` of its body


Outcome = Pushed | DomainError


def push_group(db: Database, pushes: Sequence[SmallPush]) -> list[Outcome]:
    """Store many pushes in one atomic write: their outcomes, in their order.

    Each push is resolved, normalised and validated as `push` does; one that is refused
    (403, 404) gets its error, one rejected (422) its transaction, and neither disturbs
    the others. The datasets are read once per (client, dataset) and the write is the
    sink's (one statement on PostgreSQL, in autocommit: `Database.atomic`). If the write
    fails, each push is tried again on its own, so no push is refused for another's
    sake. A database that cannot be reached raises.
    """
    try:
        with db.atomic() as connection:
            rows = {pair: repository.target(connection, *pair) for pair in group_pairs(pushes)}
            decision = decide_group(pushes, rows, lambda row: _compiled(connection, row))
            assert decision is not None  # `_compiled` compiles what it has not yet
            outcomes, transactions, batches = decision
            if transactions and not claims(batches):
                _store(connection, transactions, batches)
        if transactions and claims(batches):
            with db.begin() as connection:
                _store(connection, transactions, batches)
        return outcomes
    except Exception as exc:
        if len(pushes) == 1 or is_unreachable(exc):
            raise
        return [push_group(db, [push])[0] for push in pushes]


def group_pairs(pushes: Sequence[SmallPush]) -> list[tuple[str, str]]:
    """The (client, dataset) pairs a group reads: once each, and only those some push's
    token may use."""
    return list(
        dict.fromkeys(
            (push.client_id, push.dataset_id)
            for push in pushes
            if push.caller.may_use_client(push.client_id)
        )
    )


def decide_group(
    pushes: Sequence[SmallPush],
    rows: dict[tuple[str, str], Any],
    compile_for: Callable[[Any], compiling.Compiled | None],
) -> sinks.Decision | None:
    """Each push resolved from its pair's `repository.target` row (403, 404), then
    normalised and validated with `compile_for(row)`: the outcomes in order, and the
    transactions and batches to store. None where `compile_for` answers None (a schema
    this process has not compiled, which the event loop cannot read)."""
    outcomes: list[Outcome] = []
    checked: list[_Checked] = []
    for push in pushes:
        pair = (push.client_id, push.dataset_id)
        try:
            row = datasets.usable_target(push.caller, *pair, rows.get(pair))
        except DomainError as refused:
            outcomes.append(refused)
            continue
        compiled = compile_for(row)
        if compiled is None:
            return None
        target = _Target(dataset_pk=row.id, version=row.schema_version, compiled=compiled)
        one = _check(push.caller, *pair, push.records, target, nul=push.nul)
        checked.append(one)
        outcomes.append(Pushed(one.transaction))
    return (outcomes, *_rows(checked))


def cached_compiled(row: Any) -> compiling.Compiled | None:
    """A `repository.target` row's validator and normaliser if this process has compiled
    them already (no database work), else None."""
    return compiling.cached_compiled(
        dataset_pk=row.id,
        version=row.schema_version,
        options=row.options,
        coerce=None,
        transform_version=row.transform_version,
        subjects_version=row.subjects_version,
    )


def purge_idempotency_keys(session: Session, *, older_than: timedelta) -> int:
    """Forget keys past their window; answers how many went."""
    result = session.execute(
        delete(IdempotencyKey).where(IdempotencyKey.created_at < utcnow() - older_than)
    )
    session.flush()
    return int(result.rowcount)  # type: ignore[attr-defined]
