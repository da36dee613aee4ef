"""A readable diff of two JSON documents (two versions of a schema): their
pretty-printed lines, keys sorted, compared line by line."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Literal

import orjson


@dataclass(frozen=True, slots=True)
class Line:
    kind: Literal["same", "added", "removed", "skip"]
    text: str


def _lines(document: Any) -> list[str]:
    text = orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    return text.decode().splitlines()


def json_diff(old: Any, new: Any, *, context: int = 3) -> list[Line]:
    """The lines that differ with `context` lines around each change; `skip` stands for
    unchanged lines left out. No lines: the two are equal."""
    a, b = _lines(old), _lines(new)
    out: list[Line] = []
    for group in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_grouped_opcodes(context):
        if out:
            out.append(Line("skip", "…"))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out.extend(Line("same", t) for t in a[i1:i2])
                continue
            out.extend(Line("removed", t) for t in a[i1:i2])
            out.extend(Line("added", t) for t in b[j1:j2])
    return out
