"""What a push needs of a dataset's schema version, compiled once a process and kept:
its validators and normaliser under the dataset's options, its transform version's steps
with the company's hash key, and its subject key with the subjects suppressed
(`Compiled`). Every channel's record check takes one (`check`)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import Connection, select

from headwater.ingestion import hashkeys, normalise, subjects, transforms, validation
from headwater.ingestion.errors import SchemaUnusable
from headwater.ingestion.models import Dataset, DatasetSchema, DatasetTransform, Suppression
from headwater.ingestion.schemas import DatasetOptions
from headwater.kit.cache import LRU


@dataclass(frozen=True, slots=True)
class Compiled:
    """What a push needs of one schema version under one set of options."""

    validator: validation.Validator
    batch: validation.Validator | None  # `validation.compile_batch`'s
    normaliser: normalise.Normaliser
    steps: transforms.Steps | None = None  # the transform version's (None: no steps)
    transform_version: int | None = None  # as records name it (None: the dataset had none)
    # the subject key's, with the subjects suppressed (None: no `subject_key`)
    subjects: subjects.Subjects | None = None


# Keyed by (dataset, version, options as JSON, coerce, transform version, subjects
# version): a new version, new options, new steps or new suppressions is a new key.
_compiled: LRU[Compiled] = LRU(maxsize=1024)


def compiled(
    connection: Connection,
    *,
    dataset_pk: uuid.UUID,
    version: int,
    options: dict[str, Any],
    coerce: bool | None,
    transform_version: int = 0,
    subjects_version: int = 0,
) -> Compiled:
    """The cached validator and normaliser of a schema version under these options, the
    steps of a transform version (0: none), and the subjects suppressed (as of the
    dataset's `subjects_version`).

    `coerce` overrides the dataset's `coerce_types` (files always coerce); None keeps it.
    """

    def build() -> Compiled:
        schema = connection.scalars(
            select(DatasetSchema.schema).where(
                DatasetSchema.dataset_pk == dataset_pk, DatasetSchema.version == version
            )
        ).one()
        parsed = DatasetOptions.model_validate(options)
        try:
            validator = validation.compile_schema(schema)
        except validation.SchemaUnusable as exc:
            raise SchemaUnusable(version, str(exc)) from None
        return Compiled(
            validator=validator,
            batch=validation.compile_batch(schema),
            normaliser=normalise.compile_normaliser(schema, parsed.normalisation(coerce=coerce)),
            steps=_steps(connection, dataset_pk, transform_version),
            transform_version=transform_version or None,
            subjects=_subjects(connection, dataset_pk, parsed.subject_key),
        )

    key = _compiled_key(dataset_pk, version, options, coerce, transform_version, subjects_version)
    return _compiled.get_or_compute(key, build)


def _subjects(
    connection: Connection, dataset_pk: uuid.UUID, subject_key: str | None
) -> subjects.Subjects | None:
    """The dataset's subject key with its company's hash key, and the digests of the
    subjects suppressed in its scope."""
    if subject_key is None:
        return None
    row = connection.execute(
        select(Dataset.company_id, Dataset.client_id, Dataset.dataset_id).where(
            Dataset.id == dataset_pk
        )
    ).one()
    suppressed = connection.scalars(
        select(Suppression.digests).where(
            Suppression.company_id == row.company_id,
            (Suppression.client_id.is_(None)) | (Suppression.client_id == row.client_id),
            (Suppression.dataset_id.is_(None)) | (Suppression.dataset_id == row.dataset_id),
        )
    )
    return subjects.Subjects(
        transforms.pointer(subject_key),
        hashkeys.key(connection, row.company_id),
        frozenset(bytes.fromhex(digest) for digests in suppressed for digest in digests),
    )


def _steps(
    connection: Connection, dataset_pk: uuid.UUID, transform_version: int
) -> transforms.Steps | None:
    """A transform version's steps, compiled with the company's hash key."""
    if not transform_version:
        return None
    row = connection.execute(
        select(DatasetTransform.company_id, DatasetTransform.steps).where(
            DatasetTransform.dataset_pk == dataset_pk,
            DatasetTransform.version == transform_version,
        )
    ).one()
    if not row.steps:
        return None
    return transforms.compile_steps(
        transform_version, row.steps, hashkeys.key(connection, row.company_id)
    )


def cached_compiled(
    *,
    dataset_pk: uuid.UUID,
    version: int,
    options: dict[str, Any],
    coerce: bool | None,
    transform_version: int = 0,
    subjects_version: int = 0,
) -> Compiled | None:
    """`compiled`'s answer if this process has it already, else None (nothing is read)."""
    key = _compiled_key(dataset_pk, version, options, coerce, transform_version, subjects_version)
    return _compiled.get(key)


def _compiled_key(
    dataset_pk: uuid.UUID,
    version: int,
    options: dict[str, Any],
    coerce: bool | None,
    transform_version: int,
    subjects_version: int,
) -> tuple[Any, ...]:
    options_json = orjson.dumps(options, option=orjson.OPT_SORT_KEYS)
    return (dataset_pk, version, options_json, coerce, transform_version, subjects_version)
