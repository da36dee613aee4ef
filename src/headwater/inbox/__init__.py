"""The email channel (contract section 12): inboxes per dataset, an SMTP server whose
supported attachments become file transactions, and one reply per message with the
outcome. A door into the ingestion core, like SFTP: it stores the attachment's bytes
and hands them to `files`, which queues them like any upload."""
