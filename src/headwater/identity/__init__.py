"""Companies, ingestion clients, API credentials, signing keys and tokens."""
