"""Ingestion use cases: push JSON (atomic, idempotent), transactions and records reads."""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import anyio.to_thread
from sqlalchemy import (
    Connection,
    Select,
    Text,
    cast,
    delete,
    func,
    literal,
    select,
    tuple_,
)
from sqlalchemy.orm import Session

from headwater.db import Database, dialect_insert
from headwater.errors import DomainError, MalformedJSON, is_unreachable
from headwater.identity.tokens import Principal
from headwater.ingestion import (
    check,
    datasets,
    feed,
    lifecycle,
    metrics,
    repository,
    sinks,
    staging,
)
from headwater.ingestion.errors import (
    BatchTooLarge,
    DatasetNotFound,
    IdempotencyKeyReused,
    InvalidEnvelope,
    TransactionNotFound,
)
from headwater.ingestion.models import Dataset, IdempotencyKey, Record, Transaction
from headwater.ingestion.repository import count_records, field_equals
from headwater.ingestion.schemas import (
    ID_PATTERN,
    ChangesQuery,
    RecordQuery,
    RecordRead,
    TransactionQuery,
    TransactionRead,
)
from headwater.ingestion.sinks import RecordBatch
from headwater.kit import strictjson
from headwater.kit.clock import iso_ms, utcnow, utcnow_ms
from headwater.kit.pagination import paginate
from headwater.kit.signals import Signals

_ID = re.compile(ID_PATTERN)
_ENVELOPE = ("client_id", "dataset_id", "data")
STREAM_BATCH = 1000


@dataclass(frozen=True, slots=True)
class Limits:
    max_records: int
    max_depth: int
    idempotency_ttl: timedelta


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
        records_received=len(records),
        records_accepted=0 if error_count else len(records),
        records_rejected=errors.records,
        error_count=error_count,
        errors=errors.listed,
    )
    if error_count:
        return _Checked(transaction, None)
    batch = RecordBatch(
        records=cleaned,
        company_id=transaction["company_id"],
        dataset_pk=target.dataset_pk,
        transaction_id=transaction["id"],
        schema_version=target.version,
        ingested_at=received_at,
        texts=texts,
    )
    return _Checked(transaction, batch)


def _store(
    connection: Connection,
    transactions: Sequence[dict[str, Any]],
    batches: Sequence[RecordBatch],
) -> None:
    """Write checked pushes: their final transactions with their events, and the records
    of those accepted (the database's sink)."""
    sinks.for_dialect(connection.dialect.name).store(connection, transactions, batches)


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
        with db.atomic() as connection:
            _store(connection, *_rows([checked]))
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
            if transactions:
                sinks.for_dialect(connection.dialect.name).store(connection, transactions, batches)
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
    compile_for: Callable[[Any], datasets.Compiled | None],
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
            row = _usable(push.caller, *pair, rows.get(pair))
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


def cached_compiled(row: Any) -> datasets.Compiled | None:
    """A `repository.target` row's validator and normaliser if this process has compiled
    them already (no database work), else None."""
    return datasets.cached_compiled(
        dataset_pk=row.id, version=row.schema_version, options=row.options, coerce=None
    )


def purge_idempotency_keys(session: Session, *, older_than: timedelta) -> int:
    """Forget keys past their window; answers how many went."""
    result = session.execute(
        delete(IdempotencyKey).where(IdempotencyKey.created_at < utcnow() - older_than)
    )
    session.flush()
    return int(result.rowcount)  # type: ignore[attr-defined]


# --- transactions -----------------------------------------------------------------------------


def visible_to(caller: Principal, table: Any) -> Select[Any]:
    """Rows of `table` (a table with `company_id` and `client_id`, such as transactions
    or exports) the caller may see: its company's, and only its clients' when its token
    names some."""
    statement = select(table).where(table.company_id == caller.actor.company_id)
    if caller.client_ids:
        statement = statement.where(table.client_id.in_(caller.client_ids))
    return statement


def get_transaction(session: Session, caller: Principal, transaction_id: uuid.UUID) -> Transaction:
    transaction: Transaction | None = session.scalars(
        visible_to(caller, Transaction).where(Transaction.id == transaction_id)
    ).one_or_none()
    if transaction is None:
        raise TransactionNotFound(f"No transaction {transaction_id}.")
    return transaction


def list_transactions(
    session: Session, caller: Principal, query: TransactionQuery
) -> tuple[Sequence[Transaction], int]:
    statement = visible_to(caller, Transaction)
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


PENDING_STATUSES = frozenset(set(lifecycle.Status) - lifecycle.FINAL)


def transaction_read(
    session: Session, caller: Principal, transaction_id: uuid.UUID
) -> TransactionRead:
    """One transaction as `GET /platform/v1/transactions/{id}` answers it (404 if not
    the caller's)."""
    return transaction_view(get_transaction(session, caller, transaction_id))


def transaction_view(transaction: Transaction) -> TransactionRead:
    view = TransactionRead.model_validate(transaction, from_attributes=True)
    view.records_processed = lifecycle.records_processed(
        view.status, view.records_processed, view.records_received
    )
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
    ).where(Record.dataset_pk == dataset.id, staging.visible(dataset.id))
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
    """A record as an NDJSON line: `RecordRead`'s JSON text, its data as stored."""
    return feed.record_json(
        row.record_id, row.transaction_id, row.schema_version, iso_ms(row.ingested_at), row.data
    ).encode()


def stream_records(db: Database, caller: Principal, query: RecordQuery) -> Iterator[bytes]:
    """Every matching record as NDJSON, in storage order, with constant memory.

    Access is checked before the first line, so a refused request answers an error
    rather than a broken stream. The stream reads in keyset-ordered chunks, each in a
    short transaction of its own, so a slow reader holds no lock and no cursor.
    """
    with db.read_session() as session:
        statement = _records_statement(session, caller, query)[0].with_only_columns(
            Record.record_id,
            Record.transaction_id,
            Record.schema_version,
            Record.ingested_at,
            cast(Record.data, Text).label("data"),  # the JSON text as stored
            Record.seq,
        )

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


# --- the record feed --------------------------------------------------------------------------


def _changes(
    db: Database, caller: Principal, query: ChangesQuery
) -> tuple[uuid.UUID, feed.Changes]:
    """A page of the feed: the dataset (403/404 as a push's), then `feed.page`."""
    with db.read_connection() as connection:
        target = repository.target(connection, query.client_id, query.dataset_id)
        dataset_pk = _usable(caller, query.client_id, query.dataset_id, target).id
    cursor = feed.decode(query.after, dataset_pk)
    return dataset_pk, feed.page(db, dataset_pk, cursor, limit=query.limit)


async def changes(
    db: Database, caller: Principal, query: ChangesQuery, *, commits: Signals, poll: float
) -> bytes:
    """A page of the record feed as JSON (`ChangesPage`). An empty page waits up to
    `query.wait` seconds for records, holding no database connection meanwhile: a commit
    in this process wakes it at once (`commits`, keyed by client and dataset), another
    process's shows at the next look, every `poll` seconds."""
    deadline = time.monotonic() + query.wait
    key = (query.client_id, query.dataset_id)
    while True:
        dataset_pk, page = await anyio.to_thread.run_sync(_changes, db, caller, query)
        remaining = deadline - time.monotonic()
        if page.count or remaining <= 0:
            metrics.FEED_PAGES.labels("records" if page.count else "empty").inc()
            metrics.FEED_RECORDS.inc(page.count)
            return page.body(dataset_pk)
        await commits.wait(key, min(remaining, poll))
