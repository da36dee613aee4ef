"""The access log's own writer (issue 24): whole JSON lines on the log's descriptor, at
INFO only, and the structlog path for console logs."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import pytest

from headwater.kit.context import request_id_var
from headwater.ops.logs import ACCESS, configure_logging


@pytest.fixture
def log(tmp_path: Path) -> Iterator[TextIO]:
    """A log file to configure logging onto; logging goes back to standard output after."""
    with (tmp_path / "out.log").open("a") as stream:
        yield stream
    configure_logging()


def _read(stream: TextIO) -> str:
    return Path(stream.name).read_text()


def _write(status: int = 200) -> None:
    ACCESS.write(method="GET", path="/x", route="/x", status=status, ms=1.5, subject="c")


def test_lines_are_whole_json_with_the_request_id(log: TextIO) -> None:
    configure_logging(level="INFO", json=True, stream=log)
    token = request_id_var.set("rid-7")
    try:
        _write()
        _write(404)
    finally:
        request_id_var.reset(token)
    lines = [json.loads(line) for line in _read(log).splitlines()]
    assert [line["status"] for line in lines] == [200, 404]
    assert lines[0] == {
        "method": "GET",
        "path": "/x",
        "route": "/x",
        "status": 200,
        "duration_ms": 1.5,
        "subject": "c",
        "event": "request",
        "level": "info",
        "logger": "headwater.access",
        "timestamp": lines[0]["timestamp"],
        "request_id": "rid-7",
    }
    assert lines[0]["timestamp"].endswith("Z")


def test_nothing_is_written_above_info(log: TextIO) -> None:
    configure_logging(level="WARNING", json=True, stream=log)
    _write()
    logging.getLogger("headwater.test").warning("kept")
    text = _read(log)
    assert "headwater.access" not in text and "kept" in text


def test_console_logs_take_the_structlog_path(log: TextIO) -> None:
    configure_logging(level="INFO", json=False, stream=log)
    assert ACCESS.fd is None
    _write(418)
    text = _read(log)
    assert "request" in text and "418" in text and not text.startswith("{")
