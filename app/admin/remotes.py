"""Remotes and bucket mappings.

The default remote comes from settings (``GET /admin/remote``). A mapped bucket is served from
its registered remote (``adapters/remote/router.py``). A change answers once every process is
sure to route by it (about FERRY_REMOTE_REFRESH_SECONDS after its commit), so a mapping or a
rotated key needs no restart, and no request sent after the answer goes by the old table.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated, Literal
from urllib.parse import urlsplit

from fastapi import APIRouter, Path, Query, Response
from pydantic import AfterValidator, Field, StringConstraints

from app.adapters.catalog.control.remotes import MappingInfo, RemoteInfo, RemoteRepo
from app.admin.auth import Authenticator
from app.admin.common import BUCKET_PATTERN, BucketName, Model, Name, Out, Text, run
from app.bootstrap import Container
from app.services.control.probes import CheckResult


def _endpoint(value: str) -> str:
    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise ValueError(f"bad port: {exc}") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    return value.rstrip("/")


Endpoint = Annotated[str, StringConstraints(max_length=1024, pattern=r"^https?://[^\s/?#]+[^\s]*$"),
                     AfterValidator(_endpoint)]
Region = Annotated[str, StringConstraints(pattern=r"^[a-z0-9-]{1,64}$")]
AddressingStyle = Literal["path", "virtual", "auto"]
Profile = Literal["aws", "seaweedfs"]
RemoteIdPath = Annotated[int, Path(ge=1, le=2**63 - 1)]
BucketPath = Annotated[str, Path(pattern=BUCKET_PATTERN)]
BucketQuery = Annotated[str | None, Query(pattern=BUCKET_PATTERN)]


class RemoteCreate(Model):
    name: Name
    endpoint: Endpoint
    region: Region = "us-east-1"
    access_key: Text | None = None
    secret_key: Text | None = None
    addressing_style: AddressingStyle = "path"
    verify_tls: bool = True
    profile: Profile = "seaweedfs"


class RemoteUpdate(Model):
    """Fields left out are unchanged."""

    name: Name | None = None
    endpoint: Endpoint | None = None
    region: Region | None = None
    access_key: Text | None = None
    secret_key: Text | None = None
    addressing_style: AddressingStyle | None = None
    verify_tls: bool | None = None
    profile: Profile | None = None


class RemoteOut(Out):
    id: int
    name: str
    endpoint: str
    region: str
    access_key: str | None
    has_secret: bool
    addressing_style: str
    verify_tls: bool
    profile: str
    created_at: float


class CheckOut(Out):
    ok: bool
    latency_ms: float | None
    error: str | None
    detail: str | None
    endpoint: str | None


class DefaultRemoteOut(Out):
    endpoint: str | None
    region: str
    addressing_style: str
    access_key: str | None
    profile: str
    check: CheckOut


class MappingIn(Model):
    remote_id: int = Field(ge=1, le=2**63 - 1)
    remote_bucket: BucketName


class MappingOut(Out):
    bucket: str
    remote_id: int
    remote_name: str
    remote_bucket: str
    created_at: float


def _out(info: RemoteInfo) -> RemoteOut:
    return RemoteOut(id=info.id, name=info.name, endpoint=info.endpoint, region=info.region,
                     access_key=info.access_key, has_secret=bool(info.secret_key),
                     addressing_style=info.addressing_style, verify_tls=info.verify_tls, profile=info.profile,
                     created_at=info.created_at)


def _check_out(result: CheckResult, endpoint: str | None) -> CheckOut:
    return CheckOut(ok=result.ok, latency_ms=result.latency_ms, error=None if result.ok else result.detail,
                    detail=result.detail if result.ok else None, endpoint=endpoint)


def router(container: Container, auth: Authenticator) -> APIRouter:
    repo = container.admin.remotes
    checks = container.admin.remote_checks
    settings = container.settings
    api = APIRouter(prefix="/admin", tags=["remotes"])

    async def changed() -> None:
        """This process routes by the change at once; the answer waits until every other
        process (each checks the catalog's routing generation at most an interval old) does too."""
        await run(container.remote.refresh)
        await asyncio.sleep(container.remote.settle_seconds())

    @api.get("/remote", response_model=DefaultRemoteOut, dependencies=auth.read())
    async def default_remote(bucket: BucketQuery = None) -> DefaultRemoteOut:
        """The remote from settings (every unmapped bucket's), with a live check."""
        cfg = checks.default
        return DefaultRemoteOut(endpoint=cfg.endpoint, region=cfg.region, addressing_style=cfg.addressing_style,
                                access_key=cfg.access_key, profile=settings.remote_profile,
                                check=_check_out(await checks.check_default(bucket), cfg.endpoint))

    @api.get("/remotes", response_model=list[RemoteOut], dependencies=auth.read())
    async def list_remotes() -> list[RemoteOut]:
        """Registered remotes (secrets are never returned)."""
        return [_out(r) for r in await run(repo.list)]

    @api.post("/remotes", response_model=RemoteOut, status_code=201, dependencies=auth.write())
    async def create_remote(body: RemoteCreate) -> RemoteOut:
        """Register a remote; buckets are routed to it by ``/admin/bucket-mappings``."""
        return _out(await run(repo.create, **body.model_dump()))

    @api.get("/remotes/{remote_id}", response_model=RemoteOut, dependencies=auth.read())
    async def get_remote(remote_id: RemoteIdPath) -> RemoteOut:
        return _out(await run(repo.get, remote_id))

    @api.patch("/remotes/{remote_id}", response_model=RemoteOut, dependencies=auth.write())
    async def update_remote(remote_id: RemoteIdPath, body: RemoteUpdate) -> RemoteOut:
        """Change a remote (e.g. rotate its keys): once answered, every process uses the new
        values for new requests, without a restart."""
        values = {k: v for k, v in body.model_dump(exclude_unset=True).items()
                  if v is not None or k in ("access_key", "secret_key")}
        out = _out(await run(repo.update, remote_id, **values))
        await changed()
        return out

    @api.delete("/remotes/{remote_id}", status_code=204, dependencies=auth.write())
    async def delete_remote(remote_id: RemoteIdPath) -> Response:
        """Refused (409) while a bucket mapping points at the remote."""
        await run(repo.delete, remote_id)
        await changed()
        return Response(status_code=204)

    @api.post("/remotes/{remote_id}/check", response_model=CheckOut, dependencies=auth.read())
    async def check(remote_id: RemoteIdPath, bucket: BucketQuery = None) -> CheckOut:
        """Connectivity check: ListBuckets, or HeadBucket of ``bucket``, bounded to a few seconds."""
        info = await run(repo.get, remote_id)
        return _check_out(await checks.check_registered(info, bucket), info.endpoint)

    _mapping_routes(api, repo, changed, auth)
    return api


def _mapping_routes(api: APIRouter, repo: RemoteRepo, changed: Callable[[], Awaitable[None]],
                    auth: Authenticator) -> None:
    @api.get("/bucket-mappings", response_model=list[MappingOut], dependencies=auth.read())
    async def list_mappings() -> list[MappingInfo]:
        """Buckets served from a registered remote (the others from the default remote)."""
        return await run(repo.list_mappings)

    @api.get("/bucket-mappings/{bucket}", response_model=MappingOut, dependencies=auth.read())
    async def get_mapping(bucket: BucketPath) -> MappingInfo:
        return await run(repo.get_mapping, bucket)

    @api.put("/bucket-mappings/{bucket}", response_model=MappingOut, dependencies=auth.write())
    async def put_mapping(bucket: BucketPath, body: MappingIn, response: Response) -> MappingInfo:
        """Map a gateway bucket to a registered remote's bucket (201 when new). Once answered, its
        requests and destages (buffered writes included) go there on every node."""
        info, created = await run(repo.put_mapping, bucket, body.remote_id, body.remote_bucket)
        await changed()
        response.status_code = 201 if created else 200
        return info

    @api.delete("/bucket-mappings/{bucket}", status_code=204, dependencies=auth.write())
    async def delete_mapping(bucket: BucketPath) -> Response:
        await run(repo.delete_mapping, bucket)
        await changed()
        return Response(status_code=204)
