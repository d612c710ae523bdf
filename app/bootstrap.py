"""Composition root: builds the adapters and services from settings, in one place.

Tests build their own container (a different remote, a fault-injecting one, Celery instead of
the in-process executor) by calling ``build`` with other settings or parts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError

from app.adapters.catalog.cache.index import CacheIndex
from app.adapters.catalog.cache.usage import CacheUsageQueries
from app.adapters.catalog.control.nodes import NodeDirectory
from app.adapters.catalog.control.owners import OwnerRepo
from app.adapters.catalog.control.policies import PolicyRepo
from app.adapters.catalog.control.remotes import RemoteRepo
from app.adapters.catalog.control.staging import StagingRepo
from app.adapters.catalog.control.tenants import TenantRepo
from app.adapters.catalog.control.tokens import TokenRepo
from app.adapters.catalog.engine import make_engine
from app.adapters.catalog.journal.journal import Journal
from app.adapters.catalog.journal.queries import JournalQueries
from app.adapters.catalog.journal.replicas import ReplicaRepo
from app.adapters.catalog.repo import Catalog
from app.adapters.catalog.stats import CatalogStats
from app.adapters.catalog.uploads.part_claims import PartClaims
from app.adapters.catalog.uploads.remote_uploads import OwnedRemoteUploads
from app.adapters.local.blobstore import BlobStore
from app.adapters.local.cachestore import CacheStore
from app.adapters.remote import RemoteConfig, RemoteStore
from app.adapters.remote.router import RemoteRouter
from app.config import Settings
from app.domain.policy import Policy, PolicyRule
from app.domain.profiles import profile_named
from app.fleet.journal_client import PeerJournal
from app.fleet.membership import Membership
from app.fleet.peer_client import PeerBlockSource
from app.fleet.peer_server import PeerServer
from app.schedule import chore_intervals
from app.services.cache import ReadCache
from app.services.cache.fill import RemoteBlockSource
from app.services.control.chores import ChoreLoop, ChoreParts, Scope
from app.services.control.policies import PolicyBook
from app.services.control.probes import RemoteChecks
from app.services.control.staging import CeleryStagingExecutor, EmbeddedStagingExecutor, StagingParts, StagingService
from app.services.control.tenancy import Tenancy
from app.services.core import GatewayCore
from app.services.destage.background import AckGate
from app.services.destage.destager import Destager
from app.services.destage.durability import Durability
from app.services.destage.executor import CeleryExecutor, EmbeddedExecutor
from app.services.destage.remote_uploads import RemoteUploadSweep
from app.services.destage.replicas import ReplicaKeeper
from app.services.gateway import Gateway
from app.services.multipart.expiry import UploadExpiry
from app.services.multipart.part_copies import PartCopies
from app.services.writes.budget import DiskReserve, WriteBudget

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
    remote_checks: RemoteChecks


@dataclass
class FleetParts:
    """Fleet mode (FERRY_FLEET_PORT): who is live, and the internal endpoint peers read from."""

    membership: Membership
    source: PeerBlockSource  # the read cache's block source: the owner, else the remote
    server: PeerServer  # the internal endpoint's ASGI app (app/fleet/listener.py serves it)
    host: str
    port: int


@dataclass
class Container:
    settings: Settings
    catalog: Catalog
    blobs: BlobStore
    remote: RemoteRouter  # every bucket's remote (mapped or the settings' default)
    journal: Journal
    destager: Destager
    executor: EmbeddedExecutor | CeleryExecutor
    gateway: Gateway
    policy_repo: PolicyRepo
    policies: PolicyBook
    cache: ReadCache
    staging: StagingService  # the admin API's warm-up jobs
    upload_expiry: UploadExpiry
    admin: AdminParts
    chore_parts: ChoreParts  # what every chore runs on (in-process or in a Celery worker)
    chores: ChoreLoop  # the chores this process runs itself (all of them in embedded mode)
    fleet: FleetParts | None = None
    replicas: ReplicaKeeper | None = None  # fleet: copies of other nodes' writes, takeover (sweeper)
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
        raw_writes=settings.remote_raw_writes,
    )


def make_remote(settings: Settings, engine: Engine | None) -> RemoteRouter:
    """The default remote from settings, and the registered remotes the bucket mappings route
    to (re-read every FERRY_REMOTE_REFRESH_SECONDS: a rotated key applies without a restart)."""
    cfg = remote_config(settings)
    return RemoteRouter(RemoteStore(cfg), profile_named(settings.remote_profile),
                        RemoteRepo(engine) if engine is not None else None, cfg,
                        refresh_seconds=settings.remote_refresh_seconds)


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


def make_destager(settings: Settings, journal: Journal, blobs: BlobStore, remote: RemoteRouter,
                  part_copies: PartCopies | None = None) -> Destager:
    return Destager(journal, blobs, remote, lease_seconds=settings.destage_lease_seconds,
                    max_attempts=settings.destage_max_attempts, part_concurrency=settings.multipart_concurrency,
                    backoff_base=settings.destage_backoff_base, backoff_cap=settings.destage_backoff_cap,
                    part_copies=part_copies)


def make_executor(settings: Settings, journal: Journal, destager: Destager,
                  acks: AckGate | None = None) -> EmbeddedExecutor | CeleryExecutor:
    """In-process unless a broker is configured; then destage runs in Celery workers."""
    if settings.broker_url:
        from app.taskqueue import destage_sender  # imports Celery only in fleet mode

        return CeleryExecutor(destage_sender())
    return EmbeddedExecutor(destager, journal, workers=settings.destage_workers, node_id=sweep_node(settings),
                            gate=acks, nice=settings.background_nice, settle=settings.destage_settle_seconds,
                            settle_max=settings.destage_settle_max_seconds)


def sweep_node(settings: Settings) -> str | None:
    """Whose rows the journal sweep hands on. A SQLite catalog in the data dir holds only this
    dir's rows, whatever node id wrote them (a hostname that changed): all of them; a shared
    catalog holds every node's, and the sweep takes its own."""
    return None if settings.effective_database_url.startswith("sqlite") else settings.node_id


