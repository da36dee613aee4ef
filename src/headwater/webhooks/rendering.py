"""Events as the feed and webhooks carry them."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, select

from headwater.ingestion import lifecycle
from headwater.ingestion.models import Transaction


def render(connection: Connection, rows: Sequence[Any]) -> list[dict[str, Any]]:
    """Events as the feed and webhooks carry them; a transaction's event with the
    transaction (final, so as it was when the event was written) as `data`."""
    wanted = {row.transaction_id for row in rows if row.transaction_id is not None}
    transactions: dict[uuid.UUID, Any] = {}
    if wanted:
        table = Transaction.__table__
        for found in connection.execute(select(table).where(table.c.id.in_(list(wanted)))):
            transactions[found.id] = found._mapping
    return [
        lifecycle.event_json(
            row, transactions.get(row.transaction_id) if row.transaction_id else None
        )
        for row in rows
    ]
