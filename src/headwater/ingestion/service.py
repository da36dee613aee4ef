"""Ingestion use cases: push JSON (atomic, idempotent), transactions and records reads."""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import orjson
import psycopg
from sqlalchemy import (
    Connection,
    Select,
    delete,
    func,
    literal,
    select,
    tuple_,
)
from sqlalchemy.orm import Session

from headwater.db import Database, as_sqlalchemy_error, dialect_insert
from headwater.errors import DomainError, MalformedJSON, is_unreachable
from headwater.identity.tokens import Principal
from headwater.ingestion import datasets, repository, validation
from headwater.ingestion.errors import (
    BatchTooLarge,
    DatasetNotFound,
    IdempotencyKeyReused,
    InvalidEnvelope,
    RecordsInvalid,
    TransactionNotFound,
)
from headwater.ingestion.models import Dataset, IdempotencyKey, Record, Transaction
from headwater.ingestion.repository import RecordBatch, count_records, field_equals
from headwater.ingestion.schemas import (
    ID_PATTERN,
    RecordQuery,
    RecordRead,
    TransactionQuery,
    TransactionRead,
)
from headwater.kit import strictjson
from headwater.kit.clock import iso_ms, utcnow, utcnow_ms
from headwater.kit.pagination import paginate

_ID = re.compile(ID_PATTERN)
_ENVELOPE = ("client_id", "dataset_id", "data")
STREAM_BATCH = 1000


@dataclass(frozen=True, slots=True)
class Limits:
    max_records: int
    max_depth: int
    idempotency_ttl: timedelta


@dataclass(frozen=True, slots=True)
class Answer:
    """A push's answer as sent (and as replayed for its idempotency key)."""

    status: int
    body: bytes
    replayed: bool = False


# --- push -------------------------------------------------------------------------------------


def may_hold_nul(body: bytes) -> bool:
    """Whether a strict JSON body can hold U+0000 in a string: only escaped (`\\u0000`), as
    JSON allows no raw control character in a string. One C-speed search."""
    return b"\\u0000" in body


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


def _dataset(session: Session, caller: Principal, client_id: str, dataset_id: str) -> Dataset:
    datasets.usable_client(session, caller, client_id)
    return datasets.find(session, client_id=client_id, dataset_id=dataset_id)


@dataclass(frozen=True, slots=True)
class _Target:
    dataset_pk: uuid.UUID
    version: int
    compiled: datasets.Compiled


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
    row = _usable(caller, client_id, dataset_id, row)
    return _Target(
        dataset_pk=row.id, version=row.schema_version, compiled=_compiled(connection, row)
    )


def _compiled(connection: Connection, row: Any) -> datasets.Compiled:
    """The validator and normaliser of a `repository.target` row's dataset (compiled, and
    its schema read, the first time)."""
    return datasets.compiled(
        connection, dataset_pk=row.id, version=row.schema_version, options=row.options, coerce=None
    )


def _usable(caller: Principal, client_id: str, dataset_id: str, row: Any) -> Any:
    """The `repository.target` row, once the caller may push to it (else 403 or 404)."""
    if not caller.may_use_client(client_id):
        row = None
    datasets.check_usable(caller, client_id, row)
    assert row is not None
    if row.id is None:
        raise DatasetNotFound(f"Client {client_id!r} has no dataset {dataset_id!r}.")
    return row


def _replay(
    connection: Connection, *, company_id: uuid.UUID, key: str, request_hash: str, limits: Limits
) -> Answer | None:
    row = connection.execute(
        select(
            IdempotencyKey.request_hash,
            IdempotencyKey.status_code,
            IdempotencyKey.response,
            IdempotencyKey.created_at,
        ).where(IdempotencyKey.company_id == company_id, IdempotencyKey.key == key)
    ).one_or_none()
    if row is None or row.created_at < utcnow() - limits.idempotency_ttl:
        return None
    if row.request_hash != request_hash:
        raise IdempotencyKeyReused(
            "This Idempotency-Key was used with a different body in the last "
            f"{int(limits.idempotency_ttl.total_seconds() // 3600)} h; use a new key."
        )
    return Answer(status=row.status_code, body=bytes(row.response), replayed=True)


