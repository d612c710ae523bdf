"""``ferry`` admin commands: they talk to a running gateway's admin API over HTTP.

    export FERRY_URL=http://gateway:9000 FERRY_ADMIN_TOKEN=...
    ferry tenants create acme --quota 100GiB && ferry keys create acme
    ferry policies set s3://datasets/imagenet/ --revalidate immutable --pinned
    ferry stage s3://datasets/imagenet/train/      # live progress; Ctrl-C offers to cancel
    ferry flush s3://checkpoints/run-42/           # waits, with progress, until durable
    ferry status

Exit codes: 0 success, 1 the gateway refused or the operation did not complete, 2 the gateway
could not be reached (or the token was refused).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from app.admin_client import AdminClient, AdminError
from app.domain import units

UrlOpt = Annotated[str, typer.Option("--url", "--endpoint", envvar=["FERRY_URL", "FERRY_ENDPOINT"],
                                     help="Gateway URL (FERRY_URL).")]
TokenOpt = Annotated[str | None, typer.Option("--token", envvar="FERRY_ADMIN_TOKEN",
                                              help="Admin bearer token (FERRY_ADMIN_TOKEN).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
DEFAULT_URL = "http://127.0.0.1:9000"

tenants_cli = typer.Typer(help="Tenants (they own access keys and a cache quota).", no_args_is_help=True)
keys_cli = typer.Typer(help="S3 access keys of tenants.", no_args_is_help=True)
policies_cli = typer.Typer(help="Policies per bucket and prefix.", no_args_is_help=True)
buckets_cli = typer.Typer(help="Bucket owners: which tenant's keys reach a bucket.", no_args_is_help=True)


def _console(err: bool = False) -> Console:
    """Wide enough when not on a terminal, so piped tables do not wrap ids and keys."""
    console = Console(stderr=err)
    if not console.is_terminal:
        console = Console(stderr=err, width=max(console.width, 160))
    return console


def _fail(message: str, code: int = 1) -> NoReturn:
    _console(err=True).print(f"ferry: {message}", markup=False, highlight=False)
    raise typer.Exit(code)


class Admin(AdminClient):
    """The admin client for the CLI: a refusal becomes a message and an exit code (2 for auth)."""

    def call(self, method: str, path: str, *, params: dict[str, Any] | None = None, body: Any = None,
             timeout: float | None = None) -> Any:
        try:
            return super().call(method, path, params=params, body=body, timeout=timeout)
        except AdminError as exc:
            _fail(str(exc), 2 if exc.status in (0, 401, 403) else 1)


def parse_target(spec: str) -> tuple[str, str]:
    """``s3://bucket/prefix``, ``bucket/prefix`` or ``bucket`` -> (bucket, prefix)."""
    bucket, _, prefix = spec.removeprefix("s3://").partition("/")
    return bucket, prefix


def parse_size(text: str) -> int | None:
    """``100GiB``, ``500M``, ``1024`` (bytes); ``none`` removes a limit (app/domain/units.py)."""
    if text.strip().lower() in ("none", "unlimited", "-"):
        return None
    try:
        return units.parse_size(text)
    except ValueError:
        raise typer.BadParameter(f"not a size: {text!r} (e.g. 500MiB, 10GB, 1048576, none)") from None


def human(n: int | float | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(n)


def _table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*["-" if v is None else str(v) for v in row])
    return table


def _emit(data: Any, as_json: bool, render: Callable[[Any], Table | str]) -> None:
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    out = render(data)
    if isinstance(out, str):
        typer.echo(out)
    else:
        _console().print(out)


# ---- tenants -------------------------------------------------------------------------------------
def _tenant_rows(items: list[dict[str, Any]]) -> Table:
    return _table("tenants", ["name", "id", "disabled", "cache quota", "keys", "created"],
                  [[t["name"], t["id"], t["disabled"], human(t["cache_quota_bytes"]) if t["cache_quota_bytes"] is not None
                    else "none", t["keys"], t["created_at"][:19]] for t in items])


