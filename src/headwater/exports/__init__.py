"""Exports: a dataset written to Parquet, NDJSON or CSV for download (contract section 14)."""
