"""Events: what changed, written in the same database transaction as the change (the
outbox, contract section 13). Below every domain that reports changes; imports none."""
