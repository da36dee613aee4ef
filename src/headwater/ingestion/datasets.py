"""Dataset registry use cases: register, add schema versions, change options, read.

Writes are the operator's (scope `admin`); each writes activity entries into the owning
company's log, in the same transaction, authored by the operator's credential.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import orjson
from sqlalchemy import Connection, Select, func, select
from sqlalchemy.orm import Session

from headwater.events import outbox
from headwater.identity.models import IngestionClient
from headwater.identity.tokens import Principal
from headwater.ingestion import hashkeys, validation
from headwater.ingestion.errors import (
    ClientNotAllowed,
    ClientNotFound,
    DatasetExists,
    DatasetNotFound,
    IncompatibleSchema,
    InvalidSchema,
    SchemaTooLarge,
)
from headwater.ingestion.models import (
    Dataset,
    DatasetSchema,
    Record,
)
from headwater.ingestion.schemas import (
    DatasetOptions,
    DatasetQuery,
    DatasetRead,
    SchemaVersionRead,
)
from headwater.kit.actor import Actor
from headwater.kit.clock import iso_ms, utcnow_ms
from headwater.kit.pagination import PageQuery, paginate

# The activity log and record staging are imported by the writes that use them: a read
# of a dataset (`headwater datasets show`) loads neither (0.05 s of its start).

COMPATIBILITY_SAMPLE = 1000


# --- reads ----------------------------------------------------------------------------------


class _ClientState(Protocol):
    company_id: uuid.UUID
    revoked_at: datetime | None


def check_usable(caller: Principal, client_id: str, client: _ClientState | None) -> None:
    """403 unless `client` (as found, None if not) is the caller's company's, not revoked;
    the answer is the same whether or not the client exists."""
    if (
        client is None
        or client.company_id != caller.actor.company_id
        or client.revoked_at is not None
    ):
        raise ClientNotAllowed(client_id)


def usable_client(session: Session, caller: Principal, client_id: str) -> IngestionClient:
    """The ingestion client, if this token may use it; else 403 (whether or not it exists)."""
    client = session.get(IngestionClient, client_id) if caller.may_use_client(client_id) else None
    check_usable(caller, client_id, client)
    assert client is not None
    return client


def list_visible(
    session: Session, caller: Principal, query: DatasetQuery
) -> tuple[list[DatasetRead], int]:
    """The datasets of the clients the caller may use (one client's, if named)."""
    statement = select(Dataset).where(Dataset.company_id == caller.actor.company_id)
    if query.client_id is not None:
        usable_client(session, caller, query.client_id)
        statement = statement.where(Dataset.client_id == query.client_id)
    elif caller.client_ids:
        statement = statement.where(Dataset.client_id.in_(caller.client_ids))
    return page(session, statement, params=query)


@dataclass(frozen=True, slots=True)
class UsableTree:
    """The clients a caller may use, each with its datasets (a client with none: an
    empty list), and the other clients of its company, which it may not use."""

    clients: dict[str, list[str]]
    withheld: frozenset[str]


def usable_tree(session: Session, caller: Principal) -> UsableTree:
    """The caller's company's clients that are not revoked and their datasets, split by
    whether the caller may use them (two index reads)."""
    company = caller.actor.company_id
    names = session.scalars(
        select(IngestionClient.client_id)
        .where(IngestionClient.company_id == company, IngestionClient.revoked_at.is_(None))
        .order_by(IngestionClient.client_id)
    ).all()
    allowed = set(caller.client_ids)
    clients: dict[str, list[str]] = {n: [] for n in names if not allowed or n in allowed}
    pairs = session.execute(
        select(Dataset.client_id, Dataset.dataset_id)
        .where(Dataset.company_id == company, Dataset.client_id.in_(list(clients)))
        .order_by(Dataset.client_id, Dataset.dataset_id)
    )
    for client_id, dataset_id in pairs:
        clients[client_id].append(dataset_id)
    return UsableTree(clients, frozenset(n for n in names if n not in clients))


def _current_schemas(session: Session, datasets: Sequence[Dataset]) -> dict[uuid.UUID, Any]:
    rows = session.execute(
        select(
            DatasetSchema.dataset_pk,
            DatasetSchema.version,
            DatasetSchema.schema,
            DatasetSchema.created_at,
        )
        .where(DatasetSchema.dataset_pk.in_([d.id for d in datasets]))
        .order_by(DatasetSchema.dataset_pk, DatasetSchema.version)
    ).all()
    views: dict[uuid.UUID, Any] = {d.id: {"versions": [], "schema": None} for d in datasets}
    current = {d.id: d.schema_version for d in datasets}
    for pk, version, schema, created_at in rows:
        views[pk]["versions"].append({"schema_version": version, "created_at": created_at})
        if version == current[pk]:
            views[pk]["schema"] = schema
    return views


def views(session: Session, datasets: Sequence[Dataset]) -> list[DatasetRead]:
    """The API view of each dataset, with its current schema and every version's number."""
    if not datasets:
        return []
    extra = _current_schemas(session, datasets)
    return [
        DatasetRead(
            client_id=d.client_id,
            dataset_id=d.dataset_id,
            schema_version=d.schema_version,
            schema_=extra[d.id]["schema"],
            options=DatasetOptions.model_validate(d.options),
            versions=extra[d.id]["versions"],
            created_at=d.created_at,
            updated_at=d.updated_at,
        )
        for d in datasets
    ]


def find(session: Session, *, client_id: str, dataset_id: str, lock: bool = False) -> Dataset:
    statement = select(Dataset).where(
        Dataset.client_id == client_id, Dataset.dataset_id == dataset_id
    )
    if lock:
        statement = statement.with_for_update()
    dataset = session.scalars(statement).one_or_none()
    if dataset is None:
        raise DatasetNotFound(f"Client {client_id!r} has no dataset {dataset_id!r}.")
    return dataset


def page(
    session: Session, statement: Select[Any], *, params: PageQuery
) -> tuple[list[DatasetRead], int]:
    rows, total = paginate(session, statement, Dataset.client_id, Dataset.dataset_id, params=params)
    return views(session, rows), total


def list_for_client(
    session: Session, *, client_id: str, params: PageQuery
) -> tuple[list[DatasetRead], int]:
    _client(session, client_id)
    return page(session, select(Dataset).where(Dataset.client_id == client_id), params=params)


def get(session: Session, *, client_id: str, dataset_id: str) -> DatasetRead:
    return views(session, [find(session, client_id=client_id, dataset_id=dataset_id)])[0]


def versions(
    session: Session, *, client_id: str, dataset_id: str, params: PageQuery
) -> tuple[list[SchemaVersionRead], int]:
    dataset = find(session, client_id=client_id, dataset_id=dataset_id)
    rows, total = paginate(
        session,
        select(DatasetSchema).where(DatasetSchema.dataset_pk == dataset.id),
        DatasetSchema.version,
        params=params,
    )
    return [_version_view(r) for r in rows], total


def version(session: Session, *, client_id: str, dataset_id: str, number: int) -> SchemaVersionRead:
    dataset = find(session, client_id=client_id, dataset_id=dataset_id)
    row = session.scalars(
        select(DatasetSchema).where(
            DatasetSchema.dataset_pk == dataset.id, DatasetSchema.version == number
        )
    ).one_or_none()
    if row is None:
        raise DatasetNotFound(f"Dataset {dataset_id!r} has no schema version {number}.")
    return _version_view(row)


def schema_history(connection: Connection, dataset_pk: uuid.UUID) -> list[dict[str, Any]]:
    """The dataset's schema versions' documents, newest first."""
    rows = connection.execute(
        select(DatasetSchema.schema)
        .where(DatasetSchema.dataset_pk == dataset_pk)
        .order_by(DatasetSchema.version.desc())
    )
    return [row.schema for row in rows]


def _version_view(row: DatasetSchema) -> SchemaVersionRead:
    return SchemaVersionRead(
        schema_version=row.version,
        schema_=row.schema,
        author_id=row.author_id,
        created_at=row.created_at,
    )


# --- writes ---------------------------------------------------------------------------------


def _client(session: Session, client_id: str) -> IngestionClient:
    client = session.get(IngestionClient, client_id)
    if client is None or client.revoked_at is not None:
        raise ClientNotFound(f"No ingestion client {client_id!r}.")
    return client


def _checked(schema: dict[str, Any], *, max_bytes: int) -> validation.Validator:
    size = len(orjson.dumps(schema))
    if size > max_bytes:
        raise SchemaTooLarge(
            f"The schema's JSON is {size} bytes; at most {max_bytes} are accepted "
            "(HEADWATER_MAX_SCHEMA_BYTES)."
        )
    problems = validation.schema_problems(schema)
    if problems:
        raise InvalidSchema(problems)
    return validation.compile_schema(schema)


def _snapshot(dataset: Dataset) -> dict[str, Any]:
    return {
        "id": str(dataset.id),
        "client_id": dataset.client_id,
        "dataset_id": dataset.dataset_id,
        "schema_version": dataset.schema_version,
        "options": dataset.options,
        "created_at": iso_ms(dataset.created_at),
        "updated_at": iso_ms(dataset.updated_at),
    }


def _audit(
    session: Session,
    *,
    actor: Actor,
    action: str,
    dataset: Dataset,
    before: dict[str, Any] | None,
) -> None:
    from headwater.activity import service as activity

    activity.record(
        session,
        actor=actor,
        action=action,
        resource_type="dataset",
        resource_id=dataset.id,
        before=before,
        after=_snapshot(dataset),
    )


def _add_version(
    session: Session, dataset: Dataset, *, schema: dict[str, Any], actor: Actor
) -> DatasetSchema:
    from headwater.activity import service as activity

    row = DatasetSchema(
        id=uuid.uuid4(),
        dataset_pk=dataset.id,
        version=dataset.schema_version,
        schema=schema,
        author_id=actor.author_id,
        created_at=dataset.updated_at,
    )
    session.add(row)
    session.flush()
    outbox.write(
        session.connection(),
        [
            outbox.event(
                "dataset.schema_version_added",
                company_id=dataset.company_id,
                data={
                    "client_id": dataset.client_id,
                    "dataset_id": dataset.dataset_id,
                    "schema_version": row.version,
                },
                created_at=row.created_at,
            )
        ],
    )
    activity.record(
        session,
        actor=actor,
        action="create",
        resource_type="dataset_schema",
        resource_id=row.id,
        before=None,
        after={
            "id": str(row.id),
            "client_id": dataset.client_id,
            "dataset_id": dataset.dataset_id,
            "schema_version": row.version,
            "schema": schema,
            "created_at": iso_ms(row.created_at),
        },
    )
    return row


def register(
    session: Session,
    *,
    author_id: uuid.UUID,
    client_id: str,
    dataset_id: str,
    schema: dict[str, Any],
    options: DatasetOptions,
    max_schema_bytes: int,
) -> DatasetRead:
    """Register a dataset with its first schema version."""
    client = _client(session, client_id)
    _checked(schema, max_bytes=max_schema_bytes)
    exists = session.scalar(
        select(func.count())
        .select_from(Dataset)
        .where(Dataset.client_id == client_id, Dataset.dataset_id == dataset_id)
    )
    if exists:
        raise DatasetExists(f"Client {client_id!r} already has a dataset {dataset_id!r}.")
    actor = Actor(company_id=client.company_id, author_id=author_id)
    now = utcnow_ms()
    dataset = Dataset(
        id=uuid.uuid4(),
        company_id=client.company_id,
        client_id=client_id,
        dataset_id=dataset_id,
        schema_version=1,
        options=options.model_dump(),
        created_at=now,
        updated_at=now,
    )
    session.add(dataset)
    session.flush()
    if options.subject_key is not None:
        hashkeys.ensure(session.connection(), client.company_id)
    _audit(session, actor=actor, action="create", dataset=dataset, before=None)
    _add_version(session, dataset, schema=schema, actor=actor)
    session.flush()
    return views(session, [dataset])[0]


def _incompatibilities(
    session: Session, dataset: Dataset, validator: validation.Validator
) -> list[dict[str, Any]]:
    """What the previous version accepted that the new one refuses (compatibility
    `backward`): its `examples` and the last 1000 stored records."""
    from headwater.ingestion import staging

    previous = session.scalars(
        select(DatasetSchema.schema).where(
            DatasetSchema.dataset_pk == dataset.id,
            DatasetSchema.version == dataset.schema_version,
        )
    ).one()
    problems: list[dict[str, Any]] = []
    examples = previous.get("examples")
    for i, example in enumerate(examples if isinstance(examples, list) else []):
        problems.extend({"example": i, **e} for e in validation.errors_of(validator, example))
    recent = session.execute(
        select(Record.record_id, Record.data)
        .where(Record.dataset_pk == dataset.id, staging.visible(dataset.id))
        .order_by(Record.ingested_at.desc(), Record.seq.desc())
        .limit(COMPATIBILITY_SAMPLE)
    ).all()
    for record_id, data in recent:
        problems.extend(
            {"record_id": str(record_id), **e} for e in validation.errors_of(validator, data)
        )
    return problems


def add_version(
    session: Session,
    *,
    author_id: uuid.UUID,
    client_id: str,
    dataset_id: str,
    schema: dict[str, Any],
    max_schema_bytes: int,
) -> DatasetRead:
    """Add a schema version; under `backward` it must accept what the previous one did."""
    client = _client(session, client_id)
    validator = _checked(schema, max_bytes=max_schema_bytes)
    dataset = find(session, client_id=client_id, dataset_id=dataset_id, lock=True)
    if dataset.options.get("compatibility", "backward") == "backward":
        problems = _incompatibilities(session, dataset, validator)
        if problems:
            raise IncompatibleSchema(
                f"The new schema refuses what version {dataset.schema_version} accepts "
                f"(compatibility is backward): {len(problems)} "
                f"{'problem' if len(problems) == 1 else 'problems'} with its examples or the "
                "last stored records, listed in `errors`. Make the new schema accept them, "
                "or set the dataset's compatibility to none.",
                errors=problems[: validation.MAX_LISTED_ERRORS],
                extra={"error_count": len(problems)},
            )
    actor = Actor(company_id=client.company_id, author_id=author_id)
    before = _snapshot(dataset)
    dataset.schema_version += 1
    dataset.updated_at = utcnow_ms()
    session.flush()
    _audit(session, actor=actor, action="update", dataset=dataset, before=before)
    _add_version(session, dataset, schema=schema, actor=actor)
    session.flush()
    return views(session, [dataset])[0]


def set_options(
    session: Session,
    *,
    author_id: uuid.UUID,
    client_id: str,
    dataset_id: str,
    options: DatasetOptions,
) -> DatasetRead:
    client = _client(session, client_id)
    dataset = find(session, client_id=client_id, dataset_id=dataset_id, lock=True)
    before = _snapshot(dataset)
    dataset.options = options.model_dump()
    dataset.updated_at = utcnow_ms()
    session.flush()
    if options.subject_key is not None:
        hashkeys.ensure(session.connection(), client.company_id)
    _audit(
        session,
        actor=Actor(company_id=client.company_id, author_id=author_id),
        action="update",
        dataset=dataset,
        before=before,
    )
    session.flush()
    return views(session, [dataset])[0]


def caller_dataset(session: Session, caller: Principal, client_id: str, dataset_id: str) -> Dataset:
    """The dataset a caller names: 403 unless its token may use the client, 404 if the
    client has no such dataset."""
    usable_client(session, caller, client_id)
    return find(session, client_id=client_id, dataset_id=dataset_id)


def usable_target(caller: Principal, client_id: str, dataset_id: str, row: Any) -> Any:
    """A `repository.target` row, once the caller may push to it (else 403 or 404)."""
    if not caller.may_use_client(client_id):
        row = None
    check_usable(caller, client_id, row)
    assert row is not None
    if row.id is None:
        raise DatasetNotFound(f"Client {client_id!r} has no dataset {dataset_id!r}.")
    return row
