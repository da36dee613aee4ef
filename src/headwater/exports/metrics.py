"""Prometheus metrics of exports (the API's /metrics shows them)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

EXPORTS = Counter("headwater_exports_total", "Exports finished, by outcome.", ["format", "outcome"])
SECONDS = Histogram(
    "headwater_export_seconds",
    "How long an export took to write, by format.",
    ["format"],
    buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800),
)
BYTES = Histogram(
    "headwater_export_bytes",
    "Size of the files exports wrote, by format.",
    ["format"],
    buckets=(1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10),
)
RECORDS = Counter("headwater_export_records_total", "Records written by exports.", ["format"])
