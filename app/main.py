"""The ASGI application: the S3 data plane, with health (and later admin) beside it."""

from __future__ import annotations

from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, HTTPException, Query
from fastapi.responses import JSONResponse

from app.bootstrap import Container, build
from app.config import Settings, get_settings
from app.s3.app import Receive, S3App, Scope, Send

CONTROL_PATHS = ("/healthz", "/readyz", "/metrics", "/admin")


def _is_s3_request(scope: MutableMapping[str, Any]) -> bool:
    """A signed request is S3 even on a control path (a bucket may be called "admin")."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization" and value.startswith(b"AWS4-"):
            return True
    return b"X-Amz-Signature=" in scope.get("query_string", b"")


def control_app(container: Container) -> FastAPI:
    from app.services.durability import Durability

    durability = Durability(container.journal, container.executor)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await container.executor.start()
        try:
            yield
        finally:
            await container.executor.stop()

    api = FastAPI(title="Ferry", docs_url=None, redoc_url=None, openapi_url="/admin/openapi.json",
                  lifespan=lifespan)

    def admin(authorization: Annotated[str | None, Header()] = None) -> None:
        token = container.settings.admin_token
        if not token:
            raise HTTPException(401, "the admin API is disabled: set FERRY_ADMIN_TOKEN")
        if authorization != f"Bearer {token}":
            raise HTTPException(401, "missing or wrong bearer token")

    admin_only = [Depends(admin)]

    @api.get("/healthz")
    def healthz() -> JSONResponse:
        return JSONResponse({"status": "ok"})

    @api.post("/admin/flush", dependencies=admin_only)
    async def flush(bucket: str | None = None, prefix: str = "", wait: bool = True,
                    timeout: Annotated[float, Query(gt=0, le=86400)] = 3600) -> dict[str, Any]:
        """Destage everything written under bucket/prefix before this call; wait for the remote."""
        result = await durability.flush(bucket, prefix, wait=wait, timeout=timeout)
        return {"upto_seq": result.upto_seq, "pending": result.pending, "failed": result.failed,
                "durable": result.durable, "waited_seconds": round(result.waited_seconds, 3)}

    @api.get("/admin/objects", dependencies=admin_only)
    async def object_states(bucket: str, prefix: str = "",
                            limit: Annotated[int, Query(ge=1, le=10000)] = 1000) -> dict[str, Any]:
        """Durability state of each journaled version under a prefix, newest first."""
        rows = await durability.states(bucket, prefix, limit)
        return {"versions": [
            {"seq": r.seq, "key": r.key, "op": r.op, "state": r.state.value, "size": r.size, "etag": r.etag,
             "attempts": r.attempts, "last_error": r.last_error, "remote_etag": r.remote_etag,
             "created_at": r.created_at.isoformat(),
             "durable_at": r.durable_at.isoformat() if r.durable_at else None}
            for r in rows]}

    return api


class FerryApp:
    """Dispatches S3 traffic to the lean data plane and control paths to FastAPI."""

    def __init__(self, container: Container) -> None:
        self.container = container
        self.s3 = S3App(container.gateway, container.catalog, domain=container.settings.domain,
                        max_skew_seconds=container.settings.max_clock_skew_seconds)
        self.control = control_app(container)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path: str = scope["path"]
            if path.startswith(CONTROL_PATHS) and not _is_s3_request(scope):
                await self.control(scope, receive, send)
                return
            await self.s3(scope, receive, send)
            return
        await self.control(scope, receive, send)


def create_app(settings: Settings | None = None) -> FerryApp:
    """uvicorn factory: ``uvicorn --factory app.main:create_app``."""
    return FerryApp(build(settings or get_settings()))
