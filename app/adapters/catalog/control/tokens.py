"""Admin API bearer tokens: only a SHA-256 of each secret is stored, so a leaked catalog leaks none."""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, or_, select, update
from sqlalchemy.exc import IntegrityError

from app.adapters.catalog.engine import Sessions
from app.adapters.catalog.errors import Conflict, NotFound
from app.adapters.catalog.tables import AdminToken, Tenant

TOKEN_PREFIX = "fat_"  # "ferry admin token": recognisable in logs and secret scanners
TOUCH_EVERY_SECONDS = 60.0


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class TokenInfo:
    id: int
    name: str
    scopes: list[str]
    disabled: bool
    created_at: float
    last_used_at: float | None
    tenant_id: int | None = None  # a token bound to one tenant sees and changes only its buckets
    tenant: str | None = None


def _info(row: AdminToken, tenant: str | None = None) -> TokenInfo:
    return TokenInfo(row.id, row.name, row.scopes.split(), row.disabled, row.created_at, row.last_used_at,
                     row.tenant_id, tenant)


def _with_tenant() -> Any:
    return select(AdminToken, Tenant.name).outerjoin(Tenant, Tenant.id == AdminToken.tenant_id)


class TokenRepo:
    def __init__(self, engine: Engine) -> None:
        self.sessions = Sessions(engine)

    def create(self, name: str, scopes: list[str], tenant: str | None = None) -> tuple[TokenInfo, str]:
        """A new token (bound to ``tenant`` when given); the secret is returned here and never again."""
        secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
        try:
            with self.sessions.begin() as s:
                if s.scalar(select(AdminToken.id).where(AdminToken.name == name)) is not None:
                    raise Conflict(f"a token named {name!r} exists")
                tenant_id = None
                if tenant is not None:
                    tenant_id = s.scalar(select(Tenant.id).where(Tenant.name == tenant))
                    if tenant_id is None:
                        raise NotFound(f"no tenant named {tenant!r}")
                row = AdminToken(name=name, token_sha256=token_hash(secret), scopes=" ".join(scopes),
                                 disabled=False, created_at=time.time(), tenant_id=tenant_id)
                s.add(row)
                s.flush()
                return _info(row, tenant), secret
        except IntegrityError as exc:  # created concurrently
            raise Conflict(f"a token named {name!r} exists") from exc

    def list(self) -> list[TokenInfo]:
        with self.sessions() as s:
            return [_info(r, t) for r, t in s.execute(_with_tenant().order_by(AdminToken.id))]

    def set_disabled(self, token_id: int, disabled: bool) -> TokenInfo:
        with self.sessions.begin() as s:
            row = s.get(AdminToken, token_id)
            if row is None:
                raise NotFound(f"no token with id {token_id}")
            row.disabled = disabled
            tenant = s.scalar(select(Tenant.name).where(Tenant.id == row.tenant_id)) if row.tenant_id else None
            return _info(row, tenant)

    def verify(self, secret: str) -> TokenInfo | None:
        """The enabled token with this secret, or None; notes when it was last used (coarsely)."""
        digest = token_hash(secret)
        with self.sessions() as s:
            found = s.execute(_with_tenant().where(AdminToken.token_sha256 == digest,
                                                   AdminToken.disabled.is_(False))).first()
            if found is None:
                return None
            info = _info(*found)
        now = time.time()
        if info.last_used_at is None or now - info.last_used_at > TOUCH_EVERY_SECONDS:
            with self.sessions.begin() as s:
                s.execute(update(AdminToken).where(
                    AdminToken.id == info.id,
                    or_(AdminToken.last_used_at.is_(None), AdminToken.last_used_at < now - TOUCH_EVERY_SECONDS))
                    .values(last_used_at=now))
        return info
