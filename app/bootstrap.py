"""Composition root: builds the adapters and services from settings, in one place.

Tests build their own container (a different remote, a fault-injecting one, Celery instead of
the in-process executor) by calling ``build`` with other settings or parts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError

from app.adapters.blobstore import BlobStore
from app.adapters.cachestore import CacheStore
from app.adapters.catalog.cache_index import CacheIndex
from app.adapters.catalog.cache_usage import CacheUsageQueries
from app.adapters.catalog.engine import make_engine
from app.adapters.catalog.journal import Journal
from app.adapters.catalog.journal_queries import JournalQueries
from app.adapters.catalog.owners import OwnerRepo
from app.adapters.catalog.policies import PolicyRepo
from app.adapters.catalog.remote_uploads import OwnedRemoteUploads
from app.adapters.catalog.remotes import RemoteRepo
from app.adapters.catalog.repo import Catalog
from app.adapters.catalog.staging import StagingRepo
from app.adapters.catalog.stats import CatalogStats
from app.adapters.catalog.tenants import TenantRepo
from app.adapters.catalog.tokens import TokenRepo
from app.adapters.remote import RemoteConfig, RemoteStore
from app.config import Settings
from app.domain.policy import Policy, PolicyRule
from app.services.budget import DiskReserve, WriteBudget
from app.services.destage import Destager
from app.services.durability import Durability
from app.services.executor import CeleryExecutor, EmbeddedExecutor
from app.services.gateway import Gateway
from app.services.partcopies import PartCopies
from app.services.policies import PolicyBook
from app.services.readcache import ReadCache
from app.services.remote_uploads import RemoteUploadSweep
from app.services.staging import StagingRunner
from app.services.tenancy import Tenancy
from app.services.upload_expiry import UploadExpiry

log = logging.getLogger("ferry")

BOOTSTRAP_TENANT = "default"


@dataclass(frozen=True)
class AdminParts:
    """What the admin routers read and change, built here so that routers build nothing."""

    tokens: TokenRepo
    owners: OwnerRepo
    tenants: TenantRepo
    remotes: RemoteRepo
    staging: StagingRepo
    cache_usage: CacheUsageQueries
    journal: JournalQueries
    stats: CatalogStats
    durability: Durability


@dataclass
class Container:
    settings: Settings
    catalog: Catalog
    blobs: BlobStore
    remote: RemoteStore
    journal: Journal
    destager: Destager
    executor: EmbeddedExecutor | CeleryExecutor
    gateway: Gateway
    policy_repo: PolicyRepo
    policies: PolicyBook
    cache: ReadCache
    staging: StagingRunner  # the admin API's warm-up jobs
    upload_expiry: UploadExpiry  # run by the journal sweeper (in-process or beat)
    admin: AdminParts
    remote_uploads: RemoteUploadSweep | None = None  # leaked remote uploads: the sweeper too


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
        max_attempts=settings.remote_max_attempts,
        deadline=settings.remote_deadline,
        circuit_failures=settings.remote_circuit_failures,
        circuit_cooldown=settings.remote_circuit_cooldown,
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


def make_destager(settings: Settings, journal: Journal, blobs: BlobStore, remote: RemoteStore,
                  part_copies: PartCopies | None = None) -> Destager:
    return Destager(journal, blobs, remote, lease_seconds=settings.destage_lease_seconds,
                    max_attempts=settings.destage_max_attempts, part_concurrency=settings.multipart_concurrency,
                    backoff_base=settings.destage_backoff_base, backoff_cap=settings.destage_backoff_cap,
                    part_copies=part_copies)


def make_executor(settings: Settings, journal: Journal, destager: Destager) -> EmbeddedExecutor | CeleryExecutor:
    """In-process unless a broker is configured; then destage runs in Celery workers."""
    if settings.broker_url:
        from app.taskqueue import destage_sender  # imports Celery only in fleet mode

        return CeleryExecutor(destage_sender())
    # A SQLite catalog in the data dir holds only this dir's rows, whatever node id wrote them
    # (a hostname that changed); a shared catalog holds every node's, and the sweep takes its own.
    shared = not settings.effective_database_url.startswith("sqlite")
    return EmbeddedExecutor(destager, journal, workers=settings.destage_workers,
                            sweep_interval=settings.sweep_interval, node_id=settings.node_id if shared else None,
                            retention_seconds=settings.journal_retention_seconds)


def disk_reserve(settings: Settings) -> DiskReserve:
    return DiskReserve(settings.data_dir, settings.disk_reserve_bytes, settings.disk_reserve_ratio)


def default_policy(settings: Settings) -> Policy:
    return Policy(mode=settings.default_mode, revalidate=settings.cache_revalidate,
                  ttl_seconds=settings.cache_ttl_seconds, serve_stale=settings.cache_serve_stale,
                  admission=settings.cache_admission)


def seed_policies(repo: PolicyRepo, settings: Settings) -> None:
    """Rules from the configuration (FERRY_POLICIES) are written to the catalog at start, where
    the admin API can change them; the catalog is what every process reads."""
    for raw in settings.policies:
        try:
            repo.upsert(PolicyRule(**raw))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"FERRY_POLICIES: invalid rule {raw!r}: {exc}") from exc
        except IntegrityError:
            pass  # another worker seeded it at the same moment


def make_cache(settings: Settings, engine: Engine, remote: RemoteStore, policies: PolicyBook,
               journal: Journal) -> ReadCache:
    if engine.dialect.name == "sqlite" and engine.url.database not in (None, "", ":memory:"):
        # Its own connections, which commit without the WAL fsync (see make_engine).
        engine = make_engine(settings.effective_database_url, synchronous="NORMAL")
    return ReadCache(CacheIndex(engine, settings.node_id), CacheStore(settings.data_dir), remote, policies,
                     block_size=settings.cache_block_bytes, fetch_concurrency=settings.cache_fetch_concurrency,
                     budget_bytes=settings.cache_bytes, dirty_bytes=journal.dirty_bytes,
                     revalidate_interval=settings.cache_revalidate_interval, disk=disk_reserve(settings))


def make_tenancy(settings: Settings, engine: Engine) -> Tenancy:
    """Bucket ownership; buckets without an owner belong to the bootstrap tenant."""
    return Tenancy(OwnerRepo(engine, BOOTSTRAP_TENANT), shared=settings.tenancy == "shared",
                   refresh_seconds=settings.tenancy_refresh_seconds)


def make_admin_parts(settings: Settings, engine: Engine, staging: StagingRepo, journal: Journal,
                     executor: EmbeddedExecutor | CeleryExecutor) -> AdminParts:
    return AdminParts(tokens=TokenRepo(engine), owners=OwnerRepo(engine, BOOTSTRAP_TENANT), tenants=TenantRepo(engine),
                      remotes=RemoteRepo(engine), staging=staging, cache_usage=CacheUsageQueries(engine),
                      journal=JournalQueries(engine), stats=CatalogStats(engine, settings.node_id),
                      durability=Durability(journal, executor))


def build(settings: Settings) -> Container:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.effective_database_url)
    catalog = Catalog(engine, settings.node_id)
    blobs = BlobStore(settings.data_dir, fsync=settings.fsync)
    remote = RemoteStore(remote_config(settings))
    journal = Journal(engine, settings.node_id)
    part_copies = PartCopies()  # parts on their way to the remote, which the destage waits for
    destager = make_destager(settings, journal, blobs, remote, part_copies)
    executor = make_executor(settings, journal, destager)
    policy_repo = PolicyRepo(engine)
    seed_policies(policy_repo, settings)
    policies = PolicyBook(policy_repo, default_policy(settings), refresh_seconds=settings.policy_refresh_seconds)
    cache = make_cache(settings, engine, remote, policies, journal)
    gateway = Gateway(catalog, blobs, remote, region=settings.region,
                      part_concurrency=settings.multipart_concurrency, journal=journal, executor=executor,
                      mode=settings.default_mode, buffer_bytes=settings.write_buffer_bytes, destager=destager,
                      cache=cache, policies=policies, inline_lookups=engine.dialect.name == "sqlite",
                      eager_parts=settings.eager_part_copy, part_copies=part_copies,
                      tenancy=make_tenancy(settings, engine),
                      budget=WriteBudget(settings.write_buffer_bytes, tenant_share=settings.tenant_buffer_share,
                                         tenant_uploads=settings.tenant_max_uploads),
                      disk=disk_reserve(settings))
    ensure_bootstrap_key(catalog, settings)
    staging_repo = StagingRepo(engine)
    staging = StagingRunner(staging_repo, remote, gateway, settings.node_id)
    expiry = UploadExpiry(catalog, blobs, remote, settings.multipart_expiry)
    leaked = RemoteUploadSweep(OwnedRemoteUploads(engine), remote, settings.remote_upload_sweep_interval,
                               settings.remote_upload_grace)
    if isinstance(executor, EmbeddedExecutor):
        executor.chores.append(expiry.sweep)
        executor.chores.append(leaked.sweep)
    return Container(settings, catalog, blobs, remote, journal, destager, executor, gateway,
                     policy_repo=policy_repo, policies=policies, staging=staging, cache=cache,
                     upload_expiry=expiry, remote_uploads=leaked,
                     admin=make_admin_parts(settings, engine, staging_repo, journal, executor))
