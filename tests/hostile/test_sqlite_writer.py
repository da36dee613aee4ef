"""SQLite has one writer (contract section 15, finding 7): a token is issued while another
connection holds the writer, and a process starting while one does waits for it instead
of failing."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from starlette.testclient import TestClient

from headwater import migrations
from tests.factories import OPERATOR_ID, OPERATOR_SECRET, request_token


@contextmanager
def writer_held(settings: Any, seconds: float) -> Iterator[threading.Event]:
    """Another connection holds SQLite's writer (BEGIN IMMEDIATE) for `seconds`."""
    taken, released = threading.Event(), threading.Event()

    def hold() -> None:
        connection = sqlite3.connect(settings.data_dir / "headwater.db", timeout=30)
        connection.execute("BEGIN IMMEDIATE")
        taken.set()
        time.sleep(seconds)
        connection.rollback()
        released.set()
        connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    assert taken.wait(10)
    try:
        yield released
    finally:
        holder.join()


def test_a_token_is_issued_while_another_connection_writes(
    client: TestClient, settings: Any, backend: str
) -> None:
    if backend != "sqlite":
        pytest.skip("about SQLite's single writer")
    with writer_held(settings, 8.0) as released:
        answer = request_token(client, OPERATOR_ID, OPERATOR_SECRET)
        assert answer.status_code == 200, answer.text
        assert not released.is_set()  # answered while the writer was still held


def test_migrating_at_start_while_the_writer_is_held_waits_instead_of_failing(
    settings: Any, backend: str
) -> None:
    """`headwater serve` migrates before it serves; a process draining before a restart
    may hold the writer longer than SQLite's 5 s busy timeout."""
    if backend != "sqlite":
        pytest.skip("about SQLite's single writer")
    with writer_held(settings, 7.0) as released:
        migrations.upgrade(settings)  # raised "database is locked" after 5 s before
        assert released.is_set()  # it waited for the writer rather than giving up
