"""Events as the feed and webhooks carry them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection

from headwater.ingestion import lifecycle
from headwater.ingestion.transactions import final_rows


def render(connection: Connection, rows: Sequence[Any]) -> list[dict[str, Any]]:
    """Events as the feed and webhooks carry them; a transaction's event with the
    transaction (final, so as it was when the event was written) as `data`."""
    transactions = final_rows(
        connection, {row.transaction_id for row in rows if row.transaction_id is not None}
    )
    return [
        lifecycle.event_json(
            row, transactions.get(row.transaction_id) if row.transaction_id else None
        )
        for row in rows
    ]