def make_staging(settings: Settings, repo: StagingRepo, remote: RemoteRouter, gateway: Gateway) -> StagingService:
    """Warm-up jobs run in this process in embedded mode, in the node's Celery worker in fleet mode."""
    parts = StagingParts(repo, remote, gateway.warm_object, settings.node_id)
    if settings.broker_url:
        from app.taskqueue import staging_sender  # imports Celery only in fleet mode

        return StagingService(parts, CeleryStagingExecutor(staging_sender()))
    return StagingService(parts, EmbeddedStagingExecutor(parts))


def make_chores(settings: Settings, journal: Journal, cache: ReadCache, expiry: UploadExpiry,
                executor: EmbeddedExecutor | CeleryExecutor,
                replicas: ReplicaKeeper | None = None,
                remote_uploads: RemoteUploadSweep | None = None,
                staging: StagingParts | None = None) -> tuple[ChoreParts, ChoreLoop]:
    """Every chore in this process in embedded mode; in fleet mode the node's Celery worker runs
    the node and shared chores from its beat, and this process only its own (access times)."""
    parts = ChoreParts(journal, cache, expiry, executor.submit, chore_intervals(settings),
                       sweep_node=sweep_node(settings), replicas=replicas, remote_uploads=remote_uploads,
                       staging=staging)
    scopes: tuple[Scope, ...] = ("process",) if settings.broker_url else ("node", "shared", "process")
    return parts, ChoreLoop(parts, scopes)


def disk_reserve(settings: Settings) -> DiskReserve:
    return DiskReserve(settings.data_dir, settings.disk_reserve_bytes, settings.disk_reserve_ratio)


def default_policy(settings: Settings) -> Policy:
    return Policy(mode=settings.default_mode, revalidate=settings.cache_revalidate,
                  ttl_seconds=settings.cache_ttl_seconds, serve_stale=settings.cache_serve_stale,
                  admission=settings.cache_admission, prefetch=settings.cache_prefetch)


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


