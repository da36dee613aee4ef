"""Events going out (contract section 13): the event feed, webhook endpoints, and their
deliveries, signed and retried by the worker. Reads the outbox (`events`); writes only
its own tables and the event log's positions (through `events.log`)."""
