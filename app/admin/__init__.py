"""The admin REST API (under /admin, schema at /admin/openapi.json) and /readyz.

Each module holds one area's routes as an ``APIRouter`` factory taking the container;
``include_admin`` mounts them all on the control app. See docs/admin-api.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI

from app.bootstrap import Container

if TYPE_CHECKING:
    from app.admin.auth import Authenticator


def include_admin(api: FastAPI, container: Container) -> Authenticator:
    from app.admin import auth, buckets, cache, health, journal, policies, remotes, staging, tenants, workers
    from app.admin.common import install_error_handlers

    install_error_handlers(api)
    authenticator = auth.Authenticator(container)
    api.include_router(health.router(container, authenticator))
    api.include_router(auth.router(container, authenticator))
    for module in (tenants, buckets, remotes, policies, journal, cache, staging, workers):
        api.include_router(module.router(container, authenticator))
    return authenticator
