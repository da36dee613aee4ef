"""Prometheus metrics of the SFTP server (the API's /metrics shows them: `headwater
serve` runs the SFTP process with the API's multiprocess metrics directory)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

SESSIONS = Counter("headwater_sftp_sessions_total", "SFTP sessions opened (logins that succeeded).")
OPEN_SESSIONS = Gauge(
    "headwater_sftp_open_sessions", "SFTP sessions open now.", multiprocess_mode="livesum"
)
REFUSED_LOGINS = Counter(
    "headwater_sftp_refused_logins_total", "SFTP logins refused (wrong key or password, limits)."
)
BYTES = Counter("headwater_sftp_received_bytes_total", "Bytes of files received over SFTP.")
FILES = Counter("headwater_sftp_files_total", "Files received over SFTP that became transactions.")
