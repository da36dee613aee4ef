"""The record feed as the API serves it: a page after a cursor, or a long poll that
waits for one (`changes`)."""

from __future__ import annotations

import time
import uuid

import anyio.to_thread

from headwater.db import Database
from headwater.identity.tokens import Principal
from headwater.ingestion import datasets, feed, metrics, repository
from headwater.ingestion.readahead import ReadAhead
from headwater.ingestion.schemas import ChangesQuery
from headwater.kit.coalesce import Coalescer
from headwater.kit.signals import Signals


def _changes(
    db: Database, caller: Principal, query: ChangesQuery, ahead: ReadAhead, numbering: Coalescer
) -> tuple[uuid.UUID, feed.Changes]:
    """A page of the feed: the dataset (403/404 as a push's), then the page read ahead
    for its cursor or `feed.page`; a full page has the one after it read ahead."""
    with db.read_connection() as connection:
        target = repository.target(connection, query.client_id, query.dataset_id)
        target = datasets.usable_target(caller, query.client_id, query.dataset_id, target)
    # a removal of records moves `subjects_version`: no page read ahead before it is served
    dataset_pk, version = target.id, target.subjects_version
    cursor, limit = feed.decode(query.after, dataset_pk), query.limit
    page = ahead.take((dataset_pk, version, cursor, limit)) or feed.page(
        db, dataset_pk, cursor, limit=limit, numbering=numbering
    )
    if page.count == limit:
        after = page.cursor
        ahead.start(
            (dataset_pk, version, after, limit),
            lambda: feed.page(db, dataset_pk, after, limit=limit, numbering=numbering),
        )
    return dataset_pk, page


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
        dataset_pk, page = await anyio.to_thread.run_sync(
            _changes, db, caller, query, ahead, numbering
        )
        remaining = deadline - time.monotonic()
        if page.count or remaining <= 0:
            metrics.FEED_PAGES.labels("records" if page.count else "empty").inc()
            metrics.FEED_RECORDS.inc(page.count)
            return page.body(dataset_pk)
        await commits.wait(dataset_pk.hex, min(remaining, poll))
