"""Tenants and their S3 access keys, as the admin API manages them.

Secrets are generated here and returned once (on create and rotate); listings never show them.
The S3 data plane caches secrets for a few seconds (``Catalog.lookup_key``), so a disabled key
or tenant stops working within that window on every process.
"""

from __future__ import annotations

import builtins
import secrets
import string
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Engine, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.adapters.catalog.engine import Sessions
from app.adapters.catalog.errors import Conflict, NotFound
from app.adapters.catalog.tables import AccessKey, Tenant

_KEY_ALPHABET = string.ascii_uppercase + string.digits


def new_access_key() -> str:
    return "FK" + "".join(secrets.choice(_KEY_ALPHABET) for _ in range(18))


def new_secret_key() -> str:
    return secrets.token_urlsafe(30)


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo else when.replace(tzinfo=UTC)


@dataclass(frozen=True)
class TenantInfo:
    id: int
    name: str
    disabled: bool
    cache_quota_bytes: int | None
    created_at: datetime
    keys: int


@dataclass(frozen=True)
class KeyInfo:
    access_key: str
    tenant: str
    disabled: bool
    created_at: datetime


class TenantRepo:
    def __init__(self, engine: Engine) -> None:
        self.sessions = Sessions(engine)

    # ---- tenants -----------------------------------------------------------------------------
    def _tenant(self, s: Session, name: str) -> Tenant:
        row = s.scalar(select(Tenant).where(Tenant.name == name))
        if row is None:
            raise NotFound(f"no tenant named {name!r}")
        return row

    def _info(self, s: Session, row: Tenant) -> TenantInfo:
        keys = s.scalar(select(func.count()).select_from(AccessKey).where(AccessKey.tenant_id == row.id)) or 0
        return TenantInfo(row.id, row.name, row.disabled, row.cache_quota_bytes, _aware(row.created_at), int(keys))

    def create(self, name: str, cache_quota_bytes: int | None) -> TenantInfo:
        try:
            with self.sessions.begin() as s:
                if s.scalar(select(Tenant.id).where(Tenant.name == name)) is not None:
                    raise Conflict(f"tenant {name!r} exists")
                row = Tenant(name=name, disabled=False, created_at=datetime.now(UTC),
                             cache_quota_bytes=cache_quota_bytes)
                s.add(row)
                s.flush()
                return self._info(s, row)
        except IntegrityError as exc:
            raise Conflict(f"tenant {name!r} exists") from exc

    def list(self) -> builtins.list[TenantInfo]:
        with self.sessions() as s:
            counts = dict(s.execute(select(AccessKey.tenant_id, func.count()).group_by(AccessKey.tenant_id)).all())
            return [TenantInfo(r.id, r.name, r.disabled, r.cache_quota_bytes, _aware(r.created_at),
                               int(counts.get(r.id, 0)))
                    for r in s.scalars(select(Tenant).order_by(Tenant.name))]

    def get(self, name: str) -> TenantInfo:
        with self.sessions() as s:
            return self._info(s, self._tenant(s, name))

    def id_of(self, name: str) -> int:
        return self.get(name).id

    def update(self, name: str, *, quota: int | None = None, clear_quota: bool = False,
               disabled: bool | None = None) -> TenantInfo:
        with self.sessions.begin() as s:
            row = self._tenant(s, name)
            if clear_quota:
                row.cache_quota_bytes = None
            elif quota is not None:
                row.cache_quota_bytes = quota
            if disabled is not None:
                row.disabled = disabled
            s.flush()
            return self._info(s, row)

    # ---- access keys -------------------------------------------------------------------------
    def create_key(self, tenant: str, access_key: str | None = None) -> tuple[KeyInfo, str]:
        """A new key pair for the tenant; the secret is returned only here."""
        access_key = access_key or new_access_key()
        secret = new_secret_key()
        try:
            with self.sessions.begin() as s:
                row = self._tenant(s, tenant)
                if s.get(AccessKey, access_key) is not None:
                    raise Conflict(f"access key {access_key!r} exists")
                key = AccessKey(access_key=access_key, tenant_id=row.id, secret_key=secret, disabled=False,
                                created_at=datetime.now(UTC))
                s.add(key)
                s.flush()
                return KeyInfo(access_key, row.name, False, _aware(key.created_at)), secret
        except IntegrityError as exc:
            raise Conflict(f"access key {access_key!r} exists") from exc

    def list_keys(self, tenant: str | None = None) -> builtins.list[KeyInfo]:
        stmt = (select(AccessKey.access_key, Tenant.name, AccessKey.disabled, AccessKey.created_at)
                .join(Tenant, Tenant.id == AccessKey.tenant_id).order_by(Tenant.name, AccessKey.access_key))
        with self.sessions() as s:
            if tenant is not None:
                self._tenant(s, tenant)
                stmt = stmt.where(Tenant.name == tenant)
            return [KeyInfo(ak, name, disabled, _aware(created)) for ak, name, disabled, created in s.execute(stmt)]

    def _key(self, s: Session, access_key: str) -> tuple[AccessKey, str]:
        key = s.get(AccessKey, access_key)
        if key is None:
            raise NotFound(f"no access key {access_key!r}")
        tenant = s.get(Tenant, key.tenant_id)
        return key, tenant.name if tenant else ""

    def get_key(self, access_key: str) -> KeyInfo:
        with self.sessions() as s:
            key, tenant = self._key(s, access_key)
            return KeyInfo(key.access_key, tenant, key.disabled, _aware(key.created_at))

    def rotate_key(self, access_key: str) -> tuple[KeyInfo, str]:
        """A new secret for the same access key; the old one stops working."""
        secret = new_secret_key()
        with self.sessions.begin() as s:
            key, tenant = self._key(s, access_key)
            key.secret_key = secret
            return KeyInfo(key.access_key, tenant, key.disabled, _aware(key.created_at)), secret

    def set_key_disabled(self, access_key: str, disabled: bool) -> KeyInfo:
        with self.sessions.begin() as s:
            key, tenant = self._key(s, access_key)
            key.disabled = disabled
            return KeyInfo(key.access_key, tenant, key.disabled, _aware(key.created_at))
