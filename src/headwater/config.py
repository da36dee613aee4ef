"""Settings: the only place that reads the environment, and never at import time."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

DEFAULT_CLAIM_MAP = {
    "scope": "scope",
    "company_id": "company_id",
    "client_ids": "client_ids",
    "author_id": "author_id",
}


class Settings(BaseSettings):
    """Every setting, with its default. `HEADWATER_<NAME>` sets each one."""

    model_config = SettingsConfigDict(env_prefix="HEADWATER_", extra="ignore", frozen=True)

    data_dir: Path = Path("./headwater-data")
    database_url: str | None = None
    storage_url: str | None = None
    redis_url: str | None = None

    public_url: str = "http://127.0.0.1:8000"
    audience: str = "headwater-api"
    issuer: str | None = None
    # set by `serve` and `demo` when they made HEADWATER_PUBLIC_URL from their address:
    # that URL then names this instance, not the installation's token issuer
    public_url_from_address: bool = False
    token_lifetime_seconds: int = Field(86400, ge=60, le=30 * 86400)
    token_leeway_seconds: int = Field(60, ge=0, le=60)
    # how long a console sign-in lasts (contract 18)
    console_session_hours: int = Field(8, ge=1, le=8)
    signing_key_passphrase: str | None = None
    bootstrap_client_id: str | None = None
    bootstrap_client_secret: str | None = None

    oidc_issuer: str | None = None
    oidc_jwks_url: str | None = None
    oidc_audience: str | None = None
    oidc_algorithms: Annotated[list[str], NoDecode] = ["RS256", "ES256"]
    oidc_claim_map: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_CLAIM_MAP))
    embedded_idp: bool | None = None
    jwks_min_refresh_seconds: float = Field(5.0, ge=0)
    jwks_max_age_seconds: float = Field(600.0, gt=0)

    max_body_bytes: int = Field(5 * 1024 * 1024, gt=0)
    max_batch_records: int = Field(1000, gt=0)
    max_json_depth: int = Field(32, ge=2, le=512)
    max_schema_bytes: int = Field(524288, gt=0)
    http_header_timeout_seconds: float = Field(10.0, gt=0)
    shutdown_timeout_seconds: float = Field(30.0, gt=0)
    idempotency_ttl_seconds: int = Field(86400, gt=0)
    rate_limit_per_second: float = Field(100.0, gt=0)
    rate_limit_burst: int = Field(200, gt=0)
    token_failures_per_minute: int = Field(10, gt=0)
    revocation_refresh_seconds: float = Field(3.0, gt=0, le=10)

    upload_url_lifetime_seconds: int = Field(900, ge=60, le=7 * 86400)
    upload_expiry_grace_seconds: int = Field(300, ge=0)
    max_file_bytes: int = Field(5 * 1024**3, gt=0)
    max_expanded_bytes: int | None = Field(None, gt=0)  # default 4 x max_file_bytes
    upload_signing_key: SecretStr | None = None
    s3_endpoint_url: str | None = None
    s3_region: str = "us-east-1"
    s3_access_key_id: str | None = None
    s3_secret_access_key: SecretStr | None = None
    storage_notification_secret: SecretStr | None = None
    file_batch_rows: int = Field(5000, ge=1, le=100_000)
    # how long a file's staging transaction stays open before it commits (PostgreSQL;
    # contract section 10 allows 10 s); default `files.processing.HOLD_SECONDS`
    file_commit_seconds: float | None = Field(None, ge=0, le=10)
    file_workers: int = Field(2, ge=0, le=64)
    file_poll_seconds: float = Field(1.0, gt=0)
    file_job_stale_seconds: float = Field(60.0, gt=0)
    file_job_max_attempts: int = Field(3, ge=1)

    # SFTP (contract section 11): 0 turns the server off
    sftp_host: str | None = None  # default: serve's host
    sftp_port: int = Field(2222, ge=0, le=65535)
    sftp_host_key_file: Path | None = None  # default: one kept in the database, made once
    sftp_receipt_days: int = Field(7, ge=1, le=365)
    sftp_max_sessions: int = Field(10, ge=1, le=1000)
    sftp_auth_failures_per_minute: int = Field(10, ge=1)
    # bounds (contract section 11): one company's sessions never stop another's login
    sftp_max_handles: int = Field(64, ge=1, le=10000)  # open files per session
    sftp_max_unauthenticated: int = Field(64, ge=1, le=100000)  # connections not logged in
    sftp_max_held: int = Field(100, ge=1, le=100000)  # held files per account
    sftp_held_hours: int = Field(24, ge=1, le=24 * 365)

    # email (contract section 12): 0 turns the SMTP server off
    smtp_host: str | None = None  # default: serve's host
    smtp_port: int = Field(2525, ge=0, le=65535)
    inbound_email_domain: str = "ingest.localhost"
    smtp_tls_cert_file: Path | None = None
    smtp_tls_key_file: Path | None = None
    max_email_bytes: int = Field(26214400, gt=0)
    smtp_relay_url: str | None = None  # smtp://[user:password@]host:port; unset: no replies
    email_from: str | None = None  # default no-reply@<inbound domain>
    email_replies_per_sender_per_hour: int = Field(60, ge=1)
    # bounds (contract section 12)
    email_max_attachments: int = Field(20, ge=1, le=1000)
    smtp_max_connections: int = Field(100, ge=1, le=100000)
    # an SMTP connection that sends nothing for this long is closed (Postfix's
    # smtpd_timeout), also in the middle of a message's data
    smtp_idle_timeout_seconds: float = Field(120.0, gt=0, le=3600)

    # events and webhooks (contract section 13)
    event_retention_days: int = Field(30, ge=1, le=3650)
    webhook_allow_http: bool = False
    webhook_allow_private: bool = False
    webhook_retry_schedule: Annotated[list[float], NoDecode] = [
        5,
        300,
        1800,
        7200,
        18000,
        36000,
        36000,
    ]
    webhook_timeout_seconds: float = Field(15.0, gt=0, le=60)
    webhook_concurrency: int = Field(64, ge=1, le=1024)  # attempts in flight per process
    webhook_endpoint_concurrency: int = Field(4, ge=1, le=64)  # per endpoint, all processes
    webhook_disable_after_seconds: float = Field(5 * 86400, gt=0)
    webhook_poll_seconds: float = Field(0.2, gt=0, le=10)
    # encrypts endpoint secrets at rest; default: derived from the signing-key passphrase,
    # else a key made once at $data_dir/webhook_secret_key (mode 0600)
    webhook_secret_key: SecretStr | None = None

    # the record feed and exports (contract section 14)
    # how often a waiting feed request looks for records committed by other processes
    # (commits in its own process wake it at once)
    feed_poll_seconds: float = Field(1.0, gt=0, le=30)
    export_url_lifetime_seconds: int = Field(3600, ge=60, le=7 * 24 * 3600)
    # an export's file is deleted this long after it completed
    export_retention_hours: float = Field(24, gt=0, le=24 * 90)
    # exports run at once per worker process (0: this process runs none)
    export_workers: int = Field(1, ge=0, le=16)
    export_job_stale_seconds: float = Field(300.0, gt=0)
    export_max_attempts: int = Field(3, ge=1)
    # rows a Parquet row group holds (the export's memory grows with it, not the dataset)
    export_row_group_rows: int = Field(65536, ge=1000, le=1_000_000)

    # data subjects (contract section 17)
    erasure_workers: int = Field(1, ge=0, le=8)  # erasures run at once per worker process
    erasure_job_stale_seconds: float = Field(120.0, gt=0)
    erasure_max_attempts: int = Field(5, ge=1)
    # the share of the time a running erasure works (it rests between its steps)
    erasure_duty: float = Field(0.25, gt=0, le=1)
    # a final transaction's raw file is removed this many days after it ended
    raw_file_retention_days: int = Field(30, ge=1, le=3650)

    auto_migrate: bool = True
    worker_enabled: bool = True
    worker_interval_seconds: float = Field(30.0, gt=0)
    db_connect_timeout_seconds: int = Field(3, ge=1)
    db_pre_ping: bool = False
    # PostgreSQL connections one process holds at most (default by role: 20 for an API
    # process, 10 for any other; see db.ROLE_CONNECTIONS)
    db_connections: int | None = Field(None, ge=5, le=1000)
    # "transaction": the database is reached through a pooler in transaction mode
    # (PgBouncer's pool_mode=transaction), so nothing may rely on session state
    # (contract 19): no options at connect, no server-side prepared statements
    database_pooling: Literal["session", "transaction"] = "session"
    # PostgreSQL: a replica for the reads that may lag (docs/scaling.md lists them)
    database_read_url: str | None = None
    # PostgreSQL: where processes LISTEN for one another's wake-ups (`wakeups`): a direct
    # connection, not through a pooler in transaction mode; default: the database URL
    # unless HEADWATER_DATABASE_POOLING=transaction (then no listening: loops poll)
    database_listen_url: str | None = None
    # wake-ups across processes; false: every loop polls as if none could be heard
    wakeups: bool = True
    # how often a loop that hears wake-ups looks for work nobody announces (a stale
    # claim, a retry falling due)
    idle_poll_seconds: float = Field(30.0, gt=0, le=300)
    metrics_token: SecretStr | None = None
    log_level: str = "INFO"
    log_json: bool = True

    @model_validator(mode="before")
    @classmethod
    def _split_algorithms(cls, values: dict[str, object]) -> dict[str, object]:
        raw = values.get("oidc_algorithms")
        if isinstance(raw, str):
            values["oidc_algorithms"] = [a.strip() for a in raw.split(",") if a.strip()]
        return values

    @model_validator(mode="before")
    @classmethod
    def _split_schedule(cls, values: dict[str, object]) -> dict[str, object]:
        raw = values.get("webhook_retry_schedule")
        if isinstance(raw, str):
            try:
                values["webhook_retry_schedule"] = [
                    float(part) for part in raw.split(",") if part.strip()
                ]
            except ValueError:
                raise ValueError(
                    "HEADWATER_WEBHOOK_RETRY_SCHEDULE must be seconds, comma-separated"
                ) from None
        return values

    @model_validator(mode="after")
    def _schedule_is_delays(self) -> Settings:
        if any(delay < 0 for delay in self.webhook_retry_schedule):
            raise ValueError("HEADWATER_WEBHOOK_RETRY_SCHEDULE must not hold negative delays")
        return self

    @model_validator(mode="after")
    def _replica_is_postgres(self) -> Settings:
        if self.database_read_url is not None and not (
            self.sqlalchemy_url.startswith("postgresql")
            and (self.sqlalchemy_read_url or "").startswith("postgresql")
        ):
            raise ValueError(
                "HEADWATER_DATABASE_READ_URL is a PostgreSQL replica's URL, beside a "
                "PostgreSQL HEADWATER_DATABASE_URL"
            )
        return self

    @model_validator(mode="after")
    def _external_idp_is_whole(self) -> Settings:
        given = [self.oidc_issuer, self.oidc_jwks_url, self.oidc_audience]
        if any(given) and not all(given):
            raise ValueError(
                "external identity provider needs HEADWATER_OIDC_ISSUER, "
                "HEADWATER_OIDC_JWKS_URL and HEADWATER_OIDC_AUDIENCE together"
            )
        return self

    @model_validator(mode="after")
    def _storage_is_s3(self) -> Settings:
        if self.storage_url is not None and (
            not self.storage_url.startswith("s3://") or not self.s3_bucket
        ):
            raise ValueError("HEADWATER_STORAGE_URL must be s3://<bucket>")
        return self

    @property
    def sqlalchemy_url(self) -> str:
        """The database URL SQLAlchemy uses: PostgreSQL through psycopg 3, else SQLite."""
        if self.database_url:
            return _psycopg_url(self.database_url)
        return f"sqlite:///{(self.data_dir / 'headwater.db').resolve()}"

    @property
    def sqlalchemy_read_url(self) -> str | None:
        """The replica's URL as SQLAlchemy takes it; None: reads go to the database."""
        if self.database_read_url is None:
            return None
        return _psycopg_url(self.database_read_url)

    @property
    def listen_url(self) -> str | None:
        """The PostgreSQL URL processes LISTEN on for wake-ups; None: they cannot listen."""
        if not self.wakeups or not self.sqlalchemy_url.startswith("postgresql"):
            return None
        if self.database_listen_url:
            return self.database_listen_url
        return self.database_url if self.database_pooling == "session" else None

    @property
    def s3_bucket(self) -> str | None:
        """The bucket of an `s3://bucket` storage URL; None for the embedded store."""
        if self.storage_url is None:
            return None
        return self.storage_url.removeprefix("s3://").split("/", 1)[0]

    @property
    def token_issuer(self) -> str:
        """The `iss` of tokens the embedded identity provider signs."""
        return (self.issuer or self.public_url).rstrip("/")

    @property
    def issuer_named(self) -> bool:
        """Whether the operator named the token issuer (HEADWATER_ISSUER, or
        HEADWATER_PUBLIC_URL); if not, instances sharing a database take the issuer the
        first of them recorded (contract 19)."""
        explicit_url = "public_url" in self.model_fields_set and not self.public_url_from_address
        return self.issuer is not None or explicit_url

    @property
    def external_idp(self) -> bool:
        return self.oidc_issuer is not None

    @property
    def embedded_idp_enabled(self) -> bool:
        """The embedded provider runs unless an external one replaces it."""
        if self.embedded_idp is not None:
            return self.embedded_idp
        return not self.external_idp


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


def _psycopg_url(url: str) -> str:
    """A PostgreSQL URL as SQLAlchemy takes it, through psycopg 3."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url