def _claim(
    connection: Connection,
    *,
    company_id: uuid.UUID,
    key: str,
    request_hash: str,
    answer: Answer,
    transaction_id: uuid.UUID,
    limits: Limits,
) -> bool:
    """Insert the key with its answer; False if another request holds it.

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
            status_code=answer.status,
            response=answer.body,
            transaction_id=transaction_id,
            created_at=now,
        )
        .on_conflict_do_nothing(index_elements=["company_id", "key"])
        .returning(IdempotencyKey.key)
    )
    return result.first() is not None


@dataclass(frozen=True, slots=True)
class _Checked:
    """A push normalised and validated: its transaction row, the records to store (None
    when refused) with the JSON texts known of them, and the answer to send once they
    are committed."""

    transaction: dict[str, Any]
    cleaned: list[dict[str, Any]] | None
    texts: list[str | None] | None
    answer: Answer


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
    company_id = caller.actor.company_id
    # each record normalised, with its JSON text when normalising left it as it was
    normalised = list(map(target.compiled.normaliser.with_json, records))
    cleaned = [record for record, _ in normalised]
    error_count, errors = validation.batch_errors(
        target.compiled.validator, cleaned, batch=target.compiled.batch, characters=nul
    )

    transaction_id = uuid.uuid4()
    received_at = utcnow_ms()
    transaction = {
        "id": transaction_id,
        "company_id": company_id,
        "dataset_pk": target.dataset_pk,
        "client_id": client_id,
        "dataset_id": dataset_id,
        "kind": "json",
        "channel": "api",
        "status": "rejected" if error_count else "completed",
        "schema_version": target.version,
        "records_received": len(records),
        "records_accepted": 0 if error_count else len(records),
        "records_rejected": len({e["record"] for e in errors}) if error_count else 0,
        "error_count": error_count,
        "errors": errors,
        "author_id": caller.author_id,
        "created_at": received_at,
        "completed_at": received_at,
    }
    if error_count:
        problem = RecordsInvalid(
            transaction_id=transaction_id, error_count=error_count, errors=errors
        )
        answer = Answer(status=problem.status, body=orjson.dumps(problem.problem()))
    else:
        # PushResult's members, written straight to JSON (the hot path: no model
        # validation of values made just above)
        result = {
            "transaction_id": transaction_id,
            "status": "completed",
            "client_id": client_id,
            "dataset_id": dataset_id,
            "schema_version": target.version,
            "records_received": len(records),
            "records_accepted": len(records),
            "received_at": iso_ms(received_at),
        }
        answer = Answer(status=200, body=orjson.dumps(result))

    return _Checked(
        transaction=transaction,
        cleaned=None if error_count else cleaned,
        texts=None if error_count else [text for _, text in normalised],
        answer=answer,
    )


def _store(connection: Connection, pushes: list[_Checked]) -> None:
    """Write checked pushes: their transaction rows and the records of those accepted
    (`repository.store`: one statement on PostgreSQL)."""
    repository.store(connection, [push.transaction for push in pushes], _batches(pushes))


def _batches(pushes: list[_Checked]) -> list[RecordBatch]:
    return [
        RecordBatch(
            records=push.cleaned,
            company_id=push.transaction["company_id"],
            dataset_pk=push.transaction["dataset_pk"],
            transaction_id=push.transaction["id"],
            schema_version=push.transaction["schema_version"],
            ingested_at=push.transaction["created_at"],
            texts=push.texts,
        )
        for push in pushes
        if push.cleaned is not None
    ]


def push(
    db: Database,
    caller: Principal,
    *,
    body: bytes,
    idempotency_key: str | None,
    limits: Limits,
) -> Answer:
    """Normalise and validate every record, then store all of them or none.

    Reads happen outside any transaction, and records are checked before the write
    transaction begins, so it is short. A 200 answer is sent only after the commit. A
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
    answer, transaction_id = checked.answer, checked.transaction["id"]
    if idempotency_key is None:
        with db.atomic() as connection:
            _store(connection, [checked])
        return answer

    with db.begin() as connection:
        claimed = _claim(
            connection,
            company_id=company_id,
            key=idempotency_key,
            request_hash=request_hash,
            answer=answer,
            transaction_id=transaction_id,
            limits=limits,
        )
        if claimed:
            _store(connection, [checked])
    if claimed:
        return answer
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


def push_group(db: Database, pushes: Sequence[SmallPush]) -> list[Answer | DomainError]:
    """Store many pushes in one atomic write: their answers, in their order.

    Each push is resolved, normalised and validated as `push` does; one that is refused
    (403, 404, 422) gets its error or its rejected transaction and does not disturb the
    others. The datasets are read once per (client, dataset) and the write is one
    statement on PostgreSQL, each in autocommit (`Database.atomic`). If the write fails,
    each push is tried again on its own, so no push is refused for another's sake. A
    database that cannot be reached raises.
    """
    try:
        with db.atomic() as connection:
            rows = {pair: repository.target(connection, *pair) for pair in _pairs(pushes)}
            outcomes, checked = _check_group(pushes, rows, lambda row: _compiled(connection, row))
            if checked:
                _store(connection, checked)
        return outcomes
    except Exception as exc:
        if len(pushes) == 1 or is_unreachable(exc):
            raise
        return [push_group(db, [push])[0] for push in pushes]


