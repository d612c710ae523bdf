"""Composition root: builds the adapters and services from settings, in one place.

Tests build their own container (a different remote, a fault-injecting one, Celery instead of
the in-process executor) by calling ``build`` with other settings or parts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy.exc import IntegrityError

from app.adapters.blobstore import BlobStore
from app.adapters.catalog.engine import make_engine
from app.adapters.catalog.repo import Catalog
from app.adapters.remote import RemoteConfig, RemoteStore
from app.config import Settings
from app.services.gateway import Gateway

log = logging.getLogger("ferry")

BOOTSTRAP_TENANT = "default"


@dataclass
class Container:
    settings: Settings
    catalog: Catalog
    blobs: BlobStore
    remote: RemoteStore
    gateway: Gateway


def remote_config(settings: Settings) -> RemoteConfig:
    return RemoteConfig(
        endpoint=settings.remote_endpoint,
        region=settings.remote_region,
        access_key=settings.remote_access_key,
        secret_key=settings.remote_secret_key,
        addressing_style=settings.remote_addressing_style,
        max_connections=settings.remote_max_connections,
        connect_timeout=settings.remote_connect_timeout,
        read_timeout=settings.remote_read_timeout,
        verify_tls=settings.remote_verify_tls,
    )


def ensure_bootstrap_key(catalog: Catalog, settings: Settings) -> None:
    """Create the FERRY_ACCESS_KEY tenant key on first start (several workers may race)."""
    if not settings.access_key or not settings.secret_key:
        return
    for attempt in range(3):
        try:
            catalog.ensure_tenant_key(BOOTSTRAP_TENANT, settings.access_key, settings.secret_key)
            return
        except IntegrityError:
            if attempt == 2:
                raise


def build(settings: Settings) -> Container:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.effective_database_url)
    catalog = Catalog(engine)
    blobs = BlobStore(settings.data_dir, fsync=settings.fsync)
    remote = RemoteStore(remote_config(settings))
    gateway = Gateway(catalog, blobs, remote, region=settings.region,
                      part_concurrency=settings.multipart_concurrency)
    ensure_bootstrap_key(catalog, settings)
    return Container(settings, catalog, blobs, remote, gateway)
