"""The SFTP channel (contract section 11): accounts, the tree they see, uploads that
become file transactions on close, and receipts. A door into the ingestion core: it
stores the bytes and hands them to `files`, which queues them like any upload."""
