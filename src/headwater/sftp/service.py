"""SFTP accounts: create, read, replace keys, delete, and check a login (section 11)."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from headwater.identity import service as identity
from headwater.identity.secrets import hash_secret, verify_secret
from headwater.identity.tokens import Principal
from headwater.ingestion import api as ingestion
from headwater.kit.clock import utcnow, utcnow_ms
from headwater.kit.pagination import PageQuery, paginate
from headwater.sftp.errors import AccountExists, AccountNotFound, InvalidAccount
from headwater.sftp.models import SftpAccount, SftpUpload
from headwater.sftp.schemas import AccountCreate, AccountCreated, AccountRead

ALGORITHMS = (
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "ssh-rsa",
)
MIN_RSA_BITS = 2048


def _parsed(lines: Sequence[str]) -> list[dict[str, Any]]:
    """Each key line parsed: its canonical text (no comment) and SHA256 fingerprint; 400
    naming the index of one that does not parse or is not allowed."""
    import asyncssh  # here, not at import: the API's start-up does not load SSH

    keys: list[dict[str, Any]] = []
    problems: list[dict[str, str]] = []
    for index, line in enumerate(lines):
        field = f"/public_keys/{index}"
        try:
            key = asyncssh.import_public_key(line.strip())
        except (asyncssh.KeyImportError, ValueError, TypeError) as exc:
            problems.append({"location": "body", "field": field, "message": f"not a key: {exc}"})
            continue
        algorithm = key.get_algorithm()
        if algorithm not in ALGORITHMS:
            problems.append(
                {"location": "body", "field": field, "message": f"{algorithm} is not accepted"}
            )
            continue
        bits = getattr(getattr(key, "pyca_key", None), "key_size", None)
        if algorithm == "ssh-rsa" and (bits or 0) < MIN_RSA_BITS:
            problems.append(
                {
                    "location": "body",
                    "field": field,
                    "message": f"RSA keys need {MIN_RSA_BITS} bits",
                }
            )
            continue
        keys.append(
            {
                "key": key.export_public_key("openssh").decode().split()[0]
                + " "
                + key.export_public_key("openssh").decode().split()[1],
                "fingerprint": key.get_fingerprint("sha256"),
            }
        )
    if problems:
        raise InvalidAccount(
            "Some public keys cannot be used: "
            + "; ".join(f"{p['field']}: {p['message']}" for p in problems),
            errors=problems,
        )
    return keys


def view(account: SftpAccount) -> AccountRead:
    return AccountRead(
        username=account.username,
        company_id=account.company_id,
        client_ids=list(account.client_ids),
        key_fingerprints=[key["fingerprint"] for key in account.public_keys],
        created_at=account.created_at,
    )


def create_account(
    session: Session, *, company_id: uuid.UUID, data: AccountCreate
) -> AccountCreated:
    """A new account; its generated password, if asked for, is in the answer only."""
    if not data.public_keys and not data.password:
        raise InvalidAccount(
            "An account needs at least one public key, or `password: true`.",
            errors=[{"location": "body", "field": "/public_keys", "message": "empty"}],
        )
    identity.get_company(session, company_id)
    identity.check_client_ids(session, company_id=company_id, client_ids=data.client_ids)
    keys = _parsed(data.public_keys)
    if session.get(SftpAccount, data.username) is not None:
        raise AccountExists(f"The SFTP username {data.username!r} is taken.")
    password = secrets.token_urlsafe(18) if data.password else None
    account = SftpAccount(
        username=data.username,
        id=uuid.uuid4(),
        company_id=company_id,
        client_ids=list(dict.fromkeys(data.client_ids)),
        public_keys=keys,
        password_hash=hash_secret(password) if password else None,
        created_at=utcnow(),
    )
    try:
        with session.begin_nested():
            session.add(account)
    except Exception as exc:  # a concurrent create of the same name won
        if "unique" in str(exc).lower() or "duplicate" in str(exc).lower():
            raise AccountExists(f"The SFTP username {data.username!r} is taken.") from None
        raise
    return AccountCreated(**view(account).model_dump(), password=password)


def ensure_account(
    session: Session, *, company_id: uuid.UUID, username: str, public_key: str
) -> SftpAccount:
    """The account with exactly this key, made if missing (the demo's)."""
    keys = _parsed([public_key])
    account = session.get(SftpAccount, username)
    if account is None:
        account = SftpAccount(
            username=username,
            id=uuid.uuid4(),
            company_id=company_id,
            client_ids=[],
            public_keys=keys,
            created_at=utcnow(),
        )
        session.add(account)
    else:
        account.public_keys = keys
    session.flush()
    return account


def get_account(session: Session, username: str) -> SftpAccount:
    account = session.get(SftpAccount, username)
    if account is None:
        raise AccountNotFound(f"No SFTP account {username!r}.")
    return account


def list_accounts(
    session: Session, *, company_id: uuid.UUID | None, params: PageQuery
) -> tuple[Sequence[SftpAccount], int]:
    statement = select(SftpAccount)
    if company_id is not None:
        identity.get_company(session, company_id)
        statement = statement.where(SftpAccount.company_id == company_id)
    return paginate(session, statement, SftpAccount.created_at, SftpAccount.username, params=params)


def replace_keys(session: Session, username: str, lines: Sequence[str]) -> SftpAccount:
    account = get_account(session, username)
    account.public_keys = _parsed(lines)
    session.flush()
    return account


def delete_account(session: Session, username: str) -> None:
    """No new login; the servers end its open sessions within seconds."""
    get_account(session, username)
    session.execute(delete(SftpAccount).where(SftpAccount.username == username))


# --- logging in -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Login:
    """An authenticated account, as the server keeps it for a session."""

    username: str
    account_id: uuid.UUID
    company_id: uuid.UUID
    client_ids: tuple[str, ...]

    def principal(self) -> Principal:
        """The account as a caller of the ingestion core: its company, its clients."""
        return Principal(
            subject=f"sftp:{self.username}",
            author_id=self.account_id,
            company_id=self.company_id,
            client_ids=self.client_ids,
            scopes=frozenset({"data:read", "data:write"}),
        )


def _login(account: SftpAccount) -> Login:
    return Login(
        username=account.username,
        account_id=account.id,
        company_id=account.company_id,
        client_ids=tuple(account.client_ids),
    )


def check_key(session: Session, username: str, key_text: str) -> Login | None:
    """The account, if `key_text` (algorithm and base64) is one of its keys."""
    account = session.get(SftpAccount, username)
    if account is None or not _company_active(session, account):
        return None
    if any(key["key"] == key_text for key in account.public_keys):
        return _login(account)
    return None


def check_password(session: Session, username: str, password: str) -> Login | None:
    """The account, if it has a password and this is it. An unknown name costs the same
    time as a wrong password."""
    account = session.get(SftpAccount, username)
    ok = verify_secret(account.password_hash if account else None, password)
    if not ok or account is None or not _company_active(session, account):
        return None
    return _login(account)


def _company_active(session: Session, account: SftpAccount) -> bool:
    company = identity.get_company(session, account.company_id)
    return company.revoked_at is None


def existing(session: Session, usernames: Sequence[str]) -> set[str]:
    """Which of these accounts still exist (the servers end sessions of the others)."""
    if not usernames:
        return set()
    return set(
        session.scalars(select(SftpAccount.username).where(SftpAccount.username.in_(usernames)))
    )


# --- uploads and receipts ---------------------------------------------------------------------


def record_upload(
    session: Session,
    login: Login,
    *,
    transaction_id: uuid.UUID,
    client_id: str,
    dataset_id: str,
    name: str,
) -> None:
    session.add(
        SftpUpload(
            transaction_id=transaction_id,
            username=login.username,
            company_id=login.company_id,
            client_id=client_id,
            dataset_id=dataset_id,
            name=name,
            created_at=utcnow_ms(),
        )
    )


def receipts(
    session: Session,
    login: Login,
    caller: Principal,
    *,
    client_id: str,
    dataset_id: str,
    days: int,
    only: str | None = None,
) -> dict[str, bytes]:
    """The receipts shown in a dataset's `receipts` directory: `<name>.<transaction_id>.json`
    → the transaction's JSON, for the uploads of the last `days` whose transactions are
    final and still visible to the account (only the one named `only`, if given)."""
    found: dict[str, bytes] = {}
    uploads = session.scalars(
        select(SftpUpload)
        .where(
            SftpUpload.company_id == login.company_id,
            SftpUpload.client_id == client_id,
            SftpUpload.dataset_id == dataset_id,
            SftpUpload.receipt_removed_at.is_(None),
            SftpUpload.created_at >= utcnow() - timedelta(days=days),
        )
        .order_by(SftpUpload.created_at)
    )
    for upload in uploads:
        name = f"{upload.name}.{upload.transaction_id}.json"
        if only is not None and name != only:
            continue
        try:
            view = ingestion.transaction_read(session, caller, upload.transaction_id)
        except ingestion.TransactionNotFound:  # no longer visible to this account
            continue
        if view.status not in ingestion.PENDING_STATUSES:
            found[name] = view.model_dump_json().encode()
    return found


def remove_receipt(session: Session, login: Login, transaction_id: uuid.UUID) -> bool:
    result = session.execute(
        update(SftpUpload)
        .where(
            SftpUpload.transaction_id == transaction_id,
            SftpUpload.company_id == login.company_id,
            SftpUpload.receipt_removed_at.is_(None),
        )
        .values(receipt_removed_at=utcnow_ms())
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def expire_receipts(session: Session, *, days: int, now: datetime | None = None) -> int:
    """Forget uploads whose receipts are past their days (the worker)."""
    cutoff = (now or utcnow()) - timedelta(days=days)
    result = session.execute(delete(SftpUpload).where(SftpUpload.created_at < cutoff))
    return int(result.rowcount)  # type: ignore[attr-defined]
