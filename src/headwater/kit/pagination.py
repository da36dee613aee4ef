"""The page shape every list answers (interface document 2.7): pages numbered from 0."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Generic, TypeVar

import orjson
from pydantic import BaseModel, BeforeValidator, Field
from sqlalchemy import ColumnElement, Integer, Select, bindparam, func, select
from sqlalchemy.orm import Session

from headwater.kit.clock import iso_ms
from headwater.kit.schemas import Input

T = TypeVar("T")

MAX_PAGE_SIZE = 100
DEFAULT_PAGE_SIZE = 20


# Far beyond any real list, and small enough that page * page_size stays a 64-bit offset.
MAX_PAGE = 10_000_000


def _digits(value: object) -> object:
    """A query's integer is written in digits: `19.0`, `1e1` and `true` are not one."""
    if isinstance(value, str) and not value.isdigit():
        raise ValueError("must be a whole number written in digits")
    if isinstance(value, bool | float):
        raise ValueError("must be a whole number")
    return value


Digits = Annotated[int, BeforeValidator(_digits)]


class PageQuery(Input):
    """`page` and `page_size` of every list: query parameters, or built by a service.

    As a query model it refuses parameters it does not know (400); lists with filters
    subclass it.
    """

    page: Digits = Field(0, ge=0, le=MAX_PAGE, description="Page number, from 0.", examples=[0])
    page_size: Digits = Field(
        DEFAULT_PAGE_SIZE,
        ge=1,
        le=MAX_PAGE_SIZE,
        description="Entries per page, 1-100.",
        examples=[20],
    )

    @property
    def offset(self) -> int:
        return self.page * self.page_size


def total_pages(total: int, page_size: int) -> int:
    return math.ceil(total / page_size)


class Page(BaseModel, Generic[T]):
    page_number: int = Field(examples=[0])
    page_size: int = Field(examples=[20])
    total_entries: int = Field(examples=[1])
    total_pages: int = Field(examples=[1])
    data: list[T]

    @classmethod
    def of(cls, items: Sequence[Any], *, params: PageQuery, total: int) -> Page[T]:
        """A page of `items`: models, or rows the item model validates from attributes."""
        return cls(
            page_number=params.page,
            page_size=params.page_size,
            total_entries=total,
            total_pages=total_pages(total, params.page_size),
            data=list(items),
        )


def paginate(
    session: Session,
    query: Select[Any],
    *order_by: Any,
    params: PageQuery,
    count: Callable[[Callable[[], int]], int] | None = None,
) -> tuple[Sequence[Any], int]:
    """One page of `query` in a total order (the last `order_by` must be unique) and the count.

    `count`, when given, wraps the counting query (to answer it from a cache).
    """

    def total() -> int:
        statement = select(func.count()).select_from(query.order_by(None).subquery())
        return session.scalar(statement) or 0

    result = session.execute(
        query.order_by(*order_by).offset(params.offset).limit(params.page_size)
    )
    # A query of one mapped entity answers objects; a query of columns answers Core rows,
    # which item models validate from attributes just the same, without ORM loading.
    selected = query.column_descriptions
    entity = len(selected) == 1 and selected[0]["expr"] is selected[0]["entity"]
    items = result.scalars().all() if entity else result.all()
    return items, count(total) if count else total()


# --- hot lists: statements built once per query shape, rows straight to JSON ----------------


@dataclass(frozen=True, slots=True)
class PageStatements:
    """A list's page and count statements with their bound values.

    Hot lists build their statements once per query shape (which filters, which sort) with
    bound parameters, and reuse them: building and hashing a statement costs more than
    PostgreSQL takes to run it.
    """

    page: Select[Any]
    count: Select[Any]
    params: dict[str, Any]


def shaped_statements(
    columns: Sequence[Any], where: Sequence[ColumnElement[bool]], order_by: Sequence[Any], key: Any
) -> tuple[Select[Any], Select[Any]]:
    """The page statement of a list shape, `offset` and `limit` bound when it runs, and its
    count statement (of `key`, a column of the listed table)."""
    page = (
        select(*columns)
        .where(*where)
        .order_by(*order_by)
        .offset(bindparam("offset", type_=Integer))
        .limit(bindparam("limit", type_=Integer))
    )
    count = select(func.count()).select_from(select(key).where(*where).subquery())
    return page, count


def page_json(
    *, page: int, page_size: int, total: int, fields: Sequence[str], rows: Sequence[Any]
) -> bytes:
    """The page answer of Core `rows` (interface document 2.7) as JSON bytes, each row's
    leading columns named by `fields` (columns past them are left out).

    For hot lists: rows go straight to JSON, with no model validation of values the
    database already typed. Date-times get the API's one format (UTC, milliseconds, `Z`).
    """
    return orjson.dumps(
        {
            "page_number": page,
            "page_size": page_size,
            "total_entries": total,
            "total_pages": total_pages(total, page_size),
            "data": [
                {
                    k: iso_ms(v) if v.__class__ is datetime else v
                    for k, v in zip(fields, row, strict=False)  # extra columns left out
                }
                for row in rows
            ],
        }
    )