@tenants_cli.command("list")
def tenants_list(url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """List tenants."""
    _emit(Admin(url, token).get("/admin/tenants"), as_json, _tenant_rows)


@tenants_cli.command("create")
def tenants_create(name: str, quota: Annotated[str | None, typer.Option(help="Cache quota, e.g. 100GiB.")] = None,
                   url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Create a tenant (then: ferry keys create NAME)."""
    body = {"name": name, "cache_quota_bytes": parse_size(quota) if quota else None}
    _emit(Admin(url, token).post("/admin/tenants", body), as_json, lambda t: _tenant_rows([t]))


@tenants_cli.command("quota")
def tenants_quota(name: str, size: Annotated[str, typer.Argument(help="e.g. 100GiB, or none")],
                  url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Set (or remove, with "none") a tenant's read cache quota."""
    data = Admin(url, token).call("PATCH", f"/admin/tenants/{name}", body={"cache_quota_bytes": parse_size(size)})
    _emit(data, as_json, lambda t: _tenant_rows([t]))


@tenants_cli.command("disable")
def tenants_disable(name: str, enable: Annotated[bool, typer.Option("--enable", help="Enable it again.")] = False,
                    url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Disable a tenant: its keys stop working within seconds (--enable reverses it)."""
    data = Admin(url, token).post(f"/admin/tenants/{name}/{'enable' if enable else 'disable'}")
    _emit(data, as_json, lambda t: _tenant_rows([t]))


# ---- keys ----------------------------------------------------------------------------------------
def _key_rows(items: list[dict[str, Any]]) -> Table:
    return _table("access keys", ["access key", "tenant", "disabled", "created"],
                  [[k["access_key"], k["tenant"], k["disabled"], k["created_at"][:19]] for k in items])


def _secret(k: dict[str, Any]) -> str:
    return (f"access_key={k['access_key']}\nsecret_key={k['secret_key']}\n"
            "(the secret is shown only now: store it)")


@keys_cli.command("create")
def keys_create(tenant: str, access_key: Annotated[str | None, typer.Option(help="Choose the access key id.")] = None,
                url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Create an access key for a tenant; prints the secret once."""
    body = {"access_key": access_key} if access_key else None
    _emit(Admin(url, token).post(f"/admin/tenants/{tenant}/keys", body), as_json, _secret)


@keys_cli.command("list")
def keys_list(tenant: Annotated[str | None, typer.Argument(help="Only this tenant's keys.")] = None,
              url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """List access keys (never their secrets)."""
    _emit(Admin(url, token).get("/admin/keys", tenant=tenant), as_json, _key_rows)


@keys_cli.command("rotate")
def keys_rotate(access_key: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Give a key a new secret (printed once); the old secret stops working within seconds."""
    _emit(Admin(url, token).post(f"/admin/keys/{access_key}/rotate"), as_json, _secret)


@keys_cli.command("disable")
def keys_disable(access_key: str, enable: Annotated[bool, typer.Option("--enable", help="Enable it again.")] = False,
                 url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Disable an access key (--enable reverses it)."""
    data = Admin(url, token).post(f"/admin/keys/{access_key}/{'enable' if enable else 'disable'}")
    _emit(data, as_json, lambda k: _key_rows([k]))


# ---- bucket owners -------------------------------------------------------------------------------
def _owner_rows(items: list[dict[str, Any]]) -> Table:
    return _table("bucket owners", ["bucket", "tenant"], [[o["bucket"], o["tenant"]] for o in items])


@buckets_cli.command("list")
def buckets_list(tenant: Annotated[str | None, typer.Argument(help="Only this tenant's buckets.")] = None,
                 url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Buckets with an explicit owner (the others belong to the bootstrap tenant)."""
    _emit(Admin(url, token).get("/admin/buckets", tenant=tenant), as_json, _owner_rows)


@buckets_cli.command("assign")
def buckets_assign(bucket: str, tenant: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None,
                   as_json: JsonOpt = False) -> None:
    """Give a bucket (e.g. one already on the remote) to a tenant."""
    data = Admin(url, token).call("PUT", f"/admin/buckets/{bucket}", body={"tenant": tenant})
    _emit(data, as_json, lambda o: _owner_rows([o]))


@buckets_cli.command("unassign")
def buckets_unassign(bucket: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None) -> None:
    """Remove a bucket's explicit owner: it belongs to the bootstrap tenant again."""
    Admin(url, token).call("DELETE", f"/admin/buckets/{bucket}")


# ---- policies ------------------------------------------------------------------------------------
_POLICY_FIELDS = ("mode", "revalidate", "ttl_seconds", "serve_stale", "pinned", "admission", "quota_bytes",
                  "write_replicas")


def _policy_rows(items: list[dict[str, Any]]) -> Table:
    return _table("policies", ["id", "bucket", "prefix", *_POLICY_FIELDS],
                  [[p["id"], p["bucket"], p["prefix"] or "(all)", *[p[f] for f in _POLICY_FIELDS]] for p in items])


@policies_cli.command("list")
def policies_list(url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """List policy rules."""
    _emit(Admin(url, token).get("/admin/policies"), as_json, _policy_rows)


@policies_cli.command("set")
def policies_set(
    target: Annotated[str, typer.Argument(help="s3://bucket/prefix, bucket, or '*' for every bucket")],
    mode: Annotated[str | None, typer.Option(help="write-back | write-through | read-only | bypass")] = None,
    revalidate: Annotated[str | None, typer.Option(help="immutable | ttl | always")] = None,
    ttl: Annotated[float | None, typer.Option(help="Seconds a cached object is fresh (revalidate=ttl).")] = None,
    serve_stale: Annotated[bool | None, typer.Option("--serve-stale/--no-serve-stale")] = None,
    pinned: Annotated[bool | None, typer.Option("--pinned/--no-pinned")] = None,
    admission: Annotated[str | None, typer.Option(help="always | second-hit")] = None,
    quota: Annotated[str | None, typer.Option(help="Cache quota for the prefix, e.g. 50GiB.")] = None,
    write_replicas: Annotated[int | None, typer.Option(help="1 | 2: nodes holding a write before its answer (fleet).")] = None,
    url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False,
) -> None:
    """Create or replace the rule for a bucket/prefix; options left out inherit. Applies at once."""
    bucket, prefix = parse_target(target)
    body = {"bucket": bucket, "prefix": prefix, "mode": mode, "revalidate": revalidate, "ttl_seconds": ttl,
            "serve_stale": serve_stale, "pinned": pinned, "admission": admission,
            "quota_bytes": parse_size(quota) if quota else None, "write_replicas": write_replicas}
    _emit(Admin(url, token).post("/admin/policies", body), as_json, lambda p: _policy_rows([p]))


@policies_cli.command("delete")
def policies_delete(target: Annotated[str, typer.Argument(help="A rule id, or its s3://bucket/prefix")],
                    url: UrlOpt = DEFAULT_URL, token: TokenOpt = None) -> None:
    """Delete a rule (by id or by its bucket/prefix)."""
    admin = Admin(url, token)
    if target.isdigit():
        rule_id = int(target)
    else:
        bucket, prefix = parse_target(target)
        ids = [p["id"] for p in admin.get("/admin/policies") if p["bucket"] == bucket and p["prefix"] == prefix]
        if not ids:
            _fail(f"no policy for bucket {bucket!r} prefix {prefix!r}")
        rule_id = ids[0]
    admin.call("DELETE", f"/admin/policies/{rule_id}")
    typer.echo(f"deleted policy {rule_id}")


@policies_cli.command("effective")
def policies_effective(target: Annotated[str, typer.Argument(help="s3://bucket/key")],
                       url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """The policy a request for this key gets now, and the rules it comes from."""
    bucket, key = parse_target(target)
    data = Admin(url, token).get("/admin/policies/effective", bucket=bucket, key=key)

    def render(d: dict[str, Any]) -> str:
        lines = [f"s3://{d['bucket']}/{d['key']}"] + [f"  {k}: {v}" for k, v in d["policy"].items()]
        lines.append("from rules: " + (", ".join(f"#{r['id']} {r['bucket']}/{r['prefix']}" for r in d["rules"])
                                       or "(node defaults)"))
        return "\n".join(lines)

    _emit(data, as_json, render)


# ---- stage, flush, evict, status -----------------------------------------------------------------
FINISHED = ("done", "failed", "cancelled")


def _progress(console: Console) -> Progress:
    # binary_units: the bar says MiB like the summary (human()), not rich's default decimal MB.
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), DownloadColumn(binary_units=True),
                    BinaryTransferSpeedColumn(), TimeRemainingColumn(), console=console, transient=False)


class BinaryTransferSpeedColumn(TransferSpeedColumn):
    """Transfer speed in MiB/s (rich's own column is decimal-only)."""

    def render(self, task: Any) -> Any:
        from rich.text import Text

        speed = task.finished_speed or task.speed
        return Text("?" if speed is None else f"{human(speed)}/s", style="progress.data.speed")


def stage(
    target: Annotated[str, typer.Argument(help="s3://bucket/prefix to warm into the read cache")],
    tenant: Annotated[str | None, typer.Option(help="Account the cached data to this tenant.")] = None,
    detach: Annotated[bool, typer.Option("--detach", help="Start the job and return at once.")] = False,
    poll: Annotated[float, typer.Option(help="Seconds between progress updates.")] = 0.5,
    url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False,
) -> None:
    """Warm a prefix into the read cache ahead of a job, with a live progress bar.

    Ctrl-C asks whether to cancel the job (without a terminal it cancels); what was warmed stays.
    """
    bucket, prefix = parse_target(target)
    admin = Admin(url, token)
    job = admin.post("/admin/staging", {"bucket": bucket, "prefix": prefix, "tenant": tenant})
    if detach:
        _emit(job, as_json, lambda j: f"staging job {j['id']} started: s3://{bucket}/{prefix}")
        return
    console = _console(err=True)
    try:
        with _progress(console) as bar:
            task = bar.add_task(f"s3://{bucket}/{prefix}", total=None)
            while True:
                job = admin.get(f"/admin/staging/{job['id']}")
                bar.update(task, total=job["bytes_total"] if job["listing_done"] else None,
                           completed=job["bytes_done"],
                           description=f"{job['objects_done']}/{job['objects_total']}"
                                       f"{'' if job['listing_done'] else '+'} objects, {job['objects_skipped']} fresh")
                if job["state"] in FINISHED:
                    break
                time.sleep(poll)
    except KeyboardInterrupt:
        cancel = typer.confirm(f"\nCancel staging job {job['id']}?", default=True) if sys.stdin.isatty() else True
        if cancel:
            job = admin.post(f"/admin/staging/{job['id']}/cancel")
            _fail(f"staging job {job['id']} cancelled after {job['objects_done']} objects", 130)
        typer.echo(f"staging job {job['id']} continues on the gateway: GET /admin/staging/{job['id']}")
        raise typer.Exit(0) from None
    _emit(job, as_json, lambda j: (f"staging job {j['id']} {j['state']}: {j['objects_done']} objects "
                                   f"({j['objects_skipped']} already fresh), {human(j['bytes_done'])} in "
                                   f"{j['elapsed_seconds'] or 0:.1f}s" + (f"\nerror: {j['error']}" if j['error'] else "")))
    if job["state"] != "done":
        raise typer.Exit(1)


def flush(
    target: Annotated[str | None, typer.Argument(help="s3://bucket/prefix to flush (default: everything)")] = None,
    prefix: Annotated[str | None, typer.Option(help="s3://bucket/prefix or bucket/prefix")] = None,
    wait: Annotated[bool, typer.Option(help="Wait until the remote holds it all.")] = True,
    timeout: Annotated[float, typer.Option(help="Seconds to wait at most.")] = 3600.0,
    poll: Annotated[float, typer.Option(help="Seconds between progress updates.")] = 0.5,
    url: UrlOpt = DEFAULT_URL, token: TokenOpt = None,
) -> None:
    """Destage everything written under a prefix now and wait, with progress, until the remote has it.

    Exit 1 when some writes failed again or the wait timed out (--no-wait only starts it).
    """
    bucket, key_prefix = parse_target(target or prefix or "")
    admin = Admin(url, token)
    started = time.monotonic()
    result = admin.post("/admin/flush", bucket=bucket or None, prefix=key_prefix, wait="false")
    pending, failed, upto = result["pending"], result["failed"], result["upto_seq"]
    if wait and pending:
        console = _console(err=True)
        with Progress(SpinnerColumn(), TextColumn("flushing"), BarColumn(),
                      TextColumn("{task.completed}/{task.total} writes"), TimeElapsedColumn(),
                      console=console) as bar:
            task = bar.add_task("flush", total=pending, completed=0)
            while time.monotonic() - started < timeout:
                summary = admin.get("/admin/journal/summary", bucket=bucket or None, prefix=key_prefix, upto_seq=upto)
                pending, failed = summary["outstanding"], summary["failed"]
                total = max(bar.tasks[0].total or 0, pending)
                bar.update(task, total=total, completed=total - pending)
                if not pending:
                    break
                time.sleep(poll)
    durable = not pending and not failed
    typer.echo(f"durable={durable} pending={pending} failed={failed} waited={time.monotonic() - started:.3f}s")
    if not durable:
        _explain_pending(admin, bucket or None, key_prefix)
    if wait and not durable:
        raise typer.Exit(1)


def _explain_pending(admin: Admin, bucket: str | None, prefix: str, limit: int = 5) -> None:
    """Why a flush is not durable: the oldest writes still dirty, their attempts and last error."""
    rows = admin.get("/admin/journal", bucket=bucket, prefix=prefix, limit=limit)["entries"]
    for row in rows:
        nxt = row.get("next_attempt_in_seconds")
        retry = f", next attempt in {nxt:.0f}s" if nxt else ""
        typer.echo(f"  oldest: s3://{row['bucket']}/{row['key']} seq={row['seq']} {row['status']} "
                   f"attempts={row['attempts']}{retry} last_error={row['last_error'] or '-'}")
    if rows:
        typer.echo("  more: GET /admin/journal?state=failed; check the remote with `ferry doctor`")


def evict(
    target: Annotated[str | None, typer.Argument(help="s3://bucket/prefix to drop from the read cache")] = None,
    wipe: Annotated[bool, typer.Option("--wipe", help="Drop this node's whole read cache.")] = False,
    orphans: Annotated[bool, typer.Option("--orphans", help="Delete block files no cache entry accounts for.")] = False,
    url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False,
) -> None:
    """Drop cached (clean) data; writes not yet on the remote are never touched."""
    admin = Admin(url, token)
    if wipe:
        data = admin.post("/admin/cache/wipe")
    elif orphans:
        data = admin.post("/admin/cache/sweep", {"grace_seconds": 600})
    elif target:
        bucket, prefix = parse_target(target)
        data = admin.post("/admin/cache/evict", {"bucket": bucket, "prefix": prefix})
    else:
        _fail("name s3://bucket/prefix to evict, or --wipe, or --orphans")
    what = "orphan block files" if orphans and not wipe else "entries"
    _emit(data, as_json, lambda d: f"evicted {d['entries']} {what}, {human(d['bytes'])}")


def status(url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Journal, read cache and staging jobs at a glance."""
    admin = Admin(url, token)
    data = {"journal": admin.get("/admin/journal/summary"), "cache": admin.get("/admin/cache/usage"),
            "staging": admin.get("/admin/staging", limit=10)}
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    console = _console()
    j = data["journal"]
    age = j["oldest_dirty_age_seconds"]
    console.print(_table("write journal", ["pending", "inflight", "failed", "durable", "dirty bytes", "oldest dirty"],
                         [[j["pending"], j["inflight"], j["failed"], j["counts"].get("durable", 0),
                           human(j["dirty_bytes"]), f"{age:.0f}s" if age is not None else "-"]]))
    c = data["cache"]
    rows = [["total", "", c["entries"], human(c["bytes"]), human(c["capacity_bytes"])]]
    rows += [["node", n["name"], n["entries"], human(n["bytes"]), ""] for n in c["nodes"]]
    rows += [["bucket", b["name"], b["entries"], human(b["bytes"]), ""] for b in c["buckets"]]
    rows += [["tenant", t["tenant"] or t["tenant_id"], t["entries"], human(t["bytes"]),
              human(t["quota_bytes"]) if t["quota_bytes"] is not None else ""] for t in c["tenants"]]
    console.print(_table("read cache", ["scope", "name", "entries", "bytes", "limit"], rows))
    console.print(_table("staging jobs", ["id", "target", "state", "objects", "bytes", "percent", "eta"],
                         [[s["id"], f"s3://{s['bucket']}/{s['prefix']}", s["state"],
                           f"{s['objects_done']}/{s['objects_total']}", human(s["bytes_done"]),
                           s["percent"], f"{s['eta_seconds']}s" if s["eta_seconds"] is not None else None]
                          for s in data["staging"]]))


def register(cli: typer.Typer) -> None:
    """Add the admin commands to the ``ferry`` command line."""
    cli.add_typer(tenants_cli, name="tenants")
    cli.add_typer(keys_cli, name="keys")
    cli.add_typer(policies_cli, name="policies")
    cli.add_typer(buckets_cli, name="buckets")
    cli.command("stage")(stage)
    cli.command("flush")(flush)
    cli.command("evict")(evict)
    cli.command("status")(status)
