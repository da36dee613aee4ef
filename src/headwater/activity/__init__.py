"""The append-only activity log: record(), search, and the per-company hash chain."""
