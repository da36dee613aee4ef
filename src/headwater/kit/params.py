"""Query parameters shared by every list."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query

from headwater.kit.pagination import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, PageParams


def page_params(
    page: Annotated[int, Query(ge=0, description="Page number, from 0.", examples=[0])] = 0,
    page_size: Annotated[
        int,
        Query(ge=1, le=MAX_PAGE_SIZE, description="Entries per page, 1-100.", examples=[20]),
    ] = DEFAULT_PAGE_SIZE,
) -> PageParams:
    return PageParams(page=page, page_size=page_size)


Paging = Annotated[PageParams, Depends(page_params)]
