"""The synchronous client. Safe to share between threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar

import httpx

from headwater_client import _calls as calls
from headwater_client._base import WAIT_STEP, BaseClient, ssl_context
from headwater_client._batches import Batch, Batcher
from headwater_client._bind import fetch, listing, ndjson_lines, ndjson_records
from headwater_client._calls import Call
from headwater_client._retry import Attempts
from headwater_client.errors import (
    APIError,
    ErasureFailed,
    ExportFailed,
    PayloadTooLarge,
    PushRejected,
    RecordsInvalid,
    WaitTimeout,
    error_from_response,
)
from headwater_client.files import chunks
from headwater_client.filters import DateTime
from headwater_client.models import (
    BatchResult,
    Changes,
    Erasure,
    Export,
    PushResult,
    Token,
    Transaction,
)

T = TypeVar("T")

Progress = Callable[[int, int], None]


class Client(BaseClient):
    """A Headwater API client for one credential.

        with Client("https://headwater.example.com", CLIENT_ID, CLIENT_SECRET) as hw:
            result = hw.push("acme-crm", "orders", records)

    Tokens are fetched when first needed, cached, and renewed shortly before they
    expire; threads waiting for a token share one request. Requests are retried on
    connection errors, 429 and 502-504, with exponential backoff and jitter, honouring
    `Retry-After`; a 401 is retried once with a new token. Pass `http_client` to set
    proxies, certificates or limits of your own.
    """

    def __init__(
        self,
        url: str,
        client_id: str,
        client_secret: str,
        *,
        http_client: httpx.Client | None = None,
        **options: Any,
    ) -> None:
        super().__init__(url, client_id, client_secret, **options)
        self._http = http_client or httpx.Client(timeout=self.timeout, verify=ssl_context())
        self._token_lock = threading.Lock()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # Sending

    def _send(self, call: Call[T]) -> T:
        attempts = Attempts(self.retry, call.describe(), authenticated=call.auth)
        while True:
            token = self.token().access_token if call.auth else None
            request = self._http.build_request(**self._request(call, token))
            try:
                response = self._http.send(request, stream=call.stream)
            except httpx.TransportError as exc:
                time.sleep(attempts.after_error(exc))
                continue
            again = attempts.after_response(response)
            if again is None:
                if response.is_error:
                    response.read()
                    response.close()
                    raise error_from_response(response)
                return call.parse(response)
            response.close()
            if again.refresh and token is not None:
                self._tokens.discard(token)
            time.sleep(again.delay)

    def token(self) -> Token:
        """The cached access token, fetched or renewed first when due."""
        current = self._tokens.current()
        if current is not None:
            return current
        with self._token_lock:
            current = self._tokens.current()  # another thread may have renewed it
            if current is not None:
                return current
            requested_at = time.monotonic()
            return self._tokens.store(self._send(self._token_call), requested_at=requested_at)

    whoami = fetch(calls.whoami)

    # Pushing

    def push(
        self,
        client_id: str,
        dataset_id: str,
        records: Iterable[Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> PushResult:
        """Push `records` (any iterable, read once, lazily) in batches within the
        service's limits, each batch atomic and carrying its own `Idempotency-Key`.

        A retried batch is never stored twice. Give `idempotency_key` to make a whole
        rerun of the same records safe too (the service keeps keys for 24 h).
        `progress(records_committed)` is called after each batch.

        Raises `PushRejected` when a batch fails validation: it lists the batches
        already committed and each record error, indexed in `records`.
        """
        key = self._push_key(idempotency_key)
        batcher = self._batcher(client_id, dataset_id)
        done: list[BatchResult] = []

        def send(batch: Batch | None) -> None:
            if batch is not None:
                self._push_batch(batch, key, batcher, done)
                if progress is not None:
                    progress(batch.first_record + batch.count)

        for index, record in enumerate(records):
            send(batcher.add(index, record))
        send(batcher.flush())
        return PushResult(done)

    def _push_batch(
        self, batch: Batch, key: str, batcher: Batcher, done: list[BatchResult]
    ) -> None:
        if batch.count > 1 and not batcher.fits(batch):
            for half in batch.halves():
                self._push_batch(half, key, batcher, done)
            return
        try:
            done.append(self._send(calls.push(batch, key=batch.idempotency_key(key))))
        except PayloadTooLarge as exc:
            if batch.count == 1:
                raise
            batcher.shrink(batch, code=exc.code)
            self._push_batch(batch, key, batcher, done)  # no longer fits: cut in halves
        except RecordsInvalid as exc:
            raise PushRejected(exc, first_record=batch.first_record, committed=list(done)) from None

    # Files

    def upload_file(
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
        """Upload a file through a presigned URL, streaming it from disk.

        The content type comes from the name (`.csv`, `.json`, `.ndjson`, `.jsonl`,
        optionally `.gz`) unless given. `progress(sent, total)` follows the bytes.
        Answers the file's transaction: as it is right after the upload, or, with
        `wait`, once it is completed, rejected or failed (`WaitTimeout` after `timeout`).
        """
        upload = self._upload(path, content_type, file_name)
        ticket = self._send(
            calls.upload_ticket(
                client_id=client_id,
                dataset_id=dataset_id,
                file_name=upload.file_name,
                content_type=upload.content_type,
            )
        )
        put = calls.put_file(
            ticket, size=upload.size, content=lambda: chunks(upload.path, progress=progress)
        )
        try:
            self._send(put)
        except APIError as exc:
            if not self._arrived(exc, self.get_transaction(ticket.transaction_id)):
                raise
        if wait:
            return self.wait_for_transaction(ticket.transaction_id, timeout=timeout)
        return self.get_transaction(ticket.transaction_id)

    def wait_for_transaction(
        self,
        transaction_id: str,
        *,
        timeout: float = 3600.0,
        on_change: Callable[[Transaction], None] | None = None,
    ) -> Transaction:
        """The transaction once it is final (completed, rejected, failed, expired). The
        service answers each request when the status changes (`?wait=`), so the final
        status is seen at once; `on_change` sees every answer on the way (its
        `records_processed` grows while a file processes)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            transaction = self.get_transaction(transaction_id, wait=max(0.0, min(WAIT_STEP, left)))
            if on_change is not None:
                on_change(transaction)
            if transaction.finished:
                return transaction
            if time.monotonic() >= deadline:
                raise WaitTimeout(
                    f"transaction {transaction_id} is still {transaction.status} "
                    f"after {timeout:g} s"
                )

    # Reading data

    get_transaction = fetch(calls.transaction)
    list_transactions = listing(calls.transactions)
    list_quarantine = listing(calls.quarantine)
    resubmit = fetch(calls.resubmit)
    list_records = listing(calls.records)
    get_dataset = fetch(calls.dataset)
    list_datasets = listing(calls.datasets)

    # A dataset's transform steps (an operator's token, scope `admin`)

    get_transforms = fetch(calls.transforms)
    get_transform_version = fetch(calls.transform_version)
    set_transforms = fetch(calls.set_transforms)
    preview_transforms = fetch(calls.preview_transforms)

    stream_record_lines = ndjson_lines(calls.record_stream)
    stream_records = ndjson_records(calls.record_stream)

    # Following the record feed and exporting

    get_changes = fetch(calls.changes)
    create_export = fetch(calls.create_export)
    get_export = fetch(calls.export)
    list_exports = listing(calls.exports)

    # Data subjects (scope `data:erase`)

    create_erasure = fetch(calls.create_erasure)
    get_erasure = fetch(calls.erasure)
    list_erasures = listing(calls.erasures)
    list_suppressions = listing(calls.suppressions)
    lift_suppression = fetch(calls.lift_suppression)

    def erase(
        self,
        subjects: list[str],
        *,
        client_id: str | None = None,
        dataset_id: str | None = None,
        suppress: bool = False,
        wait: bool = False,
        progress: Callable[[Erasure], None] | None = None,
        timeout: float = 600.0,
    ) -> Erasure:
        """Erase data subjects everywhere in the service (1000 a call: more are sent in
        several erasures, the last one answered). With `wait`, answers once it is
        completed (`ErasureFailed` if it failed, `WaitTimeout` after `timeout`), calling
        `progress(erasure)` at each look."""
        if not subjects:
            raise ValueError("no subjects to erase")
        erasure: Erasure | None = None
        for start in range(0, len(subjects), 1000):
            erasure = self._send(
                calls.create_erasure(
                    subjects[start : start + 1000],
                    client_id=client_id,
                    dataset_id=dataset_id,
                    suppress=suppress,
                )
            )
            if wait:
                erasure = self._wait_erasure(erasure, progress, timeout)
        assert erasure is not None
        return erasure

    def _wait_erasure(
        self, erasure: Erasure, progress: Callable[[Erasure], None] | None, timeout: float
    ) -> Erasure:
        erasure = _until_finished(
            erasure,
            lambda: self.get_erasure(erasure.erasure_id),
            f"erasure {erasure.erasure_id}",
            timeout,
            progress,
        )
        if erasure.status == "failed":
            raise ErasureFailed(f"erasure {erasure.erasure_id} failed: {erasure.error}")
        return erasure

    def follow(
        self,
        client_id: str,
        dataset_id: str,
        *,
        after: str | None = None,
        limit: int = 1000,
        wait: float = 20.0,
        until_idle: bool = False,
    ) -> Iterator[Changes]:
        """The dataset's record feed from the cursor `after` (None: from its first
        record), page by page, every record exactly once in commit order.

            for page in hw.follow("acme-crm", "orders", after=saved):
                handle(page.records)
                saved = page.next_cursor  # store it: the next run resumes here

        Each request waits up to `wait` seconds for new records (long polling), so a
        follower idles cheaply and sees a commit at once. Runs forever, unless
        `until_idle`: then it stops at the first empty page (the feed's end for now).
        """
        cursor = after
        while True:
            page = self._send(
                calls.changes(
                    client_id,
                    dataset_id,
                    after=cursor,
                    limit=limit,
                    wait=0 if until_idle else wait,
                )
            )
            if page.records:
                yield page
            elif until_idle:
                return
            cursor = page.next_cursor

    def export(
        self,
        client_id: str,
        dataset_id: str,
        format: str = "parquet",
        *,
        ingested_after: DateTime | None = None,
        ingested_before: DateTime | None = None,
        wait: bool = False,
        path: str | Path | None = None,
        progress: Progress | None = None,
        timeout: float = 3600.0,
    ) -> Export:
        """Export the dataset (all records, or those ingested within the bounds).

        Answers the export as queued; with `wait`, once it is completed (`ExportFailed`
        if it failed, `WaitTimeout` after `timeout`), and with `path` as well, after the
        file is downloaded there (`progress(received, total)` follows the bytes; the
        file appears whole or not at all).
        """
        exported = self._send(
            calls.create_export(
                client_id,
                dataset_id,
                format,
                ingested_after=ingested_after,
                ingested_before=ingested_before,
            )
        )
        if not wait:
            return exported
        export_id = exported.export_id
        exported = _until_finished(
            exported, lambda: self.get_export(export_id), f"export {export_id}", timeout
        )
        if exported.status == "failed":
            raise ExportFailed(f"export {exported.export_id} failed: {exported.error}")
        if path is not None:
            self.download_export(exported, path, progress=progress)
        return exported

    def download_export(
        self, export: Export, path: str | Path, *, progress: Progress | None = None
    ) -> Path:
        """Download a completed export's file to `path` (written beside it, then renamed
        into place)."""
        if export.download_url is None:
            export = self.get_export(export.export_id)
        if export.download_url is None:
            raise ExportFailed(f"export {export.export_id} is {export.status}: no file")
        target = Path(path)
        partial = target.with_name(target.name + ".part")
        with self._http.stream("GET", export.download_url) as response:
            if response.is_error:
                response.read()
                raise error_from_response(response)
            total = int(response.headers.get("content-length") or export.file_size or 0)
            received = 0
            with partial.open("wb") as out:
                for chunk in response.iter_bytes(1024 * 1024):
                    out.write(chunk)
                    received += len(chunk)
                    if progress is not None:
                        progress(received, total)
        partial.replace(target)
        return target

    # Reading workflows and the activity log

    get_category = fetch(calls.category)
    list_categories = listing(calls.categories)
    get_template = fetch(calls.template)
    list_templates = listing(calls.templates)
    list_workflows = listing(calls.workflows)
    get_workflow = fetch(calls.workflow)
    get_workflow_task = fetch(calls.workflow_task)
    list_workflow_tasks = listing(calls.workflow_tasks)
    search_activities = listing(calls.activities)

    # Webhook endpoints (scope webhooks:manage)

    create_webhook_endpoint = fetch(calls.create_webhook_endpoint)
    get_webhook_endpoint = fetch(calls.webhook_endpoint)
    list_webhook_endpoints = listing(calls.webhook_endpoints)
    update_webhook_endpoint = fetch(calls.update_webhook_endpoint)
    delete_webhook_endpoint = fetch(calls.delete_webhook_endpoint)
    rotate_webhook_secret = fetch(calls.rotate_webhook_secret)
    list_webhook_deliveries = listing(calls.webhook_deliveries)
    replay_webhooks = fetch(calls.replay_webhooks)
    send_webhook_test = fetch(calls.test_webhook)


class _Job(Protocol):
    @property
    def finished(self) -> bool: ...

    @property
    def status(self) -> str: ...


J = TypeVar("J", bound=_Job)


def _until_finished(
    job: J,
    read: Callable[[], J],
    name: str,
    timeout: float,
    progress: Callable[[J], None] | None = None,
) -> J:
    """Read a job the service runs (an export, an erasure) until it is finished, waiting
    longer between reads (WaitTimeout after `timeout`); `progress` sees each read."""
    deadline = time.monotonic() + timeout
    pause = 0.1
    while True:
        if progress is not None:
            progress(job)
        if job.finished:
            return job
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"{name} is still {job.status}")
        time.sleep(pause)
        pause = min(pause * 1.5, WAIT_STEP / 4)
        job = read()
