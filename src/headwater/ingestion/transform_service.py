"""A dataset's transform steps as the operator manages them (contract section 16): set
a new version, read the current one or any version, and preview records through them.

Setting steps writes a `dataset_transforms` entry into the company's activity log in
the same transaction, and makes the company's hash key if it has none
(`hashkeys.ensure`). A preview judges records exactly as a push would now
(normalisation, validation, steps, dedupe against stored records) and writes nothing
but that key.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select
from sqlalchemy.orm import Session

from headwater.db import Database
from headwater.ingestion import check, compiling, datasets, hashkeys, transforms
from headwater.ingestion.errors import InvalidTransforms, TransformVersionNotFound
from headwater.ingestion.models import Dataset, DatasetTransform, DedupeKey
from headwater.ingestion.schemas import PreviewRead, PreviewResult, TransformsRead
from headwater.kit.actor import Actor
from headwater.kit.clock import iso_ms, utcnow_ms


def _view(version: int, steps: list[dict[str, Any]], created_at: datetime | None) -> TransformsRead:
    return TransformsRead(version=version, steps=steps, created_at=created_at)


def _row(session: Session, dataset: Dataset, number: int) -> DatasetTransform | None:
    return session.scalars(
        select(DatasetTransform).where(
            DatasetTransform.dataset_pk == dataset.id, DatasetTransform.version == number
        )
    ).one_or_none()


def current(session: Session, *, client_id: str, dataset_id: str) -> TransformsRead:
    """The dataset's current steps (version 0, no steps, before any were set)."""
    dataset = datasets.find(session, client_id=client_id, dataset_id=dataset_id)
    row = _row(session, dataset, dataset.transform_version)
    if row is None:
        return _view(0, [], None)
    return _view(row.version, row.steps, row.created_at)


def version(session: Session, *, client_id: str, dataset_id: str, number: int) -> TransformsRead:
    """One version of the dataset's steps (404 if it has no such version)."""
    dataset = datasets.find(session, client_id=client_id, dataset_id=dataset_id)
    row = _row(session, dataset, number)
    if row is None:
        raise TransformVersionNotFound(
            f"Dataset {dataset_id!r} has no transform version {number} "
            f"(its current version is {dataset.transform_version})."
        )
    return _view(row.version, row.steps, row.created_at)


def checked(steps: Any) -> list[dict[str, Any]]:
    """A steps document, or 400 listing every problem with its step's index."""
    problems = transforms.problems(steps)
    if problems:
        raise InvalidTransforms(problems)
    return list(steps)


def set_steps(
    session: Session,
    *,
    author_id: Any,
    client_id: str,
    dataset_id: str,
    steps: Any,
) -> TransformsRead:
    """Store the steps as the dataset's next version, in force for transactions that
    begin after the commit."""
    document = checked(steps)
    dataset = datasets.find(session, client_id=client_id, dataset_id=dataset_id, lock=True)
    previous = _row(session, dataset, dataset.transform_version)
    now = utcnow_ms()
    row = DatasetTransform(
        company_id=dataset.company_id,
        dataset_pk=dataset.id,
        version=dataset.transform_version + 1,
        steps=document,
        author_id=author_id,
        created_at=now,
    )
    session.add(row)
    dataset.transform_version = row.version
    dataset.updated_at = now
    session.flush()
    hashkeys.ensure(session.connection(), dataset.company_id)
    _audit(
        session, Actor(company_id=dataset.company_id, author_id=author_id), dataset, previous, row
    )
    return _view(row.version, row.steps, row.created_at)


def _audit(
    session: Session,
    actor: Actor,
    dataset: Dataset,
    previous: DatasetTransform | None,
    row: DatasetTransform,
) -> None:
    from headwater.activity import service as activity

    def snapshot(version: DatasetTransform) -> dict[str, Any]:
        return {
            "client_id": dataset.client_id,
            "dataset_id": dataset.dataset_id,
            "version": version.version,
            "steps": version.steps,
            "created_at": iso_ms(version.created_at),
        }

    activity.record(
        session,
        actor=actor,
        action="create" if previous is None else "update",
        resource_type="dataset_transforms",
        resource_id=dataset.id,
        before=None if previous is None else snapshot(previous),
        after=snapshot(row),
    )


