"""Admin authentication: bearer tokens with scopes, and the token management endpoints.

``FERRY_ADMIN_TOKEN`` is the first token and holds every scope; more are created through
``POST /admin/tokens`` (only their SHA-256 is stored). Scopes nest: ``admin`` implies ``write``,
which implies ``read``. S3 access keys and SigV4 never reach this code: a signed request is
routed to the S3 data plane even on an /admin path.

A ``read``/``write`` token may be bound to one tenant (``"tenant"`` at creation): it reaches only
the endpoints that take a bucket, and only that tenant's buckets (their owners, policies, staging
jobs, journal, flush and evict); every other endpoint and every other bucket answers 403, except
a policy or staging job named by id: another tenant's answers 404, exactly as an absent one.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.adapters.catalog.control.tokens import TOKEN_PREFIX, TokenInfo
from app.admin.common import Model, Name, Out, run
from app.bootstrap import Container

Scope = Literal["read", "write", "admin"]
IMPLIED: dict[str, frozenset[str]] = {
    "read": frozenset({"read"}),
    "write": frozenset({"read", "write"}),
    "admin": frozenset({"read", "write", "admin"}),
}

bearer = HTTPBearer(auto_error=False, scheme_name="AdminToken",
                    description="FERRY_ADMIN_TOKEN, or a token from POST /admin/tokens")
UNAUTHORIZED = {"WWW-Authenticate": "Bearer"}


@dataclass(frozen=True)
class Principal:
    name: str
    scopes: frozenset[str]
    tenant_id: int | None = None  # bound to this tenant's buckets
    tenant: str | None = None


def expand(scopes: list[str]) -> frozenset[str]:
    out: set[str] = set()
    for scope in scopes:
        out |= IMPLIED.get(scope, frozenset())
    return frozenset(out)


class Authenticator:
    def __init__(self, container: Container) -> None:
        self.env_token = container.settings.admin_token
        self.tokens = container.admin.tokens
        self.owners = container.admin.owners

    async def identify(self, credentials: HTTPAuthorizationCredentials | None) -> Principal:
        if credentials is None or not credentials.credentials:
            raise HTTPException(401, "missing bearer token (Authorization: Bearer <admin token>)", headers=UNAUTHORIZED)
        token = credentials.credentials
        if self.env_token and hmac.compare_digest(token.encode("utf-8", "replace"), self.env_token.encode()):
            return Principal("FERRY_ADMIN_TOKEN", IMPLIED["admin"])
        if token.startswith(TOKEN_PREFIX) and len(token) < 200:
            info = await run(self.tokens.verify, token)
            if info is not None:
                return Principal(info.name, expand(info.scopes), info.tenant_id, info.tenant)
        raise HTTPException(401, "unknown or disabled bearer token", headers=UNAUTHORIZED)

    def require(self, scope: Scope, tenant_ok: bool = False) -> Callable[..., Awaitable[Principal]]:
        """A dependency: 401 without a valid token, 403 when the token lacks ``scope`` or is bound
        to a tenant and the endpoint does not check buckets (``tenant_ok``)."""

        async def dependency(credentials: HTTPAuthorizationCredentials | None = Security(bearer)) -> Principal:
            principal = await self.identify(credentials)
            if scope not in principal.scopes:
                raise HTTPException(403, f"token {principal.name!r} lacks the {scope!r} scope")
            if principal.tenant_id is not None and not tenant_ok:
                raise HTTPException(403, f"token {principal.name!r} is bound to tenant {principal.tenant!r}: "
                                    "this endpoint is for unbound tokens")
            return principal

        return dependency

    async def owns(self, principal: Principal, bucket: str) -> bool:
        """True when the principal may act on ``bucket`` (unbound, or bound to its owner)."""
        if principal.tenant_id is None:
            return True
        owner, _ = await run(self.owners.owner, bucket)
        return owner == principal.tenant_id

    async def check_bucket(self, principal: Principal, bucket: str | None) -> None:
        """403 unless the principal may act on ``bucket`` (None: every bucket, unbound tokens only)."""
        if principal.tenant_id is None:
            return
        if bucket is None or bucket == "*":
            raise HTTPException(403, f"token {principal.name!r} is bound to tenant {principal.tenant!r}: "
                                "name one of its buckets")
        if not await self.owns(principal, bucket):
            raise HTTPException(403, f"bucket {bucket!r} is not tenant {principal.tenant!r}'s")

    async def check_found(self, principal: Principal, bucket: str, not_found: str) -> None:
        """404 ``not_found`` unless the principal may act on ``bucket``: for a record looked up by
        id (a policy, a staging job), another tenant's answers as an absent one does, so a bound
        token cannot learn which ids exist."""
        if principal.tenant_id is not None and (bucket == "*" or not await self.owns(principal, bucket)):
            raise HTTPException(404, not_found)

    async def visible(self, principal: Principal, buckets: list[str]) -> set[str]:
        """The buckets among ``buckets`` the principal may see (one catalog read)."""
        if principal.tenant_id is None:
            return set(buckets)
        snapshot = await run(self.owners.snapshot)
        return {b for b in buckets if snapshot.owners.get(b, snapshot.default_tenant) == principal.tenant_id}

    def read(self) -> list[Any]:
        return [Depends(self.require("read"))]

    def tenant_read(self) -> Any:
        """``principal: Principal = auth.tenant_read()``: read scope, tenant-bound tokens admitted
        (the endpoint checks buckets with ``check_bucket``/``visible``)."""
        return Depends(self.require("read", tenant_ok=True))

    def tenant_write(self) -> Any:
        return Depends(self.require("write", tenant_ok=True))

    def write(self) -> list[Any]:
        return [Depends(self.require("write"))]

    def admin(self) -> list[Any]:
        return [Depends(self.require("admin"))]


class TokenCreate(Model):
    name: Name
    scopes: list[Scope]
    tenant: Name | None = None  # bind the token to this tenant's buckets (read/write scopes only)


class TokenOut(Out):
    id: int
    name: str
    scopes: list[str]
    disabled: bool
    created_at: float
    last_used_at: float | None
    tenant: str | None = None


class TokenSecretOut(TokenOut):
    token: str


TokenId = Annotated[int, Path(ge=1, le=2**63 - 1)]


def router(container: Container, auth: Authenticator | None = None) -> APIRouter:
    auth = auth or Authenticator(container)
    tokens = auth.tokens
    api = APIRouter(prefix="/admin/tokens", tags=["tokens"], dependencies=auth.admin())

    @api.get("", response_model=list[TokenOut])
    async def list_tokens() -> list[TokenInfo]:
        """Tokens and their scopes; secrets are never shown again."""
        return await run(tokens.list)

    @api.post("", response_model=TokenSecretOut, status_code=201)
    async def create_token(body: TokenCreate) -> TokenSecretOut:
        """A new token; its secret is in this answer only (the catalog keeps a SHA-256)."""
        if not body.scopes:
            raise HTTPException(422, "scopes must name at least one of read, write, admin")
        if body.tenant is not None and "admin" in body.scopes:
            raise HTTPException(422, "a token bound to a tenant may hold read and write only")
        info, secret = await run(tokens.create, body.name, sorted(set(body.scopes)), body.tenant)
        return TokenSecretOut(**TokenOut.model_validate(info).model_dump(), token=secret)

    @api.post("/{token_id}/disable", response_model=TokenOut)
    async def disable_token(token_id: TokenId) -> TokenInfo:
        """Stops the token working at once (every process checks the catalog on each request)."""
        return await run(tokens.set_disabled, token_id, True)

    @api.post("/{token_id}/enable", response_model=TokenOut)
    async def enable_token(token_id: TokenId) -> TokenInfo:
        return await run(tokens.set_disabled, token_id, False)

    return api

