"""Read operations, defined once in `_calls`, bound as methods of both clients:
`get_category = fetch(calls.category)` on `Client` sends the call and answers its
result; `afetch` does the same awaited on `AsyncClient`; `listing` and `alisting`
answer a pager over the pages. The methods keep the operation's signature and docs."""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import httpx

from headwater_client._calls import Call, PageCall
from headwater_client.errors import ConnectionFailed
from headwater_client.models import Record, Resource
from headwater_client.pagination import AsyncPager, Pager

P = ParamSpec("P")
T = TypeVar("T")
R = TypeVar("R", bound=Resource)
F = TypeVar("F", bound=Callable[..., Any])


class Sends(Protocol):
    def _send(self, call: Call[T]) -> T: ...


class SendsAsync(Protocol):
    async def _send(self, call: Call[T]) -> T: ...


def _like(method: F, make: Callable[..., Any]) -> F:
    """`method` with the name, docs and parameters of `make` (not its return type)."""
    functools.update_wrapper(method, make)
    signature = inspect.signature(make).replace(return_annotation=inspect.Signature.empty)
    method.__dict__["__signature__"] = signature
    return method


def fetch(make: Callable[P, Call[T]]) -> Callable[Concatenate[Sends, P], T]:
    def method(self: Sends, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._send(make(*args, **kwargs))

    return _like(method, make)


def afetch(
    make: Callable[P, Call[T]],
) -> Callable[Concatenate[SendsAsync, P], Coroutine[Any, Any, T]]:
    async def method(self: SendsAsync, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._send(make(*args, **kwargs))

    return _like(method, make)


def listing(make: Callable[P, PageCall[R]]) -> Callable[Concatenate[Sends, P], Pager[R]]:
    def method(self: Sends, /, *args: P.args, **kwargs: P.kwargs) -> Pager[R]:
        return Pager(self._send, make(*args, **kwargs))

    return _like(method, make)


def alisting(
    make: Callable[P, PageCall[R]],
) -> Callable[Concatenate[SendsAsync, P], AsyncPager[R]]:
    def method(self: SendsAsync, /, *args: P.args, **kwargs: P.kwargs) -> AsyncPager[R]:
        return AsyncPager(self._send, make(*args, **kwargs))

    return _like(method, make)


def ndjson_lines(
    make: Callable[P, Call[httpx.Response]],
) -> Callable[Concatenate[Sends, P], Iterator[bytes]]:
    """Each line of a streamed NDJSON answer (without its line break), read as it comes."""

    def method(self: Sends, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[bytes]:
        response = self._send(make(*args, **kwargs))
        try:
            for line in response.iter_lines():
                if line:
                    yield line.encode()
        except httpx.TransportError as exc:
            raise ConnectionFailed(f"the stream broke off: {exc}") from exc
        finally:
            response.close()

    return _like(method, make)


def ndjson_records(
    make: Callable[P, Call[httpx.Response]],
) -> Callable[Concatenate[Sends, P], Iterator[Record]]:
    lines = ndjson_lines(make)

    def method(self: Sends, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[Record]:
        for line in lines(self, *args, **kwargs):
            yield Record.from_json(json.loads(line))

    return _like(method, make)


def andjson_records(
    make: Callable[P, Call[httpx.Response]],
) -> Callable[Concatenate[SendsAsync, P], AsyncIterator[Record]]:
    async def method(
        self: SendsAsync, /, *args: P.args, **kwargs: P.kwargs
    ) -> AsyncIterator[Record]:
        response = await self._send(make(*args, **kwargs))
        try:
            async for line in response.aiter_lines():
                if line:
                    yield Record.from_json(json.loads(line))
        except httpx.TransportError as exc:
            raise ConnectionFailed(f"the stream broke off: {exc}") from exc
        finally:
            await response.aclose()

    return _like(method, make)