def make_membership(settings: Settings, engine: Engine) -> Membership:
    return Membership(NodeDirectory(engine), settings.node_id, settings.fleet_address,
                      stale_after=settings.node_stale_seconds, refresh_every=settings.node_heartbeat_seconds)


def make_fleet(settings: Settings, engine: Engine, remote: RemoteRouter) -> tuple[Membership, PeerBlockSource] | None:
    """The block source of fleet mode, or None for a node alone (no internal port)."""
    if not settings.fleet_port:
        return None
    settings.require_fleet()
    membership = make_membership(settings, engine)
    source = PeerBlockSource(remote, membership, settings.fleet_secret or "", settings.cache_block_bytes,
                             connect_timeout=settings.fleet_peer_timeout,
                             read_timeout=settings.remote_deadline + settings.remote_read_timeout)
    return membership, source


def relaxed_engine(settings: Settings, engine: Engine) -> Engine:
    """A file-backed SQLite catalog: its own connections, which commit without the WAL fsync
    (see make_engine), for rows a power cut may lose; any other catalog: the engine itself."""
    if engine.dialect.name == "sqlite" and engine.url.database not in (None, "", ":memory:"):
        return make_engine(settings.effective_database_url, synchronous="NORMAL")
    return engine


def make_cache(settings: Settings, engine: Engine, remote: RemoteRouter, policies: PolicyBook,
               journal: Journal, source: PeerBlockSource | None = None) -> ReadCache:
    engine = relaxed_engine(settings, engine)
    return ReadCache(CacheIndex(engine, settings.node_id), CacheStore(settings.data_dir), remote, policies,
                     source=source or RemoteBlockSource(remote), disk=disk_reserve(settings),
                     dirty_bytes=journal.dirty_bytes,
                     block_size=settings.cache_block_bytes, fetch_concurrency=settings.cache_fetch_concurrency,
                     budget_bytes=settings.cache_bytes, revalidate_interval=settings.cache_revalidate_interval,
                     prefetch_bytes=settings.cache_prefetch_bytes, prefetch_parallel=settings.cache_prefetch_parallel,
                     copy_reads=settings.fleet_copy_reads)


def make_tenancy(settings: Settings, engine: Engine, remote: RemoteRouter) -> Tenancy:
    """Bucket ownership; buckets without an owner belong to the bootstrap tenant."""
    return Tenancy(OwnerRepo(engine, BOOTSTRAP_TENANT), remote, shared=settings.tenancy == "shared",
                   refresh_seconds=settings.tenancy_refresh_seconds)


def make_admin_parts(settings: Settings, engine: Engine, staging: StagingRepo, journal: Journal,
                     executor: EmbeddedExecutor | CeleryExecutor) -> AdminParts:
    return AdminParts(tokens=TokenRepo(engine), owners=OwnerRepo(engine, BOOTSTRAP_TENANT), tenants=TenantRepo(engine),
                      remotes=RemoteRepo(engine), staging=staging, cache_usage=CacheUsageQueries(engine),
                      journal=JournalQueries(engine), stats=CatalogStats(engine, settings.node_id),
                      durability=Durability(journal, executor),
                      remote_checks=RemoteChecks(remote_config(settings)))


def make_replicas(settings: Settings, engine: Engine, blobs: BlobStore, journal: Journal,
                  executor: EmbeddedExecutor | CeleryExecutor) -> ReplicaKeeper | None:
    """Only a shared catalog has other nodes whose writes this one may hold or take over."""
    if engine.dialect.name == "sqlite":
        return None
    return ReplicaKeeper(ReplicaRepo(engine, settings.node_id), blobs, executor.submit, settings.node_stale_seconds,
                         referenced=journal.blobs_referenced)


