"""Settings: environment (``FERRY_*``), an optional TOML/JSON config file, validated at start.

Precedence: explicit overrides (CLI flags) > environment > config file > defaults. A bad value
stops the process with a message naming the setting, instead of failing on the first request.
"""

from __future__ import annotations

import json
import os
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.domain import units

# Settings in seconds: each also takes a unit (30s, 5m, 2h, 7d, 250ms).
DURATION_FIELDS = (
    "remote_connect_timeout", "remote_read_timeout", "remote_request_deadline", "tenancy_refresh_seconds", "ready_cache_seconds",
    "multipart_expiry", "body_read_timeout", "body_min_rate_window", "http_keep_alive_timeout", "http_header_timeout",
    "journal_retention_seconds", "cache_ttl_seconds", "cache_revalidate_interval", "policy_refresh_seconds",
    "node_heartbeat_seconds", "node_stale_seconds", "destage_lease_seconds", "destage_backoff_base",
    "destage_backoff_cap", "sweep_interval", "fleet_clock_skew_seconds", "fleet_peer_timeout",
    "remote_refresh_seconds", "destage_time_limit",
    "remote_upload_sweep_interval", "remote_upload_grace",
)
WriteMode = Literal["write-back", "write-through", "read-only", "bypass"]


class ConfigError(Exception):
    """Raised when settings cannot be loaded; the message is meant for the operator."""


