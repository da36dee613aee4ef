"""What the sync and the async client share: settings, and everything about a request
that is not sending it."""

from __future__ import annotations

import re
import ssl
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Self

import httpx

from headwater_client import _calls as calls
from headwater_client._batches import MAX_BATCH_BYTES, MAX_BATCH_RECORDS, Batcher
from headwater_client._calls import Call
from headwater_client._retry import RetryPolicy
from headwater_client._tokens import TokenCache
from headwater_client.config import DEFAULT_AUDIENCE, Credentials
from headwater_client.errors import APIError, ConfigurationError
from headwater_client.files import guess_content_type
from headwater_client.models import Transaction

try:
    from importlib.metadata import version

    USER_AGENT = f"headwater-client-python/{version('headwater-client')}"
except Exception:  # pragma: no cover - running from a source tree
    USER_AGENT = "headwater-client-python"

_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")


@dataclass(frozen=True, slots=True)
class Upload:
    """A local file about to be uploaded."""

    path: Path
    size: int
    content_type: str
    file_name: str


@cache
def ssl_context() -> ssl.SSLContext:
    """The one SSL context of this process's clients, made as httpx makes its default
    (certifi's CA bundle, or `SSL_CERT_FILE` / `SSL_CERT_DIR`) when first needed: httpx
    builds one for each client it makes, about 50 ms of CPU, and an SSL context serves
    any number of connections at once."""
    return httpx.create_ssl_context()


# Seconds one `?wait=` request may wait (within the client's 60 s request timeout).
WAIT_STEP = 20.0


class BaseClient:
    """Settings and request building; `Client` and `AsyncClient` add the sending."""

    def __init__(
        self,
        url: str,
        client_id: str,
        client_secret: str,
        *,
        audience: str = DEFAULT_AUDIENCE,
        auth_url: str | None = None,
        scope: str | None = None,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        max_batch_records: int = MAX_BATCH_RECORDS,
        max_batch_bytes: int = MAX_BATCH_BYTES,
        token_refresh_margin: float | None = None,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"the service URL must start with http:// or https://: {url}")
        if not client_id or not client_secret:
            raise ConfigurationError("a client id and a client secret are needed")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.max_batch_records = max_batch_records
        self.max_batch_bytes = max_batch_bytes
        self._token_call = calls.token(
            auth_url or self.url,
            client_id=client_id,
            client_secret=client_secret,
            audience=audience,
            scope=scope,
        )
        self._tokens = TokenCache(token_refresh_margin)

    @classmethod
    def from_env(
        cls, profile: str | None = None, *, environ: Mapping[str, str] | None = None, **options: Any
    ) -> Self:
        """A client from the profile file and HEADWATER_* variables (see `config`);
        `environ` replaces `os.environ`."""
        found = Credentials.load(profile, environ=environ)
        return cls(
            found.url,
            found.client_id,
            found.client_secret,
            audience=found.audience,
            auth_url=found.auth_url,
            scope=found.scope,
            **options,
        )

    def _request(self, call: Call[Any], token: str | None) -> dict[str, Any]:
        """The keyword arguments of `httpx.(Async)Client.build_request` for `call`."""
        headers = {"User-Agent": USER_AGENT, **call.headers}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        content = call.content() if callable(call.content) else call.content
        url = call.path if "://" in call.path else self.url + call.path
        return {
            "method": call.method,
            "url": url,
            "params": call.params,
            "json": call.json,
            "content": content,
            "headers": headers,
        }

    def _batcher(self, client_id: str, dataset_id: str) -> Batcher:
        return Batcher(
            client_id=client_id,
            dataset_id=dataset_id,
            max_records=self.max_batch_records,
            max_bytes=self.max_batch_bytes,
        )

    @staticmethod
    def _push_key(idempotency_key: str | None) -> str:
        if idempotency_key is None:
            return uuid.uuid4().hex
        if not _KEY.match(idempotency_key):
            raise ValueError("idempotency_key: 1-200 printable ASCII characters, no spaces")
        return idempotency_key

    @staticmethod
    def _upload(path: str | Path, content_type: str | None, file_name: str | None) -> Upload:
        path = Path(path)
        if not path.is_file():
            raise ConfigurationError(f"{path} is not a file")
        return Upload(
            path=path,
            size=path.stat().st_size,
            content_type=content_type or guess_content_type(path),
            file_name=file_name or path.name,
        )

    @staticmethod
    def _arrived(exc: APIError, transaction: Transaction) -> bool:
        """Whether a refused PUT had arrived after all. A presigned URL refuses a second
        use with 403: after a retry, the first try may have arrived and only its answer
        been lost, and then the transaction has moved on."""
        return exc.status == 403 and transaction.status not in ("awaiting_upload", "expired")
