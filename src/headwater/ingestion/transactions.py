"""Transactions as callers read them: one, or a filtered page, each only the caller's
company's (`visible_to`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, Select, select
from sqlalchemy.orm import Session

from headwater.identity.tokens import Principal
from headwater.ingestion import datasets, lifecycle
from headwater.ingestion.errors import TransactionNotFound
from headwater.ingestion.models import Transaction
from headwater.ingestion.schemas import TransactionQuery, TransactionRead
from headwater.kit.pagination import paginate


def visible_to(caller: Principal, table: Any) -> Select[Any]:
    """Rows of `table` (a table with `company_id` and `client_id`, such as transactions
    or exports) the caller may see: its company's, and only its clients' when its token
    names some."""
    statement = select(table).where(table.company_id == caller.actor.company_id)
    if caller.client_ids:
        statement = statement.where(table.client_id.in_(caller.client_ids))
    return statement


def visible_where(
    session: Session,
    caller: Principal,
    table: Any,
    *,
    client_id: str | None,
    dataset_id: str | None,
    status: str | None,
) -> Select[Any]:
    """`visible_to`, narrowed to the ingestion client (403 unless the caller may use it),
    the dataset and the status a list asks for (each when given)."""
    statement = visible_to(caller, table)
    if client_id is not None:
        datasets.usable_client(session, caller, client_id)
        statement = statement.where(table.client_id == client_id)
    if dataset_id is not None:
        statement = statement.where(table.dataset_id == dataset_id)
    if status is not None:
        statement = statement.where(table.status == status)
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
    statement = visible_where(
        session,
        caller,
        Transaction,
        client_id=query.client_id,
        dataset_id=query.dataset_id,
        status=query.status,
    )
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


def final_rows(connection: Connection, ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, Any]:
    """The transactions' rows (mappings of their columns), by id: what their events carry
    as `data` once they are final."""
    table = Transaction.__table__
    wanted = list(ids)
    if not wanted:
        return {}
    return {
        row.id: row._mapping
        for row in connection.execute(select(table).where(table.c.id.in_(wanted)))
    }
