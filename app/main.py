"""The ASGI application: the S3 data plane, with health (and later admin) beside it."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from fastapi import FastAPI
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
    api = FastAPI(title="Ferry", docs_url=None, redoc_url=None, openapi_url=None)

    @api.get("/healthz")
    def healthz() -> JSONResponse:
        return JSONResponse({"status": "ok"})

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