def build(settings: Settings) -> Container:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.effective_database_url)
    catalog = Catalog(engine, settings.node_id)
    blobs = BlobStore(settings.data_dir, fsync=settings.fsync)
    remote = make_remote(settings, engine)
    # The takeover grace covers a shared catalog that stops answering while a holder's requests
    # are in flight (PostgreSQL restarting). A SQLite journal is a local file of one data
    # directory's owner: no outage lapses its leases, so a dead worker's rows come back at once.
    grace = settings.destage_takeover_grace if engine.dialect.name == "postgresql" else 0.0
    journal = Journal(engine, settings.node_id, bookkeeping=relaxed_engine(settings, engine),
                      takeover_grace=grace)
    # Parts on their way to the remote, which the destage waits for: claimed in the catalog, so
    # every worker process (--workers N, Celery) sees the copies of the others.
    part_claims = PartClaims(engine, settings.node_id)
    part_copies = PartCopies(part_claims)
    destager = make_destager(settings, journal, blobs, remote, part_copies)
    acks = AckGate(max_wait=settings.destage_yield_seconds)  # destage gives way to acknowledgements
    executor = make_executor(settings, journal, destager, acks)
    policy_repo = PolicyRepo(engine)
    seed_policies(policy_repo, settings)
    policies = PolicyBook(policy_repo, default_policy(settings), refresh_seconds=settings.policy_refresh_seconds)
    fleet = make_fleet(settings, engine, remote)
    cache = make_cache(settings, engine, remote, policies, journal, fleet[1] if fleet else None)
    core = GatewayCore(catalog, blobs, remote, region=settings.region,
                       part_concurrency=settings.multipart_concurrency, journal=journal, executor=executor,
                       mode=settings.default_mode, buffer_bytes=settings.write_buffer_bytes, destager=destager,
                       cache=cache, policies=policies, inline_lookups=engine.dialect.name == "sqlite",
                       eager_parts=settings.eager_part_copy, part_copies=part_copies,
                       tenancy=make_tenancy(settings, engine, remote),
                       budget=WriteBudget(settings.write_buffer_bytes, tenant_share=settings.tenant_buffer_share,
                                          tenant_uploads=settings.tenant_max_uploads),
                       disk=disk_reserve(settings), acks=acks, background_nice=settings.background_nice, takeover_grace=grace,
                       inline_max=settings.inline_body_max_bytes if engine.dialect.name == "sqlite" else 0,
                       copy_busy_limit=settings.eager_copy_busy_limit,
                       copy_backlog_bytes=settings.eager_copy_backlog_mib * 1024**2,
                       peers=PeerJournal(fleet[0], settings.fleet_secret or "", timeout=settings.fleet_peer_timeout)
                       if fleet else None)
    gateway = Gateway(core)
    ensure_bootstrap_key(catalog, settings)
    staging_repo = StagingRepo(engine)
    staging = make_staging(settings, staging_repo, remote, gateway)
    expiry = UploadExpiry(catalog, blobs, remote, settings.multipart_expiry, part_claims=part_claims,
                          part_copies=part_copies)
    replicas = make_replicas(settings, engine, blobs, journal, executor)
    leaked = RemoteUploadSweep(OwnedRemoteUploads(engine), remote, settings.remote_upload_sweep_interval,
                               settings.remote_upload_grace)
    chore_parts, chores = make_chores(settings, journal, cache, expiry, executor, replicas, leaked, staging.parts)
    return Container(settings, catalog, blobs, remote, journal, destager, executor, gateway,
                     policy_repo=policy_repo, policies=policies, staging=staging, cache=cache,
                     upload_expiry=expiry, replicas=replicas, remote_uploads=leaked,
                     admin=make_admin_parts(settings, engine, staging_repo, journal, executor),
                     chore_parts=chore_parts, chores=chores,
                     fleet=fleet and FleetParts(fleet[0], fleet[1], PeerServer(
                         cache, policies, settings.fleet_secret or "", settings.node_id,
                         skew=settings.fleet_clock_skew_seconds, writes=gateway, parts=gateway),
                         settings.fleet_host or settings.host,
                         settings.fleet_port))