async def push_group_async(
    connection: psycopg.AsyncConnection[Any], pushes: Sequence[SmallPush]
) -> list[Answer | DomainError] | None:
    """`push_group` on PostgreSQL, on the event loop: the same reads, checks and one
    statement, through an asyncio psycopg connection in autocommit, without a thread.

    None when the group is left to `push_group`: a schema version this process has not
    compiled yet (compiling reads the schema), or a write that failed (nothing of it was
    stored; `push_group` tries it again, each push on its own if need be). A connection
    that broke raises SQLAlchemy's error, as `push_group` does (503).
    """
    try:
        rows = {pair: await repository.target_async(connection, *pair) for pair in _pairs(pushes)}
        try:
            outcomes, checked = _check_group(
                pushes,
                rows,
                lambda row: datasets.cached_compiled(
                    dataset_pk=row.id, version=row.schema_version, options=row.options, coerce=None
                ),
            )
        except _NotCompiled:
            return None
        if checked:
            await repository.store_async(
                connection, [push.transaction for push in checked], _batches(checked)
            )
        return outcomes
    except psycopg.Error as exc:
        broken = connection.broken or connection.closed
        if broken:
            # the database, not the statement; whether a write sent before the connection
            # broke was committed is unknown, so it is not tried again
            raise as_sqlalchemy_error(exc, broken=broken) from exc
        return None


def _pairs(pushes: Sequence[SmallPush]) -> list[tuple[str, str]]:
    """The (client, dataset) pairs a group reads: once each, and only those some push's
    token may use."""
    return list(
        dict.fromkeys(
            (push.client_id, push.dataset_id)
            for push in pushes
            if push.caller.may_use_client(push.client_id)
        )
    )


class _NotCompiled(Exception):
    """A schema version the writer on the event loop cannot compile (it reads)."""


def _check_group(
    pushes: Sequence[SmallPush],
    rows: dict[tuple[str, str], Any],
    compile_for: Callable[[Any], datasets.Compiled | None],
) -> tuple[list[Answer | DomainError], list[_Checked]]:
    """Each push resolved from its pair's row (403, 404), then normalised and validated
    with `compile_for(row)`; their outcomes in order, and the pushes to store. Raises
    _NotCompiled where `compile_for` answers None."""
    outcomes: list[Answer | DomainError] = []
    checked: list[_Checked] = []
    for push in pushes:
        pair = (push.client_id, push.dataset_id)
        try:
            row = _usable(push.caller, *pair, rows.get(pair))
        except DomainError as refused:
            outcomes.append(refused)
            continue
        compiled = compile_for(row)
        if compiled is None:
            raise _NotCompiled
        target = _Target(dataset_pk=row.id, version=row.schema_version, compiled=compiled)
        one = _check(push.caller, *pair, push.records, target, nul=push.nul)
        checked.append(one)
        outcomes.append(one.answer)
    return outcomes, checked


def purge_idempotency_keys(session: Session, *, older_than: timedelta) -> int:
    """Forget keys past their window; answers how many went."""
    result = session.execute(
        delete(IdempotencyKey).where(IdempotencyKey.created_at < utcnow() - older_than)
    )
    session.commit()
    return int(result.rowcount)  # type: ignore[attr-defined]


# --- transactions -----------------------------------------------------------------------------


def _visible_transactions(caller: Principal) -> Select[Any]:
    statement = select(Transaction).where(Transaction.company_id == caller.actor.company_id)
    if caller.client_ids:
        statement = statement.where(Transaction.client_id.in_(caller.client_ids))
    return statement


def get_transaction(session: Session, caller: Principal, transaction_id: uuid.UUID) -> Transaction:
    transaction: Transaction | None = session.scalars(
        _visible_transactions(caller).where(Transaction.id == transaction_id)
    ).one_or_none()
    if transaction is None:
        raise TransactionNotFound(f"No transaction {transaction_id}.")
    return transaction


