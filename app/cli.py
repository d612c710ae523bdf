"""``ferry`` command line: serve, db upgrade, version; admin commands from app/cli_admin/."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from app import __version__
from app.config import ConfigError, Settings, load_settings, redact_url

if TYPE_CHECKING:
    from app.adapters.catalog.control.nodes import NodeRegistry

cli = typer.Typer(help="Ferry: a write-accelerating S3 gateway.", no_args_is_help=True)
db_cli = typer.Typer(help="Catalog database.", no_args_is_help=True)
cli.add_typer(db_cli, name="db")

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="TOML or JSON settings file.")]


def _settings(config: Path | None, **overrides: object) -> Settings:
    try:
        return load_settings(config, **overrides)
    except ConfigError as exc:
        typer.echo(f"ferry: {exc}", err=True)
        raise typer.Exit(2) from exc


@cli.command()
def version() -> None:
    """Print the version."""
    typer.echo(f"ferry {__version__}")


@db_cli.command("upgrade")
def db_upgrade(config: ConfigOpt = None,
               database_url: Annotated[str | None, typer.Option(help="Overrides FERRY_DATABASE_URL.")] = None,
               revision: str = "head") -> None:
    """Apply catalog migrations up to REVISION."""
    from app.adapters.catalog.migrate import upgrade

    settings = _settings(config, database_url=database_url)
    if settings.database_url is None:  # the SQLite catalog lives in the data dir: its owner migrates it
        _own_data_dir(settings.data_dir)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.effective_database_url, revision)
    typer.echo(f"catalog at {revision}: {redact_url(settings.effective_database_url)}")


_OWNER: list[object] = []  # the data dir lock, held until the process exits


def _own_data_dir(data_dir: Path) -> None:
    """Take the data dir's owner lock (app/adapters/local/datadir.py) or exit 1 naming its holder."""
    from app.adapters.local.datadir import DataDirBusy, DataDirLock

    try:
        _OWNER.append(DataDirLock(data_dir).acquire())
    except DataDirBusy as exc:
        typer.echo(f"ferry: {exc}", err=True)
        raise typer.Exit(1) from exc


def _flag_help(name: str, what: str, unset: str = "none") -> str:
    """One line per flag: what it is, its variable and its default (from Settings). Parentheses,
    not brackets: rich takes ``[...]`` for markup and drops it."""
    default = Settings.model_fields[name].default
    return f"{what} (env FERRY_{name.upper()}, default: {unset if default is None else default})"


@cli.command()
def serve(
    config: ConfigOpt = None,
    host: Annotated[str | None, typer.Option(help=_flag_help("host", "Address to listen on."))] = None,
    port: Annotated[int | None, typer.Option(help=_flag_help("port", "S3 (and admin) port."))] = None,
    workers: Annotated[int | None, typer.Option(help=_flag_help("workers", "uvicorn worker processes."))] = None,
    data_dir: Annotated[Path | None, typer.Option(help=_flag_help(
        "data_dir", "Buffered writes, read cache, lock (one gateway per directory)."))] = None,
    database_url: Annotated[str | None, typer.Option(help=_flag_help(
        "database_url", "Catalog/journal database URL (PostgreSQL for a fleet).", "SQLite in the data dir"))] = None,
    remote_endpoint: Annotated[str | None, typer.Option(help=_flag_help(
        "remote_endpoint", "Remote S3 URL; unset means AWS S3 (needs keys or FERRY_REMOTE_DEFAULT_CHAIN).",
        "AWS S3"))] = None,
    tls_cert: Annotated[Path | None, typer.Option(help=_flag_help(
        "tls_cert", "PEM certificate: serve HTTPS (with --tls-key).", "none, plain HTTP"))] = None,
    tls_key: Annotated[Path | None, typer.Option(help=_flag_help("tls_key", "PEM private key of --tls-cert."))] = None,
    fleet_port: Annotated[int | None, typer.Option(help=_flag_help(
        "fleet_port", "Internal endpoint port for peer nodes (fleet mode; needs FERRY_FLEET_SECRET).",
        "0, off"))] = None,
    migrate: Annotated[bool, typer.Option(help="Apply catalog migrations before serving.")] = True,
) -> None:
    """Serve the S3 endpoint (and health/admin) with uvicorn."""
    overrides = dict(host=host, port=port, workers=workers, data_dir=data_dir, database_url=database_url,
                     remote_endpoint=remote_endpoint, tls_cert=tls_cert, tls_key=tls_key, fleet_port=fleet_port)
    settings = _settings(config, **overrides)
    try:
        settings.require_node_id()
        settings.require_remote()
        settings.require_fleet()
    except ConfigError as exc:
        typer.echo(f"ferry: {exc}", err=True)
        raise typer.Exit(2) from exc
    # Worker processes rebuild settings from the environment: hand them the flags that way.
    for name, value in overrides.items():
        if value is not None:
            os.environ[f"FERRY_{name.upper()}"] = str(value)
    if config is not None:
        os.environ["FERRY_CONFIG"] = str(config)
    os.environ.setdefault("FERRY_CACHE_BYTES", str(settings.cache_bytes))  # a computed default: one for all
    _own_data_dir(settings.data_dir)  # before anything in it is touched
    _prepare_metrics_dir(settings.data_dir)
    if migrate:
        from app.adapters.catalog.migrate import upgrade

        upgrade(settings.effective_database_url)
    registry = _register_node(settings)  # a live node with this id refuses us here
    _recover(settings)
    from app.logs import configure_logging

    configure_logging(settings.log_level, settings.log_json)
    typer.echo(f"ferry {__version__}: serving S3 on {settings.scheme}://{settings.host}:{settings.port} "
               f"-> remote {settings.remote_endpoint or '(AWS default)'}"
               + (f"; fleet node {settings.node_id}, internal endpoint {settings.fleet_address}"
                  if settings.fleet_port else ""), err=True)
    _exit_on_sigterm()
    try:
        _run_uvicorn(settings)
    finally:
        registry.leave()  # also when uvicorn could not bind its port


