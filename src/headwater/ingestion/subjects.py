"""Data subjects (contract section 17): the digest that names a record's subject, so
that finding a person's records is an index probe, and never their value.

A dataset's `subject_key` option is a JSON Pointer into the stored record. The record's
value there (a string, or an integer as its JSON text) is kept with the record only as
its digest: the first 128 bits of HMAC-SHA256 under the company's hash key
(`ingestion.hashkeys`), apart from every other use of that key by its prefix. An
erasure or a suppression keeps the digests of its subjects, never the subjects: each
subject as given, and as a `hash` step would have written it (with and without
`lowercase`), so a dataset that hashes its subject key is matched too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from headwater.ingestion import transforms
from headwater.kit.hmac256 import Hmac256

_PREFIX = b"subject\n"


def _mac(key: bytes) -> Hmac256:
    """A subject's digest under `key`: HMAC-SHA256 of the prefix and its UTF-8 bytes,
    cut to `transforms.DIGEST_BYTES`."""
    return Hmac256(key, _PREFIX, transforms.DIGEST_BYTES)


def text_of(value: Any) -> str | None:
    """A value as a subject: a string as it is, an integer as its JSON text; None for
    any other value (no subject)."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


@dataclass
class Subjects:
    """A dataset's subject key, compiled with its company's key: each record's digest
    (`of`), and which are suppressed (`suppressed`)."""

    tokens: tuple[str, ...]
    key: bytes
    suppressed: frozenset[bytes] = frozenset()

    def __post_init__(self) -> None:
        self._mac = _mac(self.key)

    def digest(self, text: str) -> bytes:
        return self._mac(text.encode())

    def of(self, record: Any) -> bytes | None:
        """The digest of the record's subject (None: it has none)."""
        node = record
        for token in self.tokens:
            if isinstance(node, dict):
                if token not in node:
                    return None
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                return None
        text = text_of(node)
        return None if text is None else self.digest(text)

    def each(self, records: Sequence[Any]) -> list[bytes | None]:
        if len(self.tokens) != 1:
            return [self.of(record) for record in records]
        # a top-level member (the usual key): one lookup a record, strings hashed at once
        name, mac = self.tokens[0], self._mac
        found: list[bytes | None] = []
        for record in records:
            value = record.get(name) if isinstance(record, dict) else None
            if type(value) is str:
                found.append(mac(value.encode()))
            else:
                text = text_of(value)
                found.append(None if text is None else mac(text.encode()))
        return found


class Forms:
    """The digests a subject may be stored under, under one key: as given, and as a
    `hash` step writes it (HMAC hex of the value, and of its lowercase form). The steps
    are compiled once, for every subject of an erasure."""

    def __init__(self, key: bytes) -> None:
        self._mac = _mac(key)
        steps = [
            transforms.compile_steps(0, [{"op": "hash", "path": "/v", "lowercase": lower}], key)
            for lower in (False, True)
        ]
        self._steps = [s for s in steps if s is not None]

    def of(self, subject: str) -> list[bytes]:
        """The subject's digests, in a stable order, without repeats."""
        forms = [subject]
        for steps in self._steps:
            output, _ = steps.run({"v": subject})
            assert output is not None
            forms.append(output["v"])
        return list(dict.fromkeys(self._mac(form.encode()) for form in forms))


def digests(key: bytes, subjects: Iterable[str]) -> list[bytes]:
    """Every digest the subjects may be stored under (`Forms`), without repeats."""
    forms = Forms(key)
    return list(dict.fromkeys(d for subject in subjects for d in forms.of(subject)))


def whole_values(data: Any) -> Iterable[str]:
    """The whole string values of a JSON document (member names aside), or the integers'
    JSON texts: where a subject may appear in a quarantined row."""
    stack = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        else:
            text = text_of(node)
            if text is not None:
                yield text
