"""Operations: health, readiness, metrics, logs, request ids, the docs page."""