def list_transactions(
    session: Session, caller: Principal, query: TransactionQuery
) -> tuple[Sequence[Transaction], int]:
    statement = _visible_transactions(caller)
    if query.client_id is not None:
        datasets.usable_client(session, caller, query.client_id)
        statement = statement.where(Transaction.client_id == query.client_id)
    if query.dataset_id is not None:
        statement = statement.where(Transaction.dataset_id == query.dataset_id)
    if query.status is not None:
        statement = statement.where(Transaction.status == query.status)
    if query.channel is not None:
        statement = statement.where(Transaction.channel == query.channel)
    if query.created_after is not None:
        statement = statement.where(Transaction.created_at >= query.created_after)
    if query.created_before is not None:
        statement = statement.where(Transaction.created_at < query.created_before)
    return paginate(session, statement, Transaction.created_at.desc(), Transaction.id, params=query)


PENDING_STATUSES = frozenset({"awaiting_upload", "processing"})


def transaction_read(
    session: Session, caller: Principal, transaction_id: uuid.UUID
) -> TransactionRead:
    """One transaction as `GET /platform/v1/transactions/{id}` answers it (404 if not
    the caller's)."""
    return transaction_view(get_transaction(session, caller, transaction_id))


def transaction_view(transaction: Transaction) -> TransactionRead:
    view = TransactionRead.model_validate(transaction, from_attributes=True)
    if view.records_processed is None and view.status not in PENDING_STATUSES:
        view.records_processed = view.records_received  # final: every row was read
    return view


# --- records ----------------------------------------------------------------------------------


def _records_statement(
    session: Session, caller: Principal, query: RecordQuery
) -> tuple[Select[Any], uuid.UUID]:
    """The matching records' statement, and the dataset's primary key."""
    dataset = _dataset(session, caller, query.client_id, query.dataset_id)
    statement = select(
        Record.record_id,
        Record.transaction_id,
        Record.schema_version,
        Record.ingested_at,
        Record.data,
    ).where(Record.dataset_pk == dataset.id)
    if query.transaction_id is not None:
        statement = statement.where(Record.transaction_id == query.transaction_id)
    if query.ingested_after is not None:
        statement = statement.where(Record.ingested_at >= query.ingested_after)
    if query.ingested_before is not None:
        statement = statement.where(Record.ingested_at < query.ingested_before)
    dialect = session.get_bind().dialect.name
    for name, value in (query.filter or {}).items():
        statement = statement.where(field_equals(dialect, name, value))
    return statement, dataset.id


_ORDER = (Record.ingested_at, Record.seq)


def list_records(
    session: Session, caller: Principal, query: RecordQuery
) -> tuple[list[RecordRead], int]:
    statement, dataset_pk = _records_statement(session, caller, query)
    rows = session.execute(
        statement.order_by(*_ORDER).offset(query.offset).limit(query.page_size)
    ).all()
    narrowed = (query.transaction_id, query.ingested_after, query.ingested_before, query.filter)
    if any(value is not None for value in narrowed):
        total = session.scalar(select(func.count()).select_from(statement.subquery())) or 0
    else:  # the whole dataset: its kept count, not a scan of every record
        total = count_records(session.connection(), dataset_pk=dataset_pk)
    return [RecordRead.model_validate(row, from_attributes=True) for row in rows], total


def _line(row: Any) -> bytes:
    return orjson.dumps(
        {
            "record_id": str(row.record_id),
            "transaction_id": str(row.transaction_id),
            "schema_version": row.schema_version,
            "ingested_at": iso_ms(row.ingested_at),
            "data": row.data,
        }
    )


def stream_records(db: Database, caller: Principal, query: RecordQuery) -> Iterator[bytes]:
    """Every matching record as NDJSON, in storage order, with constant memory.

    Access is checked before the first line, so a refused request answers an error
    rather than a broken stream. The stream reads in keyset-ordered chunks, each in a
    short transaction of its own, so a slow reader holds no lock and no cursor.
    """
    with db.read_session() as session:
        statement = _records_statement(session, caller, query)[0].add_columns(Record.seq)

    def lines() -> Iterator[bytes]:
        after: tuple[Any, int] | None = None
        while True:
            chunk = statement.order_by(*_ORDER).limit(STREAM_BATCH)
            if after is not None:
                last = tuple_(*(literal(v, c.type) for v, c in zip(after, _ORDER, strict=True)))
                chunk = chunk.where(tuple_(*_ORDER) > last)
            with db.read_session() as session:
                rows = session.execute(chunk).all()
            if not rows:
                return
            yield b"".join(_line(row) + b"\n" for row in rows)
            after = (rows[-1].ingested_at, rows[-1].seq)

    return lines()
