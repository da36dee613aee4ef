"""The client's pure parts, without a server: backoff and Retry-After, token renewal
times, batching, filters, profiles, local file readers."""

from __future__ import annotations

import email.utils
import gzip
import json
import ssl
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest

from headwater_client import (
    AsyncClient,
    Client,
    ConfigurationError,
    Credentials,
    InvalidRecord,
    RetryPolicy,
)
from headwater_client._base import ssl_context
from headwater_client._batches import Batcher
from headwater_client._retry import Attempts, parse_retry_after
from headwater_client._tokens import TokenCache
from headwater_client.errors import ConnectionFailed, RecordsInvalid, error_from_response
from headwater_client.files import UnreadableFile, read_records
from headwater_client.filters import activity_filter, iso, one_of, time_range
from headwater_client.models import Token, Transaction


def test_backoff_grows_with_full_jitter_and_stops() -> None:
    policy = RetryPolicy(max_retries=4, backoff_base=0.5, backoff_max=3)
    for attempt, ceiling in enumerate([0.5, 1, 2, 3]):
        delays = [policy.delay(attempt) for _ in range(200)]
        assert all(d is not None and 0 <= d <= ceiling for d in delays)
        assert max(d for d in delays if d is not None) > ceiling / 2  # jitter spreads them
    assert policy.delay(4) is None


def test_retry_after_is_honoured_in_seconds_or_as_a_date() -> None:
    policy = RetryPolicy(backoff_base=0.1, max_retry_after=60)
    for _ in range(50):
        delay = policy.delay(0, "3")
        assert delay is not None and 3 <= delay <= 3.1
    soon = email.utils.format_datetime(datetime.now(UTC) + timedelta(seconds=10), usegmt=True)
    assert 8 < (parse_retry_after(soon) or 0) <= 10
    assert parse_retry_after("not a date") is None
    assert policy.delay(0, "3600") is None  # longer than we are willing to wait: give up


def test_attempts_retry_statuses_and_one_401() -> None:
    attempts = Attempts(RetryPolicy(max_retries=1), "GET /x", authenticated=True)
    request = httpx.Request("GET", "http://h/x")
    assert attempts.after_response(httpx.Response(422, request=request)) is None
    refresh = attempts.after_response(httpx.Response(401, request=request))
    assert refresh is not None and refresh.refresh
    assert attempts.after_response(httpx.Response(401, request=request)) is None
    again = attempts.after_response(httpx.Response(503, request=request))
    assert again is not None and not again.refresh
    assert attempts.after_response(httpx.Response(503, request=request)) is None  # spent
    with pytest.raises(ConnectionFailed, match="GET /x: ConnectError"):
        attempts.after_error(httpx.ConnectError("refused"))


def test_a_bad_url_is_not_retried() -> None:
    attempts = Attempts(RetryPolicy(), "GET /x", authenticated=False)
    with pytest.raises(ConnectionFailed):
        attempts.after_error(httpx.UnsupportedProtocol("ftp"))


def test_tokens_are_renewed_a_tenth_of_their_life_early_at_most_a_minute() -> None:
    def token(lifetime: int) -> Token:
        raw = {"access_token": "t", "token_type": "Bearer", "expires_in": lifetime, "scope": ""}
        return Token.from_json(raw)

    now = time.monotonic()
    cache = TokenCache()
    cache.store(token(86400), requested_at=now)
    assert cache.current() is not None
    assert cache._renew_at == pytest.approx(now + 86400 - 60)
    cache.store(token(100), requested_at=now)
    assert cache._renew_at == pytest.approx(now + 90)
    cache.store(token(100), requested_at=now - 95)
    assert cache.current() is None
    margin = TokenCache(margin=500)
    margin.store(token(100), requested_at=now)
    assert margin.current() is None  # a margin over the lifetime renews every time
    cache.store(token(100), requested_at=now)
    cache.discard("another token")
    assert cache.current() is not None
    cache.discard("t")
    assert cache.current() is None


def test_batches_respect_both_limits_and_keep_the_order() -> None:
    batcher = Batcher(client_id="c", dataset_id="d", max_records=3, max_bytes=120)
    batches = [b for i in range(10) if (b := batcher.add(i, {"n": i, "pad": "x" * 10}))]
    last = batcher.flush()
    assert last is not None
    batches.append(last)
    for batch in batches:
        body = json.loads(batch.body)
        assert body["client_id"] == "c" and body["dataset_id"] == "d"
        assert len(batch.body) <= 120 and batch.count <= 3
        assert [r["n"] for r in body["data"]] == list(
            range(batch.first_record, batch.first_record + batch.count)
        )
    assert sum(b.count for b in batches) == 10
    assert batcher.flush() is None
    first, second = batches[0].halves()
    assert (first.first_record, first.count, second.first_record) == (0, 1, 1)
    assert batches[0].idempotency_key("k") == f"k-0-{batches[0].count}"
    with pytest.raises(InvalidRecord) as refused:
        batcher.add(10, {"pad": "x" * 200})
    assert refused.value.index == 10


def test_filters_in_their_wire_form() -> None:
    paris = timezone(timedelta(hours=1))
    assert iso(datetime(2026, 11, 22, 10, 30, tzinfo=paris)) == "2026-11-22T09:30:00.000Z"
    with pytest.raises(ValueError, match="no time zone"):
        iso(datetime(2026, 11, 22))
    assert one_of("a", "b") == {"$in": ["a", "b"]}
    assert time_range(after="2026-01-01T00:00:00Z", until="2026-02-01T00:00:00Z") == {
        "$gt": "2026-01-01T00:00:00Z",
        "$lte": "2026-02-01T00:00:00Z",
    }
    with pytest.raises(ValueError):
        time_range()
    assert activity_filter(resource_type=["workflow", "workflow_task"], action="update") == {
        "resource_type": {"$in": ["workflow", "workflow_task"]},
        "action": "update",
    }