# --- preview ----------------------------------------------------------------------------------


def preview(
    db: Database,
    *,
    client_id: str,
    dataset_id: str,
    records: list[Any],
    steps: Any = None,
) -> PreviewRead:
    """How each record would fare if pushed now, in order: `invalid` with its errors,
    `filtered`, `duplicate` (of an earlier record here, or of a stored one within the
    window) or `stored` with its output. Nothing is stored."""
    document = None if steps is None else checked(steps)
    with db.read_session() as session:
        dataset = datasets.find(session, client_id=client_id, dataset_id=dataset_id)
    if document is not None:  # steps tried before any were set may hash: a key first
        with db.read_connection() as connection:
            keyed = hashkeys.opened(connection, dataset.company_id)
        if not keyed:
            with db.begin() as connection:
                hashkeys.ensure(connection, dataset.company_id)
    with db.read_connection() as connection:
        compiled = compiling.compiled(
            connection,
            dataset_pk=dataset.id,
            version=dataset.schema_version,
            options=dataset.options,
            coerce=None,
            transform_version=dataset.transform_version if document is None else 0,
            subjects_version=dataset.subjects_version,
        )
        run = compiled.steps
        if document is not None:
            key = hashkeys.key(connection, dataset.company_id)
            run = transforms.compile_steps(0, document, key)
        results, digests = _judge(compiled, run, records)
        stored = _stored(connection, dataset, run, digests)
    for index, digest in digests.items():
        if digest in stored:
            results[index] = PreviewResult(outcome="duplicate", output=None, errors=[])
    return PreviewRead(results=results)


def _judge(
    compiled: compiling.Compiled, run: transforms.Steps | None, records: list[Any]
) -> tuple[list[PreviewResult], dict[int, bytes]]:
    """Each record's outcome before the stored records are looked at, and the digest of
    each one that would be stored."""
    results: list[PreviewResult] = []
    digests: dict[int, bytes] = {}
    seen: set[bytes] = set()
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            problem = {"path": "", "keyword": "type", "message": "a record must be a JSON object"}
            results.append(PreviewResult(outcome="invalid", output=None, errors=[problem]))
            continue
        cleaned, errors = check.one(compiled, record)
        if errors:
            results.append(PreviewResult(outcome="invalid", output=None, errors=errors))
            continue
        output, digest = (cleaned, None) if run is None else run.run(cleaned)
        subjects = compiled.subjects
        if output is None:
            results.append(PreviewResult(outcome="filtered", output=None, errors=[]))
        elif subjects is not None and subjects.of(output) in subjects.suppressed:
            results.append(PreviewResult(outcome="suppressed", output=None, errors=[]))
        elif digest is not None and digest in seen:
            results.append(PreviewResult(outcome="duplicate", output=None, errors=[]))
        else:
            if digest is not None:
                seen.add(digest)
                digests[index] = digest
            results.append(PreviewResult(outcome="stored", output=output, errors=[]))
    return results, digests


def _stored(
    connection: Connection,
    dataset: Dataset,
    run: transforms.Steps | None,
    digests: dict[int, bytes],
) -> set[bytes]:
    """The digests claimed by stored records within the dedupe step's window."""
    if run is None or run.dedupe is None or not digests:
        return set()
    since = utcnow_ms() - run.dedupe.window
    return set(
        connection.scalars(
            select(DedupeKey.digest).where(
                DedupeKey.company_id == dataset.company_id,
                DedupeKey.dataset_pk == dataset.id,
                DedupeKey.digest.in_(list(digests.values())),
                DedupeKey.seen_at >= since,
            )
        )
    )
