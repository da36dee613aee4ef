"""File ingestion: upload URLs, the embedded and S3 stores, parsers and processing jobs."""
