"""The record feed as the API serves it: a page after a cursor, or a long poll that
waits for one (`changes`)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import anyio.to_thread

from headwater.db import Database
from headwater.identity.tokens import Principal
from headwater.ingestion import datasets, feed, metrics, repository
from headwater.ingestion.readahead import Key, ReadAhead
from headwater.ingestion.schemas import ChangesQuery
from headwater.kit.coalesce import Coalescer
from headwater.kit.signals import Signals


def _changes(
    db: Database, caller: Principal, query: ChangesQuery, ahead: ReadAhead, numbering: Coalescer
) -> tuple[uuid.UUID, feed.Changes]:
    """A page of the feed, on a thread: the dataset (403/404 as a push's), then the page
    read ahead for its cursor or `feed.page`."""
    with db.read_connection() as connection:
        row = repository.target(connection, query.client_id, query.dataset_id)
    key = dataset_pk, _, cursor, limit = _key(caller, query, row)
    page = ahead.take(key) or feed.page(db, dataset_pk, cursor, limit=limit, numbering=numbering)
    return dataset_pk, _read_next(db, ahead, key, page, numbering)


async def _changes_on_loop(
    db: Database, caller: Principal, query: ChangesQuery, ahead: ReadAhead, numbering: Coalescer
) -> tuple[uuid.UUID, feed.Changes]:
    """`_changes` where reads can be made on the event loop (`Database.loop_read`): a
    reader catching up finds its page read ahead, and its request makes no thread hop
    (two handoffs and the wait for the GIL between them cost more than the dataset's
    lookup); only a page not read ahead is read on a thread."""
    row = await repository.target_on_loop(db, query.client_id, query.dataset_id)
    key = dataset_pk, _, cursor, limit = _key(caller, query, row)
    page = await ahead.take_async(key)
    if page is None:
        page = await anyio.to_thread.run_sync(
            lambda: feed.page(db, dataset_pk, cursor, limit=limit, numbering=numbering)
        )
    return dataset_pk, _read_next(db, ahead, key, page, numbering)


def _key(caller: Principal, query: ChangesQuery, row: Any) -> Key:
    """The page the request asks for, once its dataset may be read (else 403 or 404):
    a removal of records moves `subjects_version`, so no page read ahead before it is
    served."""
    target = datasets.usable_target(caller, query.client_id, query.dataset_id, row)
    return target.id, target.subjects_version, feed.decode(query.after, target.id), query.limit


def _read_next(
    db: Database, ahead: ReadAhead, key: Key, page: feed.Changes, numbering: Coalescer
) -> feed.Changes:
    """The page, once the ones after it are being read ahead (if it is full)."""
    dataset_pk, version, _, limit = key
    if page.count == limit:
        ahead.start(
            (dataset_pk, version, page.cursor, limit),
            lambda after: feed.page(db, dataset_pk, after, limit=limit, numbering=numbering),
        )
    return page


async def changes(
    db: Database,
    caller: Principal,
    query: ChangesQuery,
    *,
    commits: Signals,
    ahead: ReadAhead,
    numbering: Coalescer,
    poll: float,
) -> bytes:
    """A page of the record feed as JSON (`ChangesPage`). An empty page waits up to
    `query.wait` seconds for records, holding no database connection meanwhile: a commit
    anywhere wakes it at once (`commits`, keyed by the dataset: `wakeups`); it looks
    again every `poll` seconds in any case."""
    deadline = time.monotonic() + query.wait
    while True:
        if db.reads_on_loop:
            dataset_pk, page = await _changes_on_loop(db, caller, query, ahead, numbering)
        else:
            dataset_pk, page = await anyio.to_thread.run_sync(
                _changes, db, caller, query, ahead, numbering
            )
        remaining = deadline - time.monotonic()
        if page.count or remaining <= 0:
            metrics.FEED_PAGES.labels("records" if page.count else "empty").inc()
            metrics.FEED_RECORDS.inc(page.count)
            return page.body(dataset_pk)
        await commits.wait(dataset_pk.hex, min(remaining, poll))