def test_profiles_and_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "profiles.toml"
    path.write_text(
        '[default]\nurl = "https://a.example"\nclient_id = "a"\nclient_secret = "sa"\n'
        '[b]\nurl = "https://b.example"\nclient_id = "b"\nclient_secret = "sb"\n'
        'audience = "other"\n'
    )
    env = {"HEADWATER_PROFILES_FILE": str(path)}
    assert Credentials.load(environ=env).client_id == "a"
    chosen = Credentials.load("b", environ=env)
    assert (chosen.url, chosen.audience) == ("https://b.example", "other")
    assert "sb" not in repr(chosen)
    overridden = Credentials.load(environ=env | {"HEADWATER_CLIENT_ID": "x"})
    assert (overridden.client_id, overridden.client_secret) == ("x", "sa")
    with pytest.raises(ConfigurationError, match="no profile"):
        Credentials.load("c", environ=env)
    with pytest.raises(ConfigurationError, match="HEADWATER_CLIENT_SECRET"):
        Credentials.load(environ={"HEADWATER_PROFILES_FILE": str(tmp_path / "none.toml")})
    path.write_text('[default]\nurl = "u"\npassword = "p"\n')
    with pytest.raises(ConfigurationError, match="unknown keys password"):
        Credentials.load(environ=env)


def test_local_files_are_read_record_by_record(tmp_path: Path) -> None:
    array = tmp_path / "a.json"
    items = [{"n": n, "text": "é" * (n % 7), "nested": {"deep": [n]}} for n in range(3000)]
    array.write_text(json.dumps(items, indent=1))
    assert list(read_records(array)) == items
    one = tmp_path / "one.json"
    one.write_text('  {"n": 1}  ')
    assert list(read_records(one)) == [{"n": 1}]
    packed = tmp_path / "b.ndjson.gz"
    with gzip.open(packed, "wt") as out:
        out.write('{"n": 1}\n\n{"n": 2}\n')
    assert list(read_records(packed)) == [{"n": 1}, {"n": 2}]
    table = tmp_path / "c.csv"
    table.write_text('\ufeffid,"note, with comma"\n1,"two\nlines"\n2,\n')
    assert list(read_records(table)) == [
        {"id": "1", "note, with comma": "two\nlines"},
        {"id": "2", "note, with comma": ""},
    ]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("a.json", '[{"n": 1},\n{"n": ]', "line 2"),
        ("a.json", '[{"n": 1}', "the array is not closed"),
        ("a.json", "42", "not a JSON array or object"),
        ("a.ndjson", '{"n": 1}\nnope\n', "line 2"),
        ("a.csv", "a,b\n1\n", "line 2: 1 values for 2 columns"),
        ("a.csv", "", "no header row"),
    ],
)
def test_unreadable_local_files_name_the_line(
    tmp_path: Path, name: str, content: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(UnreadableFile, match=message):
        list(read_records(path))


def test_errors_read_problem_json_and_oauth_bodies() -> None:
    request = httpx.Request("POST", "http://h/platform/v1/data/json")
    problem = httpx.Response(
        422,
        request=request,
        json={
            "type": "https://headwater.dev/problems/validation_failed",
            "title": "Validation failed",
            "status": 422,
            "detail": "1 record failed",
            "errors": [{"record": 0, "path": "/a", "keyword": "type", "message": "m"}],
        },
    )
    error = error_from_response(problem)
    assert isinstance(error, RecordsInvalid)
    assert (error.code, error.errors[0]["path"]) == ("validation_failed", "/a")
    oauth = httpx.Response(
        401, request=request, json={"error": "invalid_client", "error_description": "nope"}
    )
    assert (error_from_response(oauth).code, error_from_response(oauth).detail) == (
        "invalid_client",
        "nope",
    )
    gateway = error_from_response(httpx.Response(502, request=request, text="<html>bad</html>"))
    assert gateway.status == 502 and "bad" in gateway.detail


def test_transactions_parse_leniently() -> None:
    raw = {
        "transaction_id": "t",
        "kind": "file",
        "status": "processing",
        "created_at": "2026-11-22T09:30:00.000Z",
        "errors": [{"record": 1, "path": "/a", "keyword": "type", "message": "m", "line": 3}],
        "a_member_added_later": True,
    }
    transaction = Transaction.from_json(raw)
    assert transaction.created_at == datetime(2026, 11, 22, 9, 30, tzinfo=UTC)
    assert transaction.errors[0].line == 3
    assert not transaction.finished
    assert transaction.to_json()["a_member_added_later"] is True


def test_clients_share_one_ssl_context_that_verifies_servers() -> None:
    """httpx builds an SSL context for each client it makes (about 50 ms of CPU, the CA
    bundle read again); the client's instances share one, which checks certificates and
    host names as httpx's default does."""
    made = [Client("https://hw.example", "id", "secret") for _ in range(2)]
    made_async = AsyncClient("https://hw.example", "id", "secret")
    context = ssl_context()
    for client in [*made, made_async]:
        assert client._http._transport._pool._ssl_context is context  # type: ignore[attr-defined]
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] > 0  # a CA bundle is loaded
    for client in made:
        client.close()
