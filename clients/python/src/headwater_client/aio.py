"""The asyncio client: the same operations as `Client`, awaited."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from headwater_client import _calls as calls
from headwater_client._base import WAIT_STEP, BaseClient, ssl_context
from headwater_client._batches import Batch, Batcher
from headwater_client._bind import afetch, alisting, andjson_records
from headwater_client._calls import Call
from headwater_client._retry import Attempts
from headwater_client.errors import (
    APIError,
    PayloadTooLarge,
    PushRejected,
    RecordsInvalid,
    WaitTimeout,
    error_from_response,
)
from headwater_client.files import CHUNK_BYTES
from headwater_client.models import (
    BatchResult,
    PushResult,
    Token,
    Transaction,
)

T = TypeVar("T")

Progress = Callable[[int, int], None]


async def _chunks(path: Path, progress: Progress | None) -> AsyncIterator[bytes]:
    total = path.stat().st_size
    sent = 0
    with path.open("rb") as source:
        while piece := await asyncio.to_thread(source.read, CHUNK_BYTES):
            yield piece
            sent += len(piece)
            if progress is not None:
                progress(sent, total)


async def _each(records: Iterable[Any] | AsyncIterable[Any]) -> AsyncIterator[Any]:
    if isinstance(records, AsyncIterable):
        async for record in records:
            yield record
    else:
        for record in records:
            yield record


class AsyncClient(BaseClient):
    """A Headwater API client for asyncio; see `Client` for what it does. Tasks waiting
    for a token share one request."""

    def __init__(
        self,
        url: str,
        client_id: str,
        client_secret: str,
        *,
        http_client: httpx.AsyncClient | None = None,
        **options: Any,
    ) -> None:
        super().__init__(url, client_id, client_secret, **options)
        self._http = http_client or httpx.AsyncClient(timeout=self.timeout, verify=ssl_context())
        self._token_lock = asyncio.Lock()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _send(self, call: Call[T]) -> T:
        attempts = Attempts(self.retry, call.describe(), authenticated=call.auth)
        while True:
            token = (await self.token()).access_token if call.auth else None
            request = self._http.build_request(**self._request(call, token))
            try:
                response = await self._http.send(request, stream=call.stream)
            except httpx.TransportError as exc:
                await asyncio.sleep(attempts.after_error(exc))
                continue
            again = attempts.after_response(response)
            if again is None:
                if response.is_error:
                    await response.aread()
                    await response.aclose()
                    raise error_from_response(response)
                return call.parse(response)
            await response.aclose()
            if again.refresh and token is not None:
                self._tokens.discard(token)
            await asyncio.sleep(again.delay)

    async def token(self) -> Token:
        """The cached access token, fetched or renewed first when due."""
        current = self._tokens.current()
        if current is not None:
            return current
        async with self._token_lock:
            current = self._tokens.current()  # another task may have renewed it
            if current is not None:
                return current
            requested_at = time.monotonic()
            answer = await self._send(self._token_call)
            return self._tokens.store(answer, requested_at=requested_at)

    whoami = afetch(calls.whoami)

    async def push(
        self,
        client_id: str,
        dataset_id: str,
        records: Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> PushResult:
        """As `Client.push`; `records` may also be an async iterable."""
        key = self._push_key(idempotency_key)
        batcher = self._batcher(client_id, dataset_id)
        done: list[BatchResult] = []

        async def send(batch: Batch | None) -> None:
            if batch is not None:
                await self._push_batch(batch, key, batcher, done)
                if progress is not None:
                    progress(batch.first_record + batch.count)

        index = 0
        async for record in _each(records):
            await send(batcher.add(index, record))
            index += 1
        await send(batcher.flush())
        return PushResult(done)

    async def _push_batch(
        self, batch: Batch, key: str, batcher: Batcher, done: list[BatchResult]
    ) -> None:
        if batch.count > 1 and not batcher.fits(batch):
            for half in batch.halves():
                await self._push_batch(half, key, batcher, done)
            return
        try:
            done.append(await self._send(calls.push(batch, key=batch.idempotency_key(key))))
        except PayloadTooLarge as exc:
            if batch.count == 1:
                raise
            batcher.shrink(batch, code=exc.code)
            await self._push_batch(batch, key, batcher, done)  # no longer fits: cut in halves
        except RecordsInvalid as exc:
            raise PushRejected(exc, first_record=batch.first_record, committed=list(done)) from None

    async def upload_file(
        self,
        path: str | Path,
        client_id: str,
        dataset_id: str,
        content_type: str | None = None,
        *,
        file_name: str | None = None,
        progress: Progress | None = None,
        wait: bool = False,
        timeout: float = 3600.0,
    ) -> Transaction:
        """As `Client.upload_file`."""
        upload = self._upload(path, content_type, file_name)
        ticket = await self._send(
            calls.upload_ticket(
                client_id=client_id,
                dataset_id=dataset_id,
                file_name=upload.file_name,
                content_type=upload.content_type,
            )
        )
        put = calls.put_file(
            ticket, size=upload.size, content=lambda: _chunks(upload.path, progress)
        )
        try:
            await self._send(put)
        except APIError as exc:
            if not self._arrived(exc, await self.get_transaction(ticket.transaction_id)):
                raise
        if wait:
            return await self.wait_for_transaction(ticket.transaction_id, timeout=timeout)
        return await self.get_transaction(ticket.transaction_id)

    async def wait_for_transaction(
        self,
        transaction_id: str,
        *,
        timeout: float = 3600.0,
        on_change: Callable[[Transaction], None] | None = None,
    ) -> Transaction:
        """The transaction once it is final. The service answers each request when the
        status changes (`?wait=`), so the final status is seen at once; `on_change` sees
        every answer on the way (its `records_processed` grows while a file processes)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            transaction = await self.get_transaction(
                transaction_id, wait=max(0.0, min(WAIT_STEP, left))
            )
            if on_change is not None:
                on_change(transaction)
            if transaction.finished:
                return transaction
            if time.monotonic() >= deadline:
                raise WaitTimeout(
                    f"transaction {transaction_id} is still {transaction.status} "
                    f"after {timeout:g} s"
                )

    get_transaction = afetch(calls.transaction)
    list_transactions = alisting(calls.transactions)
    list_records = alisting(calls.records)
    get_dataset = afetch(calls.dataset)
    list_datasets = alisting(calls.datasets)
    get_transforms = afetch(calls.transforms)
    get_transform_version = afetch(calls.transform_version)
    set_transforms = afetch(calls.set_transforms)
    preview_transforms = afetch(calls.preview_transforms)
    create_erasure = afetch(calls.create_erasure)
    get_erasure = afetch(calls.erasure)
    list_erasures = alisting(calls.erasures)
    list_suppressions = alisting(calls.suppressions)
    lift_suppression = afetch(calls.lift_suppression)

    stream_records = andjson_records(calls.record_stream)

    get_category = afetch(calls.category)
    list_categories = alisting(calls.categories)
    get_template = afetch(calls.template)
    list_templates = alisting(calls.templates)
    list_workflows = alisting(calls.workflows)
    get_workflow = afetch(calls.workflow)
    get_workflow_task = afetch(calls.workflow_task)
    list_workflow_tasks = alisting(calls.workflow_tasks)
    search_activities = alisting(calls.activities)
