"""Admin authentication: bearer tokens with scopes, and the token management endpoints.

``FERRY_ADMIN_TOKEN`` is the first token and holds every scope; more are created through
``POST /admin/tokens`` (only their SHA-256 is stored). Scopes nest: ``admin`` implies ``write``,
which implies ``read``. S3 access keys and SigV4 never reach this code: a signed request is
routed to the S3 data plane even on an /admin path.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.adapters.catalog.tokens import TOKEN_PREFIX, TokenInfo
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


def expand(scopes: list[str]) -> frozenset[str]:
    out: set[str] = set()
    for scope in scopes:
        out |= IMPLIED.get(scope, frozenset())
    return frozenset(out)


class Authenticator:
    def __init__(self, container: Container) -> None:
        self.env_token = container.settings.admin_token
        self.tokens = container.admin.tokens

    async def identify(self, credentials: HTTPAuthorizationCredentials | None) -> Principal:
        if credentials is None or not credentials.credentials:
            raise HTTPException(401, "missing bearer token (Authorization: Bearer <admin token>)", headers=UNAUTHORIZED)
        token = credentials.credentials
        if self.env_token and hmac.compare_digest(token.encode("utf-8", "replace"), self.env_token.encode()):
            return Principal("FERRY_ADMIN_TOKEN", IMPLIED["admin"])
        if token.startswith(TOKEN_PREFIX) and len(token) < 200:
            info = await run(self.tokens.verify, token)
            if info is not None:
                return Principal(info.name, expand(info.scopes))
        raise HTTPException(401, "unknown or disabled bearer token", headers=UNAUTHORIZED)

    def require(self, scope: Scope) -> Callable[..., Awaitable[Principal]]:
        """A dependency: 401 without a valid token, 403 when the token lacks ``scope``."""

        async def dependency(credentials: HTTPAuthorizationCredentials | None = Security(bearer)) -> Principal:
            principal = await self.identify(credentials)
            if scope not in principal.scopes:
                raise HTTPException(403, f"token {principal.name!r} lacks the {scope!r} scope")
            return principal

        return dependency

    def read(self) -> list[Any]:
        return [Depends(self.require("read"))]

    def write(self) -> list[Any]:
        return [Depends(self.require("write"))]

    def admin(self) -> list[Any]:
        return [Depends(self.require("admin"))]


class TokenCreate(Model):
    name: Name
    scopes: list[Scope]


class TokenOut(Out):
    id: int
    name: str
    scopes: list[str]
    disabled: bool
    created_at: float
    last_used_at: float | None


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
        info, secret = await run(tokens.create, body.name, sorted(set(body.scopes)))
        return TokenSecretOut(**TokenOut.model_validate(info).model_dump(), token=secret)

    @api.post("/{token_id}/disable", response_model=TokenOut)
    async def disable_token(token_id: TokenId) -> TokenInfo:
        """Stops the token working at once (every process checks the catalog on each request)."""
        return await run(tokens.set_disabled, token_id, True)

    @api.post("/{token_id}/enable", response_model=TokenOut)
    async def enable_token(token_id: TokenId) -> TokenInfo:
        return await run(tokens.set_disabled, token_id, False)

    return api