def _run_uvicorn(settings: Settings) -> None:
    """uvicorn with the worker processes, bounds and protocol the settings ask for."""
    import uvicorn

    from app.logs import uvicorn_log_config
    from app.server import connection_limit, http_protocol

    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        ssl_certfile=str(settings.tls_cert) if settings.tls_cert else None,
        ssl_keyfile=str(settings.tls_key) if settings.tls_key else None,
        log_level=settings.log_level,
        log_config=uvicorn_log_config(settings.log_level, settings.log_json),  # applied in every worker
        access_log=False,
        timeout_keep_alive=int(settings.http_keep_alive_timeout),  # idle connections between requests
        limit_concurrency=connection_limit(settings.http_limit_concurrency),  # connections + tasks, then 503
        # Without a bound, an idle TLS keep-alive connection (every SDK keeps some) holds a
        # graceful shutdown until the peer answers close_notify, i.e. until SIGKILL.
        timeout_graceful_shutdown=5,
        server_header=False,
        http=http_protocol(settings.zero_copy),  # httptools + the ASGI zerocopysend extension
    )


def _exit_on_sigterm() -> None:
    """uvicorn re-raises the SIGTERM it handled once it has shut down, under the handler found
    before it ran: exit through Python then, so ``finally`` blocks (leaving the node row) run
    instead of the signal's default action killing the process on the spot."""
    import signal

    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


def _recover(settings: Settings) -> None:
    """Crash recovery, once, under the data dir's lock, before any worker serves: bodies that
    never completed are garbage, and so are blobs stored by a write whose row never committed.
    (Committed dirty writes need nothing here: the sweeper finds them in the journal.)"""
    from app.adapters.catalog.engine import make_engine
    from app.adapters.catalog.journal.journal import Journal
    from app.adapters.catalog.repo import Catalog
    from app.adapters.local.blobstore import BlobStore

    engine = make_engine(settings.effective_database_url, pool_size=1)
    try:
        journal = Journal(engine, settings.node_id)
        dropped = BlobStore(settings.data_dir, fsync=settings.fsync).recover(journal.blobs_referenced)
        catalog = Catalog(engine, settings.node_id)
        catalog.release_claims_of_node()  # Completes killed mid-way
        catalog.release_key_claims_of_node()  # conditional writes killed mid-way
    finally:
        engine.dispose()
    if dropped:
        typer.echo(f"ferry: removed {dropped} incomplete upload(s) left by an earlier run", err=True)


def _register_node(settings: Settings) -> NodeRegistry:
    """Claim the node id in the catalog (refusing a live duplicate) and keep its heartbeat."""
    import threading

    from app.adapters.catalog.control.nodes import NodeIdInUse, NodeRegistry
    from app.adapters.catalog.engine import make_engine
    from app.adapters.local.datadir import data_dir_id

    registry = NodeRegistry(make_engine(settings.effective_database_url, pool_size=1), settings.node_id,
                            __version__, data_dir_id(settings.data_dir), settings.fleet_address)
    try:
        registry.register(settings.node_stale_seconds)
    except NodeIdInUse as exc:
        typer.echo(f"ferry: {exc}", err=True)
        raise typer.Exit(1) from exc
    threading.Thread(target=_heartbeat, args=(registry, settings.node_heartbeat_seconds),
                     name="ferry-node-heartbeat", daemon=True).start()
    return registry


def _heartbeat(registry: NodeRegistry, interval: float) -> None:
    """Beat until the process ends; a node whose id was taken over (presumed dead) stops serving."""
    import logging
    import signal
    import time

    log = logging.getLogger("ferry.node")
    while True:
        time.sleep(interval)
        try:
            alive = registry.heartbeat()
        except Exception:  # the catalog is unreachable: keep serving, beat again later
            log.warning("node heartbeat failed", exc_info=True)
            continue
        if not alive:
            log.error("node id %r was taken over by another instance; stopping", registry.node_id)
            os.kill(os.getpid(), signal.SIGTERM)
            return