class Settings(BaseSettings):
    """Everything a node needs to start. See docs/configuration.md for each setting."""

    model_config = SettingsConfigDict(env_prefix="FERRY_", extra="forbid", validate_default=True)

    host: str = "127.0.0.1"
    port: int = Field(9000, ge=0, le=65535)
    workers: int = Field(1, ge=1, le=256)
    data_dir: Path = Path("./var/ferry")
    database_url: str | None = None
    broker_url: str | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    log_json: bool = False
    log_level: str = "info"
    zero_copy: bool = True  # cache hits sent by the kernel (sendfile) on plain-HTTP connections

    region: str = "us-east-1"
    domain: str | None = Field(None, description="Base domain for virtual-hosted-style requests.")
    max_clock_skew_seconds: int = Field(900, ge=1)

    remote_endpoint: str | None = None
    remote_region: str = "us-east-1"
    remote_access_key: str | None = None
    remote_secret_key: str | None = None
    remote_addressing_style: Literal["path", "virtual", "auto"] = "path"
    remote_max_connections: int = Field(64, ge=1)
    remote_connect_timeout: float = Field(3.0, gt=0)
    # Seconds without a byte from the remote before an attempt fails: a hung remote (accepting, never
    # answering) costs a request about max_attempts x this, so keep both small.
    remote_read_timeout: float = Field(10.0, gt=0)
    remote_max_attempts: int = Field(2, ge=1)  # attempts per remote call, the first included
    # No new attempt of a remote call starts after this many seconds (the lean GET's retry loop).
    remote_deadline: float = Field(15.0, gt=0)
    # The circuit opens after this many consecutive remote calls without an answer; while open,
    # calls fail at once (503) and one probe goes through every remote_circuit_cooldown seconds.
    # A read that needs the remote (GET, HEAD, LIST, HeadBucket...) answers 503 ServiceUnavailable
    # with Retry-After once this many seconds passed without its answer's headers, whatever the
    # remote calls it made; the calls finish in the background (and may still fill the cache).
    remote_request_deadline: float = Field(5.0, ge=0, description="0 = none.")
    remote_circuit_failures: int = Field(1, ge=1)
    remote_circuit_cooldown: float = Field(5.0, gt=0)
    remote_verify_tls: bool = True
    # UploadPart (eager part copies, the multipart destage) as a raw signed UNSIGNED-PAYLOAD request
    # with sendfile, where the remote is plain HTTP without a proxy (app/adapters/remote/put.py).
    remote_raw_writes: bool = True
    # Capability profile of the settings' remote (app/domain/profiles.py): "seaweedfs" refuses
    # keys a filesystem-backed store would rename or lose (today's checks); "aws" accepts every
    # key AWS S3 accepts.
    remote_profile: Literal["aws", "seaweedfs"] = "seaweedfs"
    # Registered remotes and bucket mappings (admin API) are re-read at most this often by every
    # process: a mapping or rotated credentials take effect within it, without a restart.
    remote_refresh_seconds: float = Field(2.0, gt=0)
    # With no endpoint and no keys, `ferry serve` refuses to start unless this allows AWS S3 through
    # the AWS default credential chain (environment, profile, instance role).
    remote_default_chain: bool = False

    access_key: str | None = None
    secret_key: str | None = None
    admin_token: str | None = None
    # isolated: a tenant's keys reach only its buckets (unowned ones belong to the bootstrap tenant);
    # shared: every tenant reaches every bucket (tenants are labels).
    tenancy: Literal["isolated", "shared"] = "isolated"
    tenancy_refresh_seconds: float = Field(2.0, gt=0)
    metrics_public: bool = False  # /metrics without the admin token (it names buckets and tenants)
    # The local read socket in the data directory: ``ferry mount`` on this node reads cached bytes
    # through descriptors of the cache blocks instead of loopback HTTP (app/server/local_reads.py).
    local_reads: bool = True
    ready_cache_seconds: float = Field(5.0, ge=0)  # /readyz reuses its remote/broker checks this long
    # /readyz fails when the data dir's disk has less free space than either bound.
    ready_min_free_bytes: int = Field(1024**3, ge=0)
    ready_min_free_ratio: float = Field(0.05, ge=0, le=1)

    default_mode: WriteMode = "write-back"
    multipart_part_size: int = Field(16 * 1024 * 1024, ge=5 * 1024 * 1024)
    multipart_concurrency: int = Field(8, ge=1, le=64)
    multipart_threshold: int = Field(64 * 1024 * 1024, ge=5 * 1024 * 1024)
    eager_part_copy: bool = Field(True, description="Copy multipart parts to the remote as they arrive.")
    # Eager part copies give way to acknowledgements (services/multipart/copy_admission.py): while a write is
    # being acknowledged at most this many copies run (0: none); once none is, or once the parts
    # waiting for their copy exceed eager_copy_backlog_mib (0: always, the old eager behaviour),
    # up to multipart_concurrency run. bench/analysis.md measures the trade (ack vs remote-holds).
    eager_copy_busy_limit: int = Field(1, ge=0, le=64)
    eager_copy_backlog_mib: int = Field(64, ge=0)
    multipart_expiry: float = Field(7 * 86400.0, gt=0,
                                    description="Seconds after which an upload never completed is aborted.")
    remote_upload_sweep_interval: float = Field(
        3600.0, ge=0, description="Seconds between sweeps of leaked remote multipart uploads; 0 turns it off.")
    # Longer than FERRY_MULTIPART_EXPIRY by default: gateways with separate catalogs on one remote
    # do not see each other's uploads, and no upload of theirs stays open that long.
    remote_upload_grace: float = Field(
        8 * 86400.0, gt=0,
        description="Age after which a remote multipart upload no upload or journal row owns is aborted.")
    write_buffer_bytes: int = Field(64 * 1024**3, ge=1)
    # One tenant's bodies in flight (per process): a share of the write buffer, a number of uploads.
    tenant_buffer_share: float = Field(0.25, gt=0, le=1)
    tenant_max_uploads: int = Field(64, ge=0, description="0 = unbounded.")
    # The data dir's disk keeps this much free (the larger of the two): writes get SlowDown and
    # the read cache stops filling before it is reached.
    disk_reserve_bytes: int = Field(1024**3, ge=0)
    disk_reserve_ratio: float = Field(0.05, ge=0, lt=1)
    # Connections: no body bytes for this long ends the request (RequestTimeout); idle keep-alive
    # connections close after timeout_keep_alive; past limit_concurrency uvicorn answers 503.
    body_read_timeout: float = Field(20.0, gt=0)
    # A body sent slower than body_min_rate bytes/s, over body_min_rate_window seconds spent waiting
    # for it, ends the request (RequestTimeout) and its connection: slow-loris bodies. 0 = off.
    body_min_rate: int = Field(1024, ge=0)
    body_min_rate_window: float = Field(30.0, ge=0)
    http_keep_alive_timeout: float = Field(75.0, gt=0)
    http_header_timeout: float = Field(30.0, ge=0, description="0 = unbounded.")
    http_limit_concurrency: int = Field(2048, ge=0, description="Per worker process; 0 = unbounded.")
    # A request's header section (request line included) and its number of fields: past either,
    # 400 RequestHeaderSectionTooLarge before anything is authenticated (app/server/headers.py).
    http_max_header_bytes: int = Field(64 * 1024, ge=0, description="0 = unbounded.")
    http_max_headers: int = Field(256, ge=0, description="0 = unbounded.")
    # Durable and superseded journal rows older than this are deleted by the sweeper.
    journal_retention_seconds: float = Field(7 * 24 * 3600.0, ge=0)
    # Default (unset): a share of the data dir's filesystem, computed at load (app/domain/cache_budget.py).
    cache_bytes: int = Field(0, ge=0, description="Budget of the data directory: cached + dirty bytes.")
    cache_block_bytes: int = Field(8 * 1024 * 1024, ge=64 * 1024, le=1024**3)
    cache_fetch_concurrency: int = Field(16, ge=1, le=256)
    cache_revalidate: Literal["immutable", "ttl", "always"] = "ttl"
    cache_ttl_seconds: float = Field(300.0, ge=0)
    cache_serve_stale: bool = False
    cache_admission: Literal["frequency", "always", "second-hit"] = "frequency"
    cache_prefetch: Literal["sequential", "prefix", "off"] = "sequential"
    cache_prefetch_bytes: int = Field(256 * 1024 * 1024, ge=0, description="Bytes fetched ahead of one sequential reader.")
    cache_prefetch_parallel: int = Field(16, ge=1, le=256)
    cache_revalidate_interval: float = Field(60.0, ge=0, description="Bulk revalidation period; 0 = off.")
    policies: list[dict[str, Any]] = Field(default_factory=list,
                                           description="Policy rules seeded into the catalog at start.")
    policy_refresh_seconds: float = Field(1.0, gt=0)
    fsync: bool = True

    # Names the node's queue and rows. Defaults to the hostname only for a node alone with its
    # SQLite catalog; a broker or a shared catalog requires an explicit one (require_node_id).
    node_id: str = Field(default_factory=lambda: __import__("socket").gethostname(),
                         min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    node_heartbeat_seconds: float = Field(5.0, gt=0)
    node_stale_seconds: float = Field(30.0, gt=0)
    # Fleet (docs/fleet.md): the internal endpoint peers read blocks from. 0 = off (a node alone).
    fleet_port: int = Field(0, ge=0, le=65535)
    fleet_host: str | None = None  # listen address of the internal endpoint; default: FERRY_HOST
    # host:port the other nodes reach the internal endpoint at; default: fleet_host:fleet_port
    # (the hostname when fleet_host is a wildcard).
    fleet_advertise: str | None = None
    fleet_secret: str | None = None  # shared by every node: HMAC-SHA256 of every internal request
    fleet_clock_skew_seconds: float = Field(30.0, gt=0)  # a signed request older or newer: 403
    # A peer that does not accept within this many seconds is suspected and the remote is read;
    # once connected, a peer may take as long as a remote fetch (remote_deadline + remote_read_timeout).
    fleet_peer_timeout: float = Field(2.0, gt=0)
    # Reads of an object, all of whose blocks other nodes own, before this node keeps its own
    # copy: the earlier ones relay the owner's bytes or read its block by name (docs/fleet.md,
    # "Peer reads"). 1: every read keeps it. 3 since reads by name made a peer read cheap enough
    # that a copy kept at the second read cost more than it saved (docs/benchmarks.md).
    fleet_copy_reads: int = Field(3, ge=1, le=255)
    destage_workers: int = Field(4, ge=1, le=256)
    # Background work (destage, part copies ahead) yields to acknowledgements: it waits up to
    # this long for no write to be in flight before it starts (0: never waits), and runs in
    # threads this much nicer than the process (0: same priority). See services/destage/background.py.
    destage_yield_seconds: float = Field(0.05, ge=0, le=5)
    # A destage also waits until no write has been answered for destage_settle_seconds (a
    # sequential client's next write arrives a client turn after the last answer), at most
    # destage_settle_max_seconds after it was queued: the remote holds a write that much later
    # while writes keep arriving (0: no settling). See services/destage/background.py.
    destage_settle_seconds: float = Field(0.02, ge=0, le=1)
    destage_settle_max_seconds: float = Field(1.0, ge=0, le=10)
    background_nice: int = Field(10, ge=0, le=19)
    # A write-back body of at most this many bytes is kept in its journal row (SQLite journal
    # only): the row's commit is then the write's only fsync. 0 stores every body as a file.
    # At most 256 KiB (bodies that size are received in memory).
    inline_body_max_bytes: int = Field(64 * 1024, ge=0, le=256 * 1024)
    destage_lease_seconds: float = Field(30.0, gt=1)
    destage_max_attempts: int = Field(12, ge=1)
    destage_backoff_base: float = Field(1.0, gt=0)
    destage_backoff_cap: float = Field(300.0, gt=0)
    sweep_interval: float = Field(2.0, gt=0)
    # Celery (fleet mode): a destage task is interrupted (soft limit, the row goes back to
    # buffered) after this long and killed 2 leases later; the broker redelivers an unacked
    # message only after both (app/taskqueue.py: visibility_timeout).
    destage_time_limit: float = Field(3600.0, gt=0)
    # Each Celery worker serves its own /metrics on this port (0: none), see workers/metrics.py.
    worker_metrics_port: int = Field(0, ge=0, le=65535)
    worker_metrics_host: str = "0.0.0.0"

    @field_validator("write_buffer_bytes", "disk_reserve_bytes", "cache_bytes", "cache_block_bytes",
                     "ready_min_free_bytes", "multipart_part_size", "multipart_threshold", "http_max_header_bytes",
                     "body_min_rate", mode="before")
    @classmethod
    def _size_units(cls, value: Any) -> Any:
        """``100GiB`` in a variable or a file, as the CLI accepts it (app/domain/units.py)."""
        return units.parse_size(value) if isinstance(value, str) else value

    @field_validator(*DURATION_FIELDS, mode="before")
    @classmethod
    def _duration_units(cls, value: Any) -> Any:
        return units.parse_duration(value) if isinstance(value, str) else value

    @field_validator("remote_endpoint")
    @classmethod
    def _endpoint_is_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/") if value else value

    @model_validator(mode="after")
    def _tls_pair(self) -> Settings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("FERRY_TLS_CERT and FERRY_TLS_KEY must be set together")
        if (self.access_key is None) != (self.secret_key is None):
            raise ValueError("FERRY_ACCESS_KEY and FERRY_SECRET_KEY must be set together")
        return self

    @model_validator(mode="after")
    def _default_cache_budget(self) -> Settings:
        """Unset FERRY_CACHE_BYTES: a share of what the data dir's filesystem can give (no budget
        larger than the disk); ``ferry serve`` exports it, so its workers agree on one number."""
        if "cache_bytes" not in self.model_fields_set:
            from app.disk_room import measure
            from app.domain.cache_budget import default_cache_bytes

            room = measure(self.data_dir)
            self.cache_bytes = default_cache_bytes(room.total, room.free, room.held, self.disk_reserve_bytes,
                                                   self.disk_reserve_ratio)
        return self

    @model_validator(mode="after")
    def _node_timing(self) -> Settings:
        if self.node_stale_seconds <= self.node_heartbeat_seconds:
            raise ValueError("FERRY_NODE_STALE_SECONDS must exceed FERRY_NODE_HEARTBEAT_SECONDS")
        return self

    def require_node_id(self) -> None:
        """Refuse a defaulted (hostname) node id where the id routes work or owns shared rows.

        Called by the processes of a node (``ferry serve``, the Celery worker and beat), not by
        ``ferry db upgrade``, which needs no identity."""
        if "node_id" in self.model_fields_set:
            return
        if self.broker_url:
            raise ConfigError("FERRY_NODE_ID must be set explicitly when FERRY_BROKER_URL is set: the gateway, "
                              "its Celery worker and beat route destage work by it (the same value in all three)")
        if self.database_url and not self.database_url.startswith("sqlite"):
            raise ConfigError("FERRY_NODE_ID must be set explicitly with a shared catalog (FERRY_DATABASE_URL): "
                              "rows are this node's by its id, and a hostname is neither unique nor stable")

    def require_fleet(self) -> None:
        """Refuse fleet mode (an internal port) without its secret or without a shared catalog:
        unsigned peers could read every cached byte, and peers know each other only through it."""
        if not self.fleet_port:
            return
        if not self.fleet_secret or len(self.fleet_secret) < 16:
            raise ConfigError("FERRY_FLEET_PORT is set: FERRY_FLEET_SECRET (at least 16 characters, the same "
                              "on every node) must be set too; it signs every request of the internal endpoint")
        if not self.database_url or self.database_url.startswith("sqlite"):
            raise ConfigError("FERRY_FLEET_PORT is set: a fleet needs a shared catalog (FERRY_DATABASE_URL, "
                              "PostgreSQL), where its nodes find each other")

    @property
    def fleet_address(self) -> str:
        """host:port the peers reach this node's internal endpoint at ('' when it has none)."""
        if not self.fleet_port:
            return ""
        if self.fleet_advertise:
            return self.fleet_advertise
        host = self.fleet_host or self.host
        if host in ("0.0.0.0", "::", ""):
            host = __import__("socket").gethostname()
        return f"{host}:{self.fleet_port}"

    def require_remote(self) -> None:
        """Refuse a node with no remote at all, unless the AWS default chain is asked for: it
        would start, then fail every miss and destage with "Unable to locate credentials"."""
        if self.remote_endpoint or self.remote_access_key or self.remote_default_chain:
            return
        raise ConfigError("no remote configured: set FERRY_REMOTE_ENDPOINT and FERRY_REMOTE_ACCESS_KEY/"
                          "FERRY_REMOTE_SECRET_KEY, or FERRY_REMOTE_DEFAULT_CHAIN=true for AWS S3 with the "
                          "AWS default credential chain (check with `ferry doctor`)")

    @property
    def destage_takeover_grace(self) -> float:
        """Seconds after a destage lease ends before another worker may take its row: the longest
        a write request of the old holder can still be at the remote once its lease is over (no
        request starts and no body is read after it: connect, the last body send, the answer;
        app/domain/fencing.py), plus a second for clock steps and the catalog's commit."""
        return self.remote_connect_timeout + 2 * self.remote_read_timeout + 1.0

    @property
    def effective_database_url(self) -> str:
        """SQLite file in the data dir unless a URL is given."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'ferry.db').resolve()}"

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert else "http"


def _read_config_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"config file {path} is not valid: {exc}") from exc
    section = data.get("ferry", data)
    if not isinstance(section, dict):
        raise ConfigError(f"config file {path}: expected a table of settings")
    return {str(k).replace("-", "_"): v for k, v in section.items()}


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Build settings; the file's values sit below the environment's."""
    path = config_file or (Path(os.environ["FERRY_CONFIG"]) if os.environ.get("FERRY_CONFIG") else None)
    file_values = _read_config_file(path) if path else {}
    env_names = {k[len("FERRY_") :].lower() for k in os.environ if k.startswith("FERRY_")}
    merged = {k: v for k, v in file_values.items() if k not in env_names}
    merged.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return Settings(**merged)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            name = ".".join(str(p) for p in err["loc"]) or "settings"
            env = f"FERRY_{name.upper()}" if name != "settings" else "settings"
            lines.append(f"  {env}: {err['msg']}")
        raise ConfigError("invalid configuration:\n" + "\n".join(lines)) from exc


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Process-wide settings (tests call ``get_settings.cache_clear()`` to override)."""
    return load_settings()


def redact_url(url: str) -> str:
    """A database or broker URL as it may be printed: the password replaced by ``***``."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':')[0]}:***@{host}"
    return url
