"""Draft-06 validators compared on a 20-field schema (issue 4's validator choice).

For each library: the time to check a valid record, the time to check an invalid one
(first answer only), and the time to list every error of an invalid record with its
path, plus whether it can list them at all. Records are about 1 KB.

    uv run python -m bench.validate [--records 20000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import fastjsonschema
import jsonschema
import jsonschema_rs

SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-06/schema#",
    "type": "object",
    "properties": {
        "event_id": {"type": "string", "minLength": 8, "maxLength": 64},
        "customer-id": {"type": "string", "pattern": "^C[0-9]+$"},
        "session_id": {"type": "string"},
        "email": {"type": "string", "maxLength": 254},
        "amount": {"type": "number", "minimum": 0},
        "quantity": {"type": "integer", "minimum": 1, "maximum": 10000},
        "currency": {"type": "string", "enum": ["EUR", "USD", "GBP", "SEK"]},
        "paid": {"type": "boolean"},
        "placed_at": {"type": "string", "format": "date-time"},
        "channel": {"type": "string", "enum": ["web", "shop", "phone"]},
        "country": {"type": "string", "minLength": 2, "maxLength": 2},
        "city": {"type": "string", "maxLength": 100},
        "street": {"type": "string", "maxLength": 200},
        "postcode": {"type": "string", "maxLength": 16},
        "discount": {"type": ["number", "null"], "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 20},
        "notes": {"type": "string", "maxLength": 2000},
        "score": {"type": "number"},
        "referrer": {"type": ["string", "null"]},
        "device": {
            "type": "object",
            "properties": {"os": {"type": "string"}, "version": {"type": "string"}},
            "required": ["os"],
        },
    },
    "required": ["event_id", "customer-id", "amount", "quantity", "currency", "placed_at"],
    "additionalProperties": False,
}


def record(i: int) -> dict[str, Any]:
    return {
        "event_id": f"evt-{i:012d}",
        "customer-id": f"C{i % 9973}",
        "session_id": f"s-{i * 7919 % 100000:06d}",
        "email": f"user{i}@example.com",
        "amount": round(i % 1000 * 1.25, 2),
        "quantity": i % 50 + 1,
        "currency": "EUR",
        "paid": i % 2 == 0,
        "placed_at": "2026-11-22T09:30:00.000Z",
        "channel": "web",
        "country": "SE",
        "city": "Gothenburg",
        "street": "Kungsportsavenyen 1",
        "postcode": "411 36",
        "discount": None,
        "tags": ["new", "promo"],
        "notes": "n" * 400,
        "score": 0.5,
        "referrer": None,
        "device": {"os": "linux", "version": "6.1"},
    }


def broken(i: int) -> dict[str, Any]:
    bad = record(i)
    bad.update({"amount": "12,50", "quantity": 0, "currency": "XXX", "extra": 1})
    del bad["event_id"]
    bad["device"] = {"version": 6}
    return bad


def per_record_us(check: Callable[[Any], Any], records: list[dict[str, Any]]) -> float:
    for r in records[:200]:
        check(r)
    start = time.perf_counter()
    for r in records:
        check(r)
    return (time.perf_counter() - start) / len(records) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    args = parser.parse_args()
    valid = [record(i) for i in range(args.records)]
    invalid = [broken(i) for i in range(args.records // 4)]

    rs = jsonschema_rs.Draft6Validator(SCHEMA, validate_formats=True)
    ref = jsonschema.Draft6Validator(SCHEMA, format_checker=jsonschema.FormatChecker())
    fast = fastjsonschema.compile(SCHEMA)

    def fast_valid(r: Any) -> bool:
        try:
            fast(r)
        except fastjsonschema.JsonSchemaException:
            return False
        return True

    def fast_errors(r: Any) -> list[str]:  # stops at the first error: that is all it gives
        try:
            fast(r)
        except fastjsonschema.JsonSchemaException as exc:
            return [exc.message]
        return []

    candidates: list[tuple[str, Callable[[Any], Any], Callable[[Any], Any]]] = [
        (
            "jsonschema-rs",
            rs.is_valid,
            lambda r: [(list(e.instance_path), e.message) for e in rs.iter_errors(r)],
        ),
        (
            "fastjsonschema",
            fast_valid,
            fast_errors,
        ),
        (
            "jsonschema (reference)",
            ref.is_valid,
            lambda r: [(list(e.absolute_path), e.message) for e in ref.iter_errors(r)],
        ),
    ]
    size = len(__import__("json").dumps(valid[0]))
    print(f"draft-06, 20 fields, record ~{size} bytes; {len(valid)} valid, {len(invalid)} invalid")
    print(
        f"{'library':24s} {'valid: µs/record':>17s} {'invalid: µs/rec':>16s} "
        f"{'all errors: µs/rec':>19s} {'errors listed':>14s} {'valid rec/s':>12s}"
    )
    for name, is_valid, errors in candidates:
        assert all(is_valid(r) for r in valid[:100]), name
        assert not any(is_valid(r) for r in invalid[:100]), name
        listed = len(errors(invalid[0]))
        v = per_record_us(is_valid, valid)
        i = per_record_us(is_valid, invalid)
        e = per_record_us(errors, invalid)
        print(f"{name:24s} {v:17.2f} {i:16.2f} {e:19.2f} {listed:14d} {1e6 / v:12,.0f}")
    print(
        "the invalid record has 7 errors; a validator that lists fewer cannot give the "
        "422 answer its full error list"
    )


if __name__ == "__main__":
    main()