def _prepare_metrics_dir(data_dir: Path) -> None:
    """prometheus_client's multiprocess mode, whatever the number of workers: each worker writes
    its samples to files here and /metrics adds them up. Set before any process imports
    prometheus_client (workers inherit the environment); emptied at start so counters begin at
    zero, as a single process's would. An operator's own PROMETHEUS_MULTIPROC_DIR is left alone."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return
    import shutil

    path = data_dir / "metrics"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path)


@cli.command()
def quickstart(
    data_dir: Annotated[Path, typer.Option(help="Where the remote region and the gateway keep data.")] = Path(
        "./var/quickstart"),
    port: Annotated[int, typer.Option(help="Gateway S3 port.")] = 9000,
    remote_port: Annotated[int, typer.Option(help="SeaweedFS S3 port (uses the next 4 and +10000 too).")] = 18333,
) -> None:
    """Start a local remote region (SeaweedFS) and a gateway in front of it; print how to use it."""
    from app.quickstart import run

    run(data_dir, port, remote_port)


@cli.command()
def mount(
    mountpoint: Annotated[Path, typer.Argument(help="An empty directory to mount on.")],
    bucket: Annotated[str | None, typer.Option(help="Show only this bucket (default: every bucket the key "
                                                    "can reach, each a top-level directory).")] = None,
    read_only: Annotated[bool, typer.Option("--read-only", help="Refuse every change (EROFS).")] = False,
    cache_seconds: Annotated[float, typer.Option(help="How long attributes and listings are cached: a change "
                                                      "made through S3 shows within it.")] = 1.0,
    allow_other: Annotated[bool, typer.Option(help="Let other users see the mount (FUSE allow_other).")] = False,
) -> None:
    """Mount the gateway's buckets as a filesystem (FUSE), in the foreground until SIGINT/SIGTERM
    or `fusermount3 -u`. Settings: FERRY_URL, and the S3 key as AWS_ACCESS_KEY_ID /
    AWS_SECRET_ACCESS_KEY (or FERRY_ACCESS_KEY / FERRY_SECRET_KEY). docs/posix.md."""
    import logging

    try:
        from app.mount.run import MountSettings
        from app.mount.run import mount as run_mount
    except ImportError as exc:  # trio is the `mount` extra
        typer.echo(f"ferry mount: {exc}; install with: pip install 'ferry[mount]' (and fusermount3: Debian's fuse3)",
                   err=True)
        raise typer.Exit(2) from exc
    logging.basicConfig(level=os.environ.get("FERRY_LOG_LEVEL", "INFO").upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = MountSettings.from_env(bucket=bucket, read_only=read_only, cache_seconds=cache_seconds,
                                          allow_other=allow_other)
    except ValueError as exc:
        typer.echo(f"ferry mount: {exc}", err=True)
        raise typer.Exit(2) from exc
    if not mountpoint.is_dir():
        typer.echo(f"ferry mount: {mountpoint} is not a directory", err=True)
        raise typer.Exit(2)
    try:
        run_mount(mountpoint, settings)
    except OSError as exc:
        typer.echo(f"ferry mount: {exc}", err=True)
        raise typer.Exit(1) from exc


@cli.command()
def mcp(
    url: Annotated[str, typer.Option("--url", envvar="FERRY_URL", help="Gateway URL.")] = "http://127.0.0.1:9000",
    token: Annotated[str | None, typer.Option("--token", envvar="FERRY_ADMIN_TOKEN", help="Admin token.")] = None,
    transport: Annotated[str, typer.Option(help="stdio or http (streamable HTTP at /mcp).")] = "stdio",
    host: Annotated[str, typer.Option(help="HTTP listen address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP listen port.")] = 8765,
) -> None:
    """Serve the Model Context Protocol for agents, backed by the admin API (app/mcp)."""
    from app.mcp.server import serve as serve_mcp

    serve_mcp(url, token, transport, host, port)


@cli.command()
def doctor(
    config: ConfigOpt = None,
    serving: Annotated[bool, typer.Option(help="A gateway is meant to run on this data dir: its lock should be "
                                               "held (default: it should be free).")] = False,
    probe_bucket: Annotated[str | None, typer.Option(help="Measure remote bandwidth with a 1 MiB scratch "
                                                          "object in this bucket (written, read, deleted).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds each network check may take.")] = 5.0,
) -> None:
    """Check settings, data dir, catalog, broker, remotes, TLS and admin token; exit 1 if any fails."""
    from app.doctor import report
    from app.doctor.checks import run_checks

    settings = _settings(config)
    ok = True
    for finding in run_checks(settings, serving=serving, probe_bucket=probe_bucket, timeout=timeout):
        line, passed = report([finding])
        typer.echo(line[0])
        ok = ok and passed
    typer.echo("ferry doctor: all checks passed" if ok else "ferry doctor: problems found (FAIL lines above)")
    raise typer.Exit(0 if ok else 1)


# Admin commands (tenants, keys, policies, stage, flush, evict, status): app/cli_admin/
from app.cli_admin import register as _register_admin  # noqa: E402

_register_admin(cli)


def main() -> None:
    try:
        cli()
    except KeyboardInterrupt:
        sys.exit(130)
