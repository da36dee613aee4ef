"""`headwater-client`: the API from a shell.

Credentials come from HEADWATER_URL, HEADWATER_CLIENT_ID, HEADWATER_CLIENT_SECRET (and
HEADWATER_AUDIENCE, HEADWATER_AUTH_URL), or from a profile file (`--profile`, see
`headwater_client.config`). Results go to stdout, progress and errors to stderr.

Exit codes: 0 done; 1 the service refused the request, or a file or push was rejected;
2 bad usage or configuration; 3 credentials refused (401) or not allowed (403);
4 the service could not be reached or stayed unavailable; 130 interrupted.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from headwater_client import filters
from headwater_client._retry import RetryPolicy
from headwater_client.client import Client
from headwater_client.errors import (
    APIError,
    AuthenticationError,
    ConfigurationError,
    ConnectionFailed,
    HeadwaterError,
    PermissionDenied,
    PushRejected,
    RateLimited,
    ServiceUnavailable,
    WaitTimeout,
)
from headwater_client.files import read_records
from headwater_client.models import Erasure, Export, PushResult, Resource, Transaction

ResourceT = TypeVar("ResourceT", bound=Resource)

OK, REFUSED, USAGE, ACCESS, UNREACHABLE, INTERRUPTED = 0, 1, 2, 3, 4, 130
SHOWN_ERRORS = 20

# No console markup: names, messages and values from the service are printed as they are.
out = Console(highlight=False, soft_wrap=True, markup=False)
err = Console(stderr=True, highlight=False, markup=False)


class Failed(Exception):
    """A command that ran but whose outcome is a failure (a rejected file...)."""


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _choose_output(args)
    try:
        with _client(args) as client:
            args.run(client, args)
        return OK
    except KeyboardInterrupt:
        err.print("interrupted")
        return INTERRUPTED
    except BaseException as exc:
        return _report(exc)


def _report(exc: BaseException) -> int:
    """Print what went wrong; answer the exit code."""
    if isinstance(exc, PushRejected):
        _print_push_rejected(exc)
        return REFUSED
    if isinstance(exc, APIError):
        _error(exc)
        for error in exc.errors[:SHOWN_ERRORS]:
            where = error.get("path") or error.get("loc") or error.get("parameter") or ""
            err.print(f"  {where}: {error.get('message') or error.get('msg') or error}")
        if isinstance(exc, AuthenticationError | PermissionDenied):
            return ACCESS
        if isinstance(exc, RateLimited | ServiceUnavailable):
            return UNREACHABLE
        return REFUSED
    if isinstance(exc, ConnectionFailed | WaitTimeout):
        _error(exc)
        return UNREACHABLE
    if isinstance(exc, ConfigurationError):
        _error(exc)
        return USAGE
    if isinstance(exc, Failed | HeadwaterError | OSError):
        _error(exc)
        return REFUSED
    raise exc


def _error(exc: BaseException) -> None:
    err.print(f"error: {exc}", style="red")


def _client(args: argparse.Namespace) -> Client:
    environ = dict(os.environ)
    if args.url:
        environ["HEADWATER_URL"] = args.url
    return Client.from_env(
        args.profile, environ=environ, retry=RetryPolicy(max_retries=args.retries)
    )


def _progress(*columns: Any) -> Progress:
    return Progress(*columns, console=err, transient=True, disable=not err.is_terminal)


# How results are printed, chosen once a run (`--output`; table on a terminal, TSV when
# stdout is a pipe or a file, so that ids are never wrapped or cut).
_output = "table"


def _choose_output(args: argparse.Namespace) -> None:
    global _output
    chosen = getattr(args, "output_format", None)
    if getattr(args, "json", False):
        chosen = "json"
    _output = chosen or ("table" if out.is_terminal else "tsv")
    if hasattr(args, "json"):
        args.json = _output == "json"


def _tsv(values: Iterable[Any]) -> str:
    """One TSV line: tabs and newlines inside a value become spaces."""
    return "\t".join(
        _cell(value).replace("\t", " ").replace("\n", " ").replace("\r", " ") for value in values
    )


def _print_json(value: Any) -> None:
    text = json.dumps(value, default=str)
    if out.is_terminal:
        out.print_json(text, indent=2)
    else:
        print(text)


def _fields(resource: Resource, *names: str, title: str | None = None) -> None:
    if _output == "tsv":
        for name in names:
            print(_tsv([name, resource.to_json().get(name)]))
        return
    table = Table(show_header=False, title=title, title_justify="left", box=None)
    table.add_column(style="bold")
    table.add_column()
    for name in names:
        table.add_row(name, _cell(resource.to_json().get(name)))
    out.print(table)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ", ".join(str(item) for item in value)
    return str(value)


def _rows(items: Iterable[Resource], columns: Sequence[str], *, as_json: bool) -> None:
    if as_json:  # one JSON object a line
        for item in items:
            print(json.dumps(item.to_json()))
        return
    if _output == "tsv":
        print(_tsv(columns))
        for item in items:
            raw = item.to_json()
            print(_tsv(raw.get(c) for c in columns))
        return
    table = Table()
    for column in columns:  # ids are copied from here: wrap them, never cut them short
        table.add_column(column, overflow="fold")
    for item in items:
        raw = item.to_json()
        table.add_row(*(_cell(raw.get(c)) for c in columns))
    out.print(table)


def _limited(items: Iterable[Any], limit: int) -> Iterator[Any]:
    return iter(items) if limit == 0 else islice(items, limit)


# Commands


def cmd_token(client: Client, args: argparse.Namespace) -> None:
    token = client.token()
    if args.json:
        _print_json(token.to_json())
    else:
        print(token.access_token)


def cmd_whoami(client: Client, args: argparse.Namespace) -> None:
    me = client.whoami()
    if args.json:
        _print_json(me.to_json())
    else:
        _fields(me, "subject", "company_id", "author_id", "scopes", "client_ids")


def cmd_push(client: Client, args: argparse.Namespace) -> None:
    records = read_records(args.file, format=args.format)
    with _progress(SpinnerColumn(), TextColumn("{task.completed:,.0f} records committed")) as bar:
        task = bar.add_task("push", total=None)
        result = client.push(
            args.client_id,
            args.dataset_id,
            records,
            idempotency_key=args.idempotency_key,
            progress=lambda committed: bar.update(task, completed=committed),
        )
    _print_push(result, as_json=args.json)


def _print_push(result: PushResult, *, as_json: bool) -> None:
    if as_json:
        _print_json({"records_accepted": result.records_accepted, "batches": _batches(result)})
        return
    out.print(
        f"pushed {result.records_accepted:,} records in {len(result.batches)} "
        f"batch{'es' if len(result.batches) != 1 else ''}"
    )
    table = Table("transaction_id", "first_record", "records", "replayed")
    for batch in result.batches:
        table.add_row(
            batch.transaction_id,
            str(batch.first_record),
            str(batch.records_accepted),
            "yes" if batch.replayed else "",
        )
    out.print(table)


def _batches(result: PushResult) -> list[dict[str, Any]]:
    return [
        {**b.to_json(), "first_record": b.first_record, "replayed": b.replayed}
        for b in result.batches
    ]


def _print_push_rejected(exc: PushRejected) -> None:
    err.print(
        f"rejected: {exc.error_count} {'error' if exc.error_count == 1 else 'errors'} "
        f"in the batch starting at record "
        f"{exc.first_record} (transaction {exc.transaction_id}); nothing of that batch was "
        f"stored. {sum(b.records_accepted for b in exc.committed):,} records in "
        f"{len(exc.committed)} earlier {'batch' if len(exc.committed) == 1 else 'batches'} "
        "were committed."
    )
    for error in exc.record_errors[:SHOWN_ERRORS]:
        err.print(f"  record {error.record} {error.path or '/'}: {error.message} ({error.keyword})")
    if exc.error_count > SHOWN_ERRORS:
        err.print(f"  ... and {exc.error_count - SHOWN_ERRORS} more")


def cmd_upload(client: Client, args: argparse.Namespace) -> None:
    with _progress(
        TextColumn("uploading"), BarColumn(), DownloadColumn(), TransferSpeedColumn()
    ) as bar:
        task = bar.add_task("upload", total=Path(args.file).stat().st_size)
        transaction = client.upload_file(
            args.file,
            args.client_id,
            args.dataset_id,
            args.content_type,
            progress=lambda sent, total: bar.update(task, completed=sent, total=total),
        )
    if not args.no_wait:
        with _progress(SpinnerColumn(), TextColumn("{task.description}")) as shown:
            step = shown.add_task(f"processing (transaction {transaction.transaction_id})")

            def show(now: Transaction) -> None:
                done = now.records_processed
                rows = f": {done:,} rows so far" if done and not now.finished else ""
                shown.update(step, description=f"{now.status} {now.transaction_id}{rows}")

            transaction = client.wait_for_transaction(
                transaction.transaction_id, timeout=args.timeout, on_change=show
            )
    _print_transaction(transaction, as_json=args.json)
    if transaction.finished and transaction.status != "completed":
        raise Failed(f"the file was {transaction.status}")


def _print_transaction(transaction: Transaction, *, as_json: bool) -> None:
    if as_json:
        _print_json(transaction.to_json())
        return
    names = ["transaction_id", "kind", "channel", "status", "client_id", "dataset_id"]
    names += ["schema_version", "transform_version"]
    names += ["records_received", "records_processed", "records_accepted", "records_rejected"]
    names += ["records_filtered", "records_duplicates", "records_suppressed", "error_count"]
    if transaction.kind == "file":
        names += ["file_name", "file_size", "content_type", "uploaded_at", "started_at"]
    _fields(transaction, *names, "created_at", "completed_at")
    if transaction.errors:
        table = Table("line", "record", "path", "keyword", "message", title="errors")
        for error in transaction.errors[:SHOWN_ERRORS]:
            line = "" if error.line is None else str(error.line)
            table.add_row(line, str(error.record), error.path, error.keyword, error.message)
        out.print(table)
        if transaction.error_count > SHOWN_ERRORS:
            out.print(f"... and {transaction.error_count - SHOWN_ERRORS} more")


def cmd_transactions_show(client: Client, args: argparse.Namespace) -> None:
    _print_transaction(client.get_transaction(args.transaction_id), as_json=args.json)


def cmd_transactions_quarantine(client: Client, args: argparse.Namespace) -> None:
    pager = client.list_quarantine(args.transaction_id, status=args.status)
    _listed(
        _limited(pager, args.limit),
        as_json=args.json,
        row=lambda r: {
            "line": r.line,
            "record": r.record,
            "errors": "; ".join(f"{e.get('path')}: {e.get('message')}" for e in r.errors),
            "resolved_by": r.resolved_by or "",
        },
    )


def cmd_transactions_resubmit(client: Client, args: argparse.Namespace) -> None:
    corrections = None
    if args.corrections:
        given = json.loads(Path(args.corrections).read_text())
        corrections = {int(row["line"]): row["data"] for row in given}
    _print_transaction(client.resubmit(args.transaction_id, corrections), as_json=args.json)


def cmd_transactions_list(client: Client, args: argparse.Namespace) -> None:
    pager = client.list_transactions(
        client_id=args.client_id,
        dataset_id=args.dataset_id,
        status=args.status,
        channel=args.channel,
        created_after=args.created_after,
        created_before=args.created_before,
    )
    columns = ["transaction_id", "kind", "channel", "status", "client_id", "dataset_id"]
    columns += ["created_at"]
    _rows(_limited(pager, args.limit), [*columns, "records_accepted"], as_json=args.json)


def cmd_records_follow(client: Client, args: argparse.Namespace) -> None:
    """NDJSON records of the feed on stdout; the cursor saved after each page."""
    saved = Path(args.cursor_file) if args.cursor_file else None
    after = args.after
    if after is None and saved is not None and saved.exists():
        after = saved.read_text().strip() or None
    count = 0
    try:
        for page in client.follow(
            args.client_id, args.dataset_id, after=after, until_idle=args.until_idle
        ):
            for record in page.records:
                sys.stdout.write(json.dumps(record.to_json(), separators=(",", ":")) + "\n")
            sys.stdout.flush()
            count += len(page.records)
            if saved is not None:  # written beside, then renamed: never half a cursor
                partial = saved.with_name(saved.name + ".part")
                partial.write_text(page.next_cursor + "\n")
                partial.replace(saved)
    except KeyboardInterrupt:
        pass
    err.print(f"followed {count:,} records")


def cmd_exports_create(client: Client, args: argparse.Namespace) -> None:
    export = functools.partial(
        client.export,
        args.client_id,
        args.dataset_id,
        args.format,
        ingested_after=args.ingested_after,
        ingested_before=args.ingested_before,
        timeout=args.timeout,
    )
    if args.file is None:
        exported = export(wait=args.wait)
    else:
        with _progress(
            TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn()
        ) as bar:
            task = bar.add_task("exporting and downloading", total=None)
            exported = export(
                wait=True,
                path=args.file,
                progress=lambda got, total: bar.update(task, completed=got, total=total or None),
            )
        err.print(f"wrote {exported.record_count:,} records to {args.file}")
    _print_export(exported, as_json=args.json)


def cmd_exports_list(client: Client, args: argparse.Namespace) -> None:
    pager = client.list_exports(
        client_id=args.client_id, dataset_id=args.dataset_id, status=args.status
    )
    columns = ["export_id", "dataset_id", "format", "status", "record_count", "created_at"]
    _rows(_limited(pager, args.limit), columns, as_json=args.json)


def cmd_exports_show(client: Client, args: argparse.Namespace) -> None:
    _print_export(client.get_export(args.export_id), as_json=args.json)


def cmd_exports_download(client: Client, args: argparse.Namespace) -> None:
    exported = client.get_export(args.export_id)
    with _progress(TextColumn("downloading"), BarColumn(), DownloadColumn()) as bar:
        task = bar.add_task("download", total=exported.file_size)
        client.download_export(
            exported,
            args.file,
            progress=lambda got, total: bar.update(task, completed=got, total=total or None),
        )
    err.print(f"wrote {args.file}")


def _print_export(exported: Export, *, as_json: bool) -> None:
    if as_json:
        _print_json(exported.to_json())
        return
    _rows(
        [exported],
        ["export_id", "format", "status", "record_count", "file_size", "completed_at"],
        as_json=False,
    )
    if exported.error:
        err.print(f"error: {exported.error}", style="red")


def _subjects(args: argparse.Namespace) -> list[str]:
    """The subjects named, or read from a file a line each (`-` for stdin)."""
    subjects = list(args.subject)
    if args.from_file:
        stream = sys.stdin if args.from_file == "-" else open(args.from_file)  # noqa: SIM115
        with stream:
            subjects += [line.strip() for line in stream if line.strip()]
    if not subjects:
        raise SystemExit("name at least one subject, or give --from-file")
    return subjects


def cmd_erase(client: Client, args: argparse.Namespace) -> None:
    subjects = _subjects(args)
    erase = functools.partial(
        client.erase,
        subjects,
        client_id=args.client_id,
        dataset_id=args.dataset_id,
        suppress=args.suppress,
        timeout=args.timeout,
    )
    if not args.wait:
        _print_erasure(erase(), as_json=args.json)
        return
    with _progress(TextColumn("{task.description}")) as bar:
        task = bar.add_task("erasing", total=None)

        def progress(erasure: Erasure) -> None:
            counts = erasure.counts
            done = (
                ""
                if counts is None
                else (
                    f": {counts.records:,} records, {counts.quarantined_rows:,} quarantined rows, "
                    f"{counts.files:,} files, {counts.exports:,} exports"
                )
            )
            bar.update(task, description=f"erasure {erasure.status}{done}")

        erased = erase(wait=True, progress=progress)
    _print_erasure(erased, as_json=args.json)


def _print_erasure(erasure: Erasure, *, as_json: bool) -> None:
    if as_json:
        _print_json(erasure.to_json())
        return
    _fields(erasure, "erasure_id", "status", "subject_count", "suppress", "completed_at")
    if erasure.counts is not None:
        _fields(erasure.counts, "records", "quarantined_rows", "files", "exports", title="removed")
    if erasure.error:
        err.print(f"error: {erasure.error}", style="red")


def cmd_erasures_list(client: Client, args: argparse.Namespace) -> None:
    columns = ["erasure_id", "status", "subject_count", "suppress", "created_at"]
    _rows(
        _limited(client.list_erasures(status=args.status), args.limit), columns, as_json=args.json
    )


def cmd_erasures_show(client: Client, args: argparse.Namespace) -> None:
    _print_erasure(client.get_erasure(args.erasure_id), as_json=args.json)


def cmd_suppressions_list(client: Client, args: argparse.Namespace) -> None:
    columns = ["suppression_id", "erasure_id", "client_id", "dataset_id", "created_at"]
    _rows(_limited(client.list_suppressions(), args.limit), columns, as_json=args.json)


def cmd_suppressions_lift(client: Client, args: argparse.Namespace) -> None:
    client.lift_suppression(args.suppression_id)
    err.print(f"lifted {args.suppression_id}: the subject's records are stored again")


def cmd_records_export(client: Client, args: argparse.Namespace) -> None:
    lines = client.stream_record_lines(
        args.client_id,
        args.dataset_id,
        transaction_id=args.transaction_id,
        ingested_after=args.ingested_after,
        ingested_before=args.ingested_before,
        filter=args.filter,
    )
    target = sys.stdout.buffer if args.output == "-" else open(args.output, "wb")  # noqa: SIM115
    count = 0
    try:
        for line in lines:
            target.write(line + b"\n")
            count += 1
    finally:
        target.flush()
        if target is not sys.stdout.buffer:
            target.close()
    err.print(f"exported {count:,} records")


def cmd_categories_list(client: Client, args: argparse.Namespace) -> None:
    pager = client.list_categories(
        name=args.name,
        description=args.description,
        sort_by=args.sort_by,
        sort_direction=args.sort_direction,
    )
    columns = ["id", "name", "description", "created_at", "updated_at"]
    _rows(_limited(pager, args.limit), columns, as_json=args.json)


def cmd_workflow_list(client: Client, args: argparse.Namespace) -> None:
    pager = client.list_workflows(
        status=args.status,
        workflow_template_id=args.template_id,
        name=args.name,
        due_after=args.due_after,
        due_before=args.due_before,
        sort_by=args.sort_by,
        sort_direction=args.sort_direction,
    )
    columns = ["id", "name", "status", "due_date", "workflow_template_id", "updated_at"]
    _rows(_limited(pager, args.limit), columns, as_json=args.json)


def cmd_workflow_show(client: Client, args: argparse.Namespace) -> None:
    workflow = client.get_workflow(args.workflow_id)
    tasks = list(client.list_workflow_tasks(workflow.id))
    if args.json:
        _print_json({**workflow.to_json(), "tasks": [task.to_json() for task in tasks]})
        return
    _fields(
        workflow,
        "id",
        "name",
        "description",
        "status",
        "workflow_template_id",
        "due_date",
        "notification_date",
        "created_at",
        "updated_at",
        "created_by",
        "updated_by",
    )
    _rows(tasks, ["id", "step_id", "name", "type", "updated_at"], as_json=False)


def cmd_activities_search(client: Client, args: argparse.Namespace) -> None:
    bounds = {"after": args.after, "since": args.since, "before": args.before, "until": args.until}
    chosen = {name: value for name, value in bounds.items() if value is not None}
    pager = client.search_activities(
        resource_type=args.resource_type,
        resource_id=args.resource_id,
        author_id=args.author_id,
        action=args.action,
        timestamp=filters.time_range(**chosen) if chosen else None,
        sort_by=args.sort_by,
        sort_direction=args.sort_direction,
    )
    columns = ["timestamp", "resource_type", "action", "resource_id", "author_id"]
    _rows(_limited(pager, args.limit), columns, as_json=args.json)


# Arguments


ENDPOINT_COLUMNS = ["id", "url", "status", "event_types", "description", "created_at"]


def cmd_webhooks_create(client: Client, args: argparse.Namespace) -> None:
    endpoint = client.create_webhook_endpoint(
        args.endpoint_url, args.event_types.split(","), description=args.description
    )
    if args.json:
        _print_json(endpoint.to_json())
    else:
        _fields(endpoint, *ENDPOINT_COLUMNS, "secret", title="shown once: keep the secret")


def cmd_webhooks_list(client: Client, args: argparse.Namespace) -> None:
    pager = client.list_webhook_endpoints()
    _rows(_limited(pager, args.limit), ENDPOINT_COLUMNS, as_json=args.json)


def cmd_webhooks_show(client: Client, args: argparse.Namespace) -> None:
    endpoint = client.get_webhook_endpoint(args.endpoint_id)
    if args.json:
        _print_json(endpoint.to_json())
    else:
        _fields(endpoint, *ENDPOINT_COLUMNS, "updated_at")


def cmd_webhooks_update(client: Client, args: argparse.Namespace) -> None:
    types = args.event_types.split(",") if args.event_types else None
    endpoint = client.update_webhook_endpoint(
        args.endpoint_id,
        url=args.endpoint_url,
        event_types=types,
        description=args.description,
        status=args.status,
    )
    if args.json:
        _print_json(endpoint.to_json())
    else:
        _fields(endpoint, *ENDPOINT_COLUMNS, "updated_at")


def cmd_webhooks_delete(client: Client, args: argparse.Namespace) -> None:
    client.delete_webhook_endpoint(args.endpoint_id)
    if not args.json:
        print(f"deleted {args.endpoint_id}")


def cmd_webhooks_rotate(client: Client, args: argparse.Namespace) -> None:
    secret = client.rotate_webhook_secret(args.endpoint_id)
    if args.json:
        _print_json({"secret": secret})
    else:
        print(secret)


def cmd_webhooks_deliveries(client: Client, args: argparse.Namespace) -> None:
    pager = client.list_webhook_deliveries(args.endpoint_id, status=args.status)
    _listed(
        _limited(pager, args.limit),
        as_json=args.json,
        row=lambda d: {
            "event_id": d.event_id,
            "event_type": d.event_type,
            "status": d.status,
            "attempts": len(d.attempts),
            "last": (d.attempts[-1].get("status_code") or d.attempts[-1].get("error"))
            if d.attempts
            else "",
            "next_attempt_at": d.next_attempt_at or "",
        },
    )


def cmd_webhooks_test(client: Client, args: argparse.Namespace) -> None:
    event_id = client.send_webhook_test(args.endpoint_id)
    if args.json:
        _print_json({"event_id": event_id})
    else:
        print(f"sent webhook.test {event_id}")


def cmd_webhooks_replay(client: Client, args: argparse.Namespace) -> None:
    queued = client.replay_webhooks(
        args.endpoint_id, since=args.since, until=args.until, only_failed=args.only_failed
    )
    if args.json:
        _print_json({"queued": queued})
    else:
        print(f"queued {queued}")


def _listed(
    items: Iterable[ResourceT], *, as_json: bool, row: Callable[[ResourceT], dict[str, Any]]
) -> None:
    """Resources, one JSON object a line, or as a table of the columns `row` makes of
    each (for columns not in the resources' JSON as they are)."""
    if as_json:
        for item in items:
            _print_json(item.to_json())
        return
    _print_dicts([row(item) for item in items])


def _print_dicts(rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    columns = list(rows[0])
    print(_tsv(columns))
    for row in rows:
        print(_tsv(_cell(row[c]) for c in columns))


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc.msg}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def _repeatable(value: list[str] | None) -> str | list[str] | None:
    """One value matches exactly; several match any of them (`$in`)."""
    if not value:
        return None
    return value[0] if len(value) == 1 else value


class _Repeat(argparse.Action):
    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        current = getattr(namespace, self.dest) or []
        current = current if isinstance(current, list) else [current]
        setattr(namespace, self.dest, _repeatable([*current, values]))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="headwater-client",
        description="Push data, upload files and read everything back from a Headwater API.",
        epilog=(
            "Credentials: HEADWATER_URL, HEADWATER_CLIENT_ID, HEADWATER_CLIENT_SECRET, or a "
            "profile. Exit codes: 1 refused or rejected, 2 usage or configuration, "
            "3 credentials refused, 4 service unreachable."
        ),
    )
    parser.add_argument("--profile", help="profile of the profiles file (default: default)")
    parser.add_argument("--url", help="the service's URL (overrides HEADWATER_URL)")
    parser.add_argument(
        "--retries", type=int, default=5, help="retries on connection errors, 429 and 503 (5)"
    )
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    def command(
        group: Any, name: str, run: Callable[..., None], helptext: str, *, json_flag: bool = True
    ) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = group.add_parser(name, help=helptext, description=helptext)
        sub.set_defaults(run=run)
        if json_flag:
            sub.add_argument(
                "-o",
                "--output",
                dest="output_format",
                choices=["table", "tsv", "json"],
                help="how to print results: table (default on a terminal), tsv (default "
                "when stdout is a pipe or a file), json (one object a line for lists)",
            )
            sub.add_argument("--json", action="store_true", help="the same as --output json")
        return sub

    def dataset_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("-c", "--client-id", required=True, help="the ingestion client")
        sub.add_argument("-d", "--dataset-id", required=True, help="the dataset")

    def limit_option(sub: argparse.ArgumentParser, default: int = 50) -> None:
        sub.add_argument(
            "--limit", type=int, default=default, help=f"at most N (default {default}; 0: all)"
        )

    command(commands, "token", cmd_token, "print a new access token")
    command(commands, "whoami", cmd_whoami, "what the credentials are allowed")

    push = command(commands, "push", cmd_push, "push the records of a JSON, NDJSON or CSV file")
    push.add_argument("file", help="the file; - for stdin (then give --format)")
    dataset_options(push)
    push.add_argument("--format", choices=["json", "ndjson", "csv"], help="default: from the name")
    push.add_argument("--idempotency-key", help="makes a rerun of the same file store nothing")

    upload = command(commands, "upload", cmd_upload, "upload a file and wait for its outcome")
    upload.add_argument("file")
    dataset_options(upload)
    upload.add_argument("--content-type", help="default: from the name (.csv, .json, .ndjson)")
    upload.add_argument("--no-wait", action="store_true", help="do not wait for processing")
    upload.add_argument("--timeout", type=float, default=3600, help="seconds to wait (3600)")

    transactions = commands.add_parser("transactions", help="transactions").add_subparsers(
        required=True, metavar="COMMAND"
    )
    show = command(transactions, "show", cmd_transactions_show, "one transaction")
    show.add_argument("transaction_id")
    held = command(
        transactions, "quarantine", cmd_transactions_quarantine, "a file's quarantined rows"
    )
    held.add_argument("transaction_id")
    held.add_argument("--status", choices=["open", "resolved", "all"], default="open")
    limit_option(held)
    again = command(
        transactions, "resubmit", cmd_transactions_resubmit, "resubmit quarantined rows"
    )
    again.add_argument("transaction_id")
    again.add_argument(
        "--corrections",
        metavar="FILE",
        help='JSON [{"line": 3, "data": {...}}]: only those rows, corrected',
    )
    listing = command(transactions, "list", cmd_transactions_list, "transactions, newest first")
    listing.add_argument("-c", "--client-id", help="only this ingestion client's")
    listing.add_argument("-d", "--dataset-id", help="only this dataset's")
    listing.add_argument(
        "--status",
        help="awaiting_upload, processing, completed, rejected, failed or expired",
    )
    listing.add_argument("--channel", choices=["api", "upload", "sftp", "email"])
    listing.add_argument("--created-after", help="ISO 8601 date-time, inclusive")
    listing.add_argument("--created-before", help="ISO 8601 date-time, exclusive")
    limit_option(listing)

    records = commands.add_parser("records", help="stored records").add_subparsers(
        required=True, metavar="COMMAND"
    )
    export = command(
        records, "export", cmd_records_export, "every matching record as NDJSON", json_flag=False
    )
    dataset_options(export)
    export.add_argument("--transaction-id")
    export.add_argument("--ingested-after", help="ISO 8601 date-time, inclusive")
    export.add_argument("--ingested-before", help="ISO 8601 date-time, exclusive")
    export.add_argument("--filter", type=_json_object, help="e.g. '{\"paid\": true}'")
    export.add_argument("-o", "--output", default="-", help="file to write (default stdout)")

    follow = command(
        records,
        "follow",
        cmd_records_follow,
        "the record feed as NDJSON: every record once, in commit order, as it commits",
        json_flag=False,
    )
    dataset_options(follow)
    follow.add_argument("--after", help="a saved cursor (default: the cursor file's, or the start)")
    follow.add_argument(
        "--cursor-file", help="where the cursor is kept: read at start, written after each page"
    )
    follow.add_argument(
        "--until-idle", action="store_true", help="stop at the end of the feed instead of waiting"
    )

    exports = commands.add_parser("exports", help="dataset exports").add_subparsers(
        required=True, metavar="COMMAND"
    )
    create = command(exports, "create", cmd_exports_create, "export a dataset to a file")
    dataset_options(create)
    create.add_argument("--format", choices=["parquet", "ndjson", "csv"], default="parquet")
    create.add_argument("--ingested-after", help="ISO 8601 date-time, inclusive")
    create.add_argument("--ingested-before", help="ISO 8601 date-time, exclusive")
    create.add_argument("--wait", action="store_true", help="wait until the export is done")
    create.add_argument("-f", "--file", help="wait, then download the file here")
    create.add_argument("--timeout", type=float, default=3600, help="seconds to wait (3600)")
    listed = command(exports, "list", cmd_exports_list, "the company's exports, newest first")
    listed.add_argument("-c", "--client-id", help="only this ingestion client's")
    listed.add_argument("-d", "--dataset-id", help="only this dataset's")
    listed.add_argument("--status", choices=["queued", "running", "completed", "failed"])
    limit_option(listed)
    shown = command(exports, "show", cmd_exports_show, "one export")
    shown.add_argument("export_id")
    fetched = command(
        exports, "download", cmd_exports_download, "download an export's file", json_flag=False
    )
    fetched.add_argument("export_id")
    fetched.add_argument("file")

    erase = command(
        commands, "erase", cmd_erase, "erase data subjects everywhere (scope data:erase)"
    )
    erase.add_argument("subject", nargs="*", help="a value at the datasets' subject_key")
    erase.add_argument("--from-file", help="more subjects, one a line (- for stdin)")
    erase.add_argument("-c", "--client-id", help="only this ingestion client's datasets")
    erase.add_argument("-d", "--dataset-id", help="only this dataset (with --client-id)")
    erase.add_argument("--suppress", action="store_true", help="refuse their later records")
    erase.add_argument("--wait", action="store_true", help="wait until every copy is gone")
    erase.add_argument("--timeout", type=float, default=600, help="seconds to wait (600)")
    erasures = commands.add_parser("erasures", help="erasures of data subjects").add_subparsers(
        required=True, metavar="COMMAND"
    )
    listed = command(erasures, "list", cmd_erasures_list, "the company's erasures, newest first")
    listed.add_argument("--status", choices=["queued", "running", "completed", "failed"])
    limit_option(listed)
    shown = command(erasures, "show", cmd_erasures_show, "one erasure, with its counts")
    shown.add_argument("erasure_id")
    suppressions = commands.add_parser(
        "suppressions", help="suppressed data subjects"
    ).add_subparsers(required=True, metavar="COMMAND")
    listed = command(suppressions, "list", cmd_suppressions_list, "suppressions, newest first")
    limit_option(listed)
    lifted = command(suppressions, "lift", cmd_suppressions_lift, "store a subject's records again")
    lifted.add_argument("suppression_id")

    categories = commands.add_parser("categories", help="workflow categories").add_subparsers(
        required=True, metavar="COMMAND"
    )
    cats = command(categories, "list", cmd_categories_list, "workflow categories")
    cats.add_argument("--name", help="case-insensitive part of the name")
    cats.add_argument("--description", help="case-insensitive part of the description")
    cats.add_argument("--sort-by", choices=["name", "description", "created_at", "updated_at"])
    cats.add_argument("--sort-direction", choices=["asc", "desc"])
    limit_option(cats)

    workflow = commands.add_parser("workflow", help="workflows").add_subparsers(
        required=True, metavar="COMMAND"
    )
    flows = command(workflow, "list", cmd_workflow_list, "workflows, filtered and sorted")
    flows.add_argument(
        "--status", help="one status or several, comma-separated (draft,active,paused,...)"
    )
    flows.add_argument("--template-id", help="only workflows made from this template")
    flows.add_argument("--name", help="case-insensitive part of the name")
    flows.add_argument("--due-after", help="due at or after (ISO 8601)")
    flows.add_argument("--due-before", help="due before (ISO 8601)")
    flows.add_argument(
        "--sort-by", choices=["name", "due_date", "created_at", "updated_at", "status"]
    )
    flows.add_argument("--sort-direction", choices=["asc", "desc"])
    limit_option(flows)
    command(workflow, "show", cmd_workflow_show, "a workflow and its tasks").add_argument(
        "workflow_id"
    )

    activities = commands.add_parser("activities", help="the activity log").add_subparsers(
        required=True, metavar="COMMAND"
    )
    search = command(activities, "search", cmd_activities_search, "search the activity log")
    for member in ("resource-type", "resource-id", "author-id", "action"):
        search.add_argument(
            f"--{member}", action=_Repeat, help="repeat to match any of several values"
        )
    search.add_argument("--after", help="timestamp after (ISO 8601)")
    search.add_argument("--since", help="timestamp at or after")
    search.add_argument("--before", help="timestamp before")
    search.add_argument("--until", help="timestamp at or before")
    search.add_argument(
        "--sort-by", default="timestamp", choices=["timestamp", "resource_type", "action"]
    )
    search.add_argument("--sort-direction", default="desc", choices=["asc", "desc"])
    limit_option(search)

    webhooks = commands.add_parser("webhooks", help="webhook endpoints").add_subparsers(
        required=True, metavar="COMMAND"
    )
    create = command(webhooks, "create", cmd_webhooks_create, "register a webhook endpoint")
    create.add_argument("endpoint_url", metavar="url", help="https URL of the receiver")
    create.add_argument(
        "--event-types", default="*", help="comma-separated event types, or * (default)"
    )
    create.add_argument("--description", default="")
    limit_option(command(webhooks, "list", cmd_webhooks_list, "the company's endpoints"))
    command(webhooks, "show", cmd_webhooks_show, "one endpoint").add_argument("endpoint_id")
    update = command(webhooks, "update", cmd_webhooks_update, "change an endpoint")
    update.add_argument("endpoint_id")
    update.add_argument("--endpoint-url", help="the receiver's new URL")
    update.add_argument("--event-types", help="comma-separated event types, or *")
    update.add_argument("--description")
    update.add_argument("--status", choices=["enabled", "disabled"])
    command(webhooks, "delete", cmd_webhooks_delete, "delete an endpoint").add_argument(
        "endpoint_id"
    )
    command(
        webhooks, "rotate", cmd_webhooks_rotate, "a new secret (the old one signs for 24 h)"
    ).add_argument("endpoint_id")
    deliveries = command(
        webhooks, "deliveries", cmd_webhooks_deliveries, "an endpoint's deliveries, newest first"
    )
    deliveries.add_argument("endpoint_id")
    deliveries.add_argument("--status", choices=["pending", "delivered", "failed"])
    limit_option(deliveries)
    command(
        webhooks, "test", cmd_webhooks_test, "send the endpoint alone a webhook.test event"
    ).add_argument("endpoint_id")
    replay = command(webhooks, "replay", cmd_webhooks_replay, "deliver a window's events again")
    replay.add_argument("endpoint_id")
    replay.add_argument("--since", required=True, help="ISO 8601 date-time, inclusive")
    replay.add_argument("--until", help="ISO 8601 date-time, exclusive (default: now)")
    replay.add_argument("--only-failed", action="store_true", help="only failed deliveries")
    return parser


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
