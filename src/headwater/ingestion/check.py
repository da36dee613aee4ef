"""The one record check of the core: a record from any door (a push, a file's row on any
channel, a quarantined row resubmitted) is looked at for characters that cannot be
stored, normalised and validated here, by its dataset version's `Compiled` check, and
its errors are counted and listed here (`Errors`: one cap, one message per rule).

Three shapes of input, one rule set:

- `batch`: a push's records, all at once (normalised with their JSON texts; a valid
  batch is told by one call of the batch validator);
- `one`: a single record (a file's JSON row, a resubmitted row);
- `table`: a block of CSV rows under one header, normalised a column at a time.

Records that passed go through the dataset's transform steps (`transform`, contract
section 16) on every channel: what it keeps is what is stored, each with its dedupe
digest for the write to claim (`ingestion.dedupe`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from headwater.ingestion import validation
from headwater.ingestion.compiling import Compiled
from headwater.ingestion.subjects import Subjects

Problem = dict[str, Any]


class Errors:
    """A transaction's errors: every one counted, the first `MAX_LISTED_ERRORS` listed,
    each with its record's index (and, for a file, its line); and how many records
    failed."""

    def __init__(self) -> None:
        self.count = 0
        self.records = 0
        self.listed: list[Problem] = []

    def add(self, record: int, errors: Sequence[Problem], *, line: int | None = None) -> None:
        """A record that failed, with its errors."""
        self.records += 1
        self.count += len(errors)
        room = validation.MAX_LISTED_ERRORS - len(self.listed)
        where: Problem = {"record": record} if line is None else {"record": record, "line": line}
        for error in errors[: max(room, 0)]:
            self.listed.append(where | error)

    def first(self, error: Problem) -> None:
        """An error about the whole input, listed before the others (a file that cannot
        be read on)."""
        self.count += 1
        self.listed.insert(0, error)
        del self.listed[validation.MAX_LISTED_ERRORS :]


def _characters(data: Any) -> list[Problem]:
    """Errors (keyword `characters`) at each member name or string holding U+0000,
    written with the character escaped: no NUL is stored or answered."""
    return [
        {k: v.replace("\x00", "\\u0000") for k, v in error.items()}
        for error in validation.character_errors(data)
    ]


def batch(
    check: Compiled, records: list[Any], *, nul: bool = False
) -> tuple[list[Any], list[str | None], Errors]:
    """A push's records: normalised, with their JSON texts where normalising left them
    as sent, and their errors. `nul`: the body may hold U+0000 (the parser saw one)."""
    cleaned, texts = check.normaliser.each_with_json(records)
    errors = Errors()
    if not nul and check.batch is not None and check.batch.is_valid(cleaned):
        return cleaned, texts, errors
    is_valid = check.validator.is_valid
    for index, record in enumerate(cleaned):
        found = _characters(record) if nul else []
        if not found and is_valid(record):
            continue
        found += _problems(check, record, escape=nul)
        errors.add(index, found)
    return cleaned, texts, errors


def one(check: Compiled, data: dict[str, Any], *, nul: bool = False) -> tuple[Any, list[Problem]]:
    """A single record: normalised, and its errors (none: it may be stored). `nul`: its
    text held U+0000."""
    record = check.normaliser(data)
    found = _characters(record) if nul else []
    if not found and check.validator.is_valid(record):
        return record, []
    return record, found + _problems(check, record, escape=nul)


def table(
    check: Compiled, header: Sequence[str], rows: Sequence[Sequence[str]]
) -> tuple[list[Any], list[tuple[int, list[Problem]]]]:
    """CSV rows under one header (no U+0000 in them: the parser saw to it): normalised a
    column at a time, and the errors of those that fail, by their index."""
    cleaned = check.normaliser.table(header, rows)
    if check.batch is not None and check.batch.is_valid(cleaned):
        return cleaned, []
    is_valid = check.validator.is_valid
    failed = [
        (index, _problems(check, record, escape=False))
        for index, record in enumerate(cleaned)
        if not is_valid(record)
    ]
    return cleaned, failed


@dataclass(slots=True)
class Kept:
    """Valid records after the dataset's steps: those to store (`records`), each with
    its dedupe digest (`digests`, None without a dedupe step) and its subject's digest
    (`subjects`, None without a `subject_key`), and how many a filter kept out, were
    duplicates of an earlier record of the same input, or were of a suppressed subject."""

    records: list[Any]
    digests: list[bytes | None] | None = None
    window: timedelta | None = None  # the dedupe step's, with `digests`
    filtered: int = 0
    duplicates: int = 0
    # the JSON text of each record kept, where known (none after steps changed them)
    texts: list[str | None] | None = None
    subjects: list[bytes | None] | None = None
    suppressed: int = 0


def transform(check: Compiled, records: Sequence[Any], texts: Any = None) -> Kept:
    """Run the dataset's steps on valid records, in order; the records given are left
    as they were (an output is a copy where a step may change it, and then its JSON
    text is not known). Then each output's subject (contract section 17): a suppressed
    one is not kept."""
    steps, subjects = check.steps, check.subjects
    if steps is None:
        kept = Kept(records=list(records), texts=texts)
        if subjects is not None:
            _subjects(kept, subjects)
        return kept
    dedupe = steps.dedupe
    kept = Kept(
        records=[],
        digests=None if dedupe is None else [],
        window=None if dedupe is None else dedupe.window,
        subjects=None if subjects is None else [],
        texts=None if steps.changes or texts is None else [],
    )
    seen: set[bytes] = set()
    for n, record in enumerate(records):
        output, digest = steps.run(record)
        if output is None:
            kept.filtered += 1
            continue
        if subjects is not None:
            subject = subjects.of(output)
            if subject is not None and subject in subjects.suppressed:
                kept.suppressed += 1
                continue
            kept.subjects.append(subject)  # type: ignore[union-attr]
        if digest is not None:
            if digest in seen:
                kept.duplicates += 1
                if kept.subjects is not None:
                    kept.subjects.pop()
                continue
            seen.add(digest)
        kept.records.append(output)
        if kept.digests is not None:
            kept.digests.append(digest)
        if kept.texts is not None:
            kept.texts.append(texts[n])
    return kept


def _subjects(kept: Kept, subjects: Subjects) -> None:
    """Give records kept as they were their subjects' digests, leaving out those of
    suppressed subjects (and their texts)."""
    found = subjects.each(kept.records)
    suppressed = subjects.suppressed
    if not suppressed or not suppressed.intersection(found):
        kept.subjects = found
        return
    keep = [digest is None or digest not in suppressed for digest in found]
    kept.suppressed = keep.count(False)
    kept.records = [record for record, k in zip(kept.records, keep, strict=True) if k]
    kept.subjects = [digest for digest, k in zip(found, keep, strict=True) if k]
    if kept.texts is not None:
        kept.texts = [text for text, k in zip(kept.texts, keep, strict=True) if k]


def _problems(check: Compiled, record: Any, *, escape: bool) -> list[Problem]:
    found = list(validation.errors_of(check.validator, record))
    if escape:
        return [{k: v.replace("\x00", "\\u0000") for k, v in e.items()} for e in found]
    return found
