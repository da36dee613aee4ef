"""Lists, page by page or item by item: `Pager` for the sync client, `AsyncPager` for
the async one. Pages are numbered from 0; iterating a pager walks every page in turn.

A list that changes while it is walked may show an item twice or skip one, as with any
offset paging; bound the walk (a timestamp range, a creation time) when that matters.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Generic, TypeVar

from headwater_client._calls import Call, PageCall
from headwater_client.models import Page, Resource

T = TypeVar("T", bound=Resource)


class Pager(Generic[T]):
    def __init__(self, send: Callable[[Call[Page[T]]], Page[T]], make: PageCall[T]) -> None:
        self._send = send
        self._make = make

    def page(self, number: int = 0) -> Page[T]:
        """One page."""
        return self._send(self._make(number))

    def pages(self, start: int = 0) -> Iterator[Page[T]]:
        """Every page from `start` to the last."""
        number = start
        while True:
            current = self.page(number)
            yield current
            if current.is_last:
                return
            number += 1

    def __iter__(self) -> Iterator[T]:
        for current in self.pages():
            yield from current.data


class AsyncPager(Generic[T]):
    def __init__(
        self, send: Callable[[Call[Page[T]]], Awaitable[Page[T]]], make: PageCall[T]
    ) -> None:
        self._send = send
        self._make = make

    async def page(self, number: int = 0) -> Page[T]:
        """One page."""
        return await self._send(self._make(number))

    async def pages(self, start: int = 0) -> AsyncIterator[Page[T]]:
        """Every page from `start` to the last."""
        number = start
        while True:
            current = await self.page(number)
            yield current
            if current.is_last:
                return
            number += 1

    async def __aiter__(self) -> AsyncIterator[T]:
        async for current in self.pages():
            for item in current.data:
                yield item
