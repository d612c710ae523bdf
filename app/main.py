"""The ASGI application: the S3 data plane, with health (and later admin) beside it."""

from __future__ import annotations

from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from app import metrics
from app.admin import include_admin
from app.admin.status import catalog_collector, status_router
from app.bootstrap import Container, build
from app.config import Settings, get_settings
from app.logs import RequestIdMiddleware
from app.s3.app import Receive, S3App, Scope, Send
from app.s3.request import BodyRate
from app.server.local_reads import LocalReadListener, socket_path

CONTROL_PATHS = ("/healthz", "/readyz", "/metrics", "/admin")


def _is_s3_request(scope: MutableMapping[str, Any]) -> bool:
    """A signed request is S3 even on a control path (a bucket may be called "admin")."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization" and value.startswith(b"AWS4-"):
            return True
    return b"X-Amz-Signature=" in scope.get("query_string", b"")


def control_app(container: Container, local_reads: LocalReadListener | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await container.executor.start()
        listener = await _start_fleet(container)
        await container.cache.start()
        await container.staging.startup()
        await container.chores.start()
        if local_reads is not None:
            await local_reads.start()
        try:
            yield
        finally:
            if local_reads is not None:
                await local_reads.stop()
            await container.chores.stop()
            await container.cache.stop()
            await container.staging.shutdown()
            if listener is not None:
                await listener.stop()
            if container.fleet is not None:
                container.fleet.membership.stop()
            await container.executor.stop()
            metrics.process_exit()

    api = FastAPI(title="Ferry", docs_url=None, redoc_url=None, openapi_url="/admin/openapi.json",
                  lifespan=lifespan)

    api.add_middleware(RequestIdMiddleware)  # request id on every log line and answer

    api.include_router(status_router(container))  # /admin/status page, /admin/stats JSON

    @api.get("/healthz")
    def healthz() -> JSONResponse:
        return JSONResponse({"status": "ok"})

    # /readyz and the admin API (/admin/flush, /admin/objects among them): app/admin/*.py
    auth = include_admin(api, container)
    # /metrics names buckets and tenants: a read token unless the operator makes it public.
    guard = [] if container.settings.metrics_public else auth.read()

    @api.get("/metrics", include_in_schema=False, dependencies=guard)
    async def prometheus_metrics() -> Response:
        """Prometheus text format: every worker's counters plus the catalog's gauges (read once per scrape)."""
        metrics.flush_requests()  # this worker's pending figures; the others write theirs every 0.5 s
        await run_in_threadpool(container.cache.publish_sizing)  # its sizing gauges; the others every 30 s
        body, content_type = await run_in_threadpool(metrics.exposition, catalog_collector(container))
        return Response(body, media_type=content_type)

    return api


async def _start_fleet(container: Container) -> Any:
    """Fleet mode: follow the live nodes and serve peers on the internal port (app/fleet/)."""
    if container.fleet is None:
        return None
    from app.fleet.listener import InternalListener

    fleet = container.fleet
    fleet.membership.start()
    listener = InternalListener(fleet.server, fleet.host, fleet.port)
    await listener.start()
    return listener


class FerryApp:
    """Dispatches S3 traffic to the lean data plane and control paths to FastAPI."""

    def __init__(self, container: Container) -> None:
        self.container = container
        self.s3 = S3App(container.gateway, container.catalog, domain=container.settings.domain,
                        max_skew_seconds=container.settings.max_clock_skew_seconds,
                        body_timeout=container.settings.body_read_timeout,
                        body_min_rate=BodyRate(container.settings.body_min_rate,
                                               container.settings.body_min_rate_window),
                        read_deadline=container.settings.remote_request_deadline or None)
        settings = container.settings
        self.local_reads = LocalReadListener(self.s3, socket_path(settings.data_dir)) if settings.local_reads else None
        self.control = control_app(container, self.local_reads)

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
    import multiprocessing

    if multiprocessing.parent_process() is not None:  # a worker of `ferry serve --workers N`
        from app.adapters.local.datadir import die_with_parent

        die_with_parent()  # the owner's lock dies with it; its workers must too
    return FerryApp(build(settings or get_settings()))
