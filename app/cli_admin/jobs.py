"""Admin commands that run or watch work: stage, flush, evict, status."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from typing import Annotated, Any

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

from app.admin_client import AdminError
from app.cli_admin.common import (
    DEFAULT_URL,
    Admin,
    JsonOpt,
    TokenOpt,
    UrlOpt,
    emit,
    fail,
    human,
    make_console,
    make_table,
    parse_target,
)

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
        emit(job, as_json, lambda j: f"staging job {j['id']} started: s3://{bucket}/{prefix}")
        return
    console = make_console(err=True)
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
            fail(f"staging job {job['id']} cancelled after {job['objects_done']} objects", 130)
        typer.echo(f"staging job {job['id']} continues on the gateway: GET /admin/staging/{job['id']}")
        raise typer.Exit(0) from None
    emit(job, as_json, lambda j: (f"staging job {j['id']} {j['state']}: {j['objects_done']} objects "
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
        console = make_console(err=True)
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
    _explain_nodes(admin, bucket, prefix)


def _workers(admin: Admin) -> Any:
    """Each node's worker, beat and queue depth; {} in embedded mode or from a gateway without it."""
    try:
        return admin.get("/admin/workers")
    except AdminError:
        return {}


def _liveness(life: dict[str, Any]) -> str:
    age = life["age_seconds"]
    return ("alive" if life["alive"] else "STALE") + (f" ({age:.0f}s ago)" if age is not None else " (never)")


def _explain_nodes(admin: Admin, bucket: str | None, prefix: str, limit: int = 1000) -> None:
    """What the wait is for: the dirty rows per node holding them, and whether that node's worker
    (the only process that destages them) and beat are alive."""
    rows = admin.get("/admin/journal", bucket=bucket, prefix=prefix, limit=limit)["entries"]
    per_node = Counter(row.get("node_id") or "?" for row in rows)
    if not per_node:
        return
    try:
        lives = admin.get("/admin/workers", node=sorted(per_node))
    except AdminError:
        lives = {}
    more = "+" if len(rows) >= limit else ""
    for node, count in sorted(per_node.items()):
        found = lives.get(node)
        health = (f"{found['worker']['detail']}; {found['beat']['detail']}; {found['queue_depth']} messages queued"
                  if found else "worker unknown (embedded mode)")
        typer.echo(f"  waiting on node {node}: {count}{more} writes; {health}")


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
        fail("name s3://bucket/prefix to evict, or --wipe, or --orphans")
    what = "orphan block files" if orphans and not wipe else "entries"
    emit(data, as_json, lambda d: f"evicted {d['entries']} {what}, {human(d['bytes'])}")


def status(url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Journal, read cache and staging jobs at a glance."""
    admin = Admin(url, token)
    data = {"journal": admin.get("/admin/journal/summary"), "cache": admin.get("/admin/cache/usage"),
            "staging": admin.get("/admin/staging", limit=10), "workers": _workers(admin)}
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    console = make_console()
    j = data["journal"]
    age = j["oldest_dirty_age_seconds"]
    console.print(make_table("write journal", ["pending", "inflight", "failed", "durable", "dirty bytes", "oldest dirty"],
                         [[j["pending"], j["inflight"], j["failed"], j["counts"].get("durable", 0),
                           human(j["dirty_bytes"]), f"{age:.0f}s" if age is not None else "-"]]))
    c = data["cache"]
    rows = [["total", "", c["entries"], human(c["bytes"]), human(c["capacity_bytes"])]]
    rows += [["node", n["name"], n["entries"], human(n["bytes"]), ""] for n in c["nodes"]]
    rows += [["bucket", b["name"], b["entries"], human(b["bytes"]), ""] for b in c["buckets"]]
    rows += [["tenant", t["tenant"] or t["tenant_id"], t["entries"], human(t["bytes"]),
              human(t["quota_bytes"]) if t["quota_bytes"] is not None else ""] for t in c["tenants"]]
    console.print(make_table("read cache", ["scope", "name", "entries", "bytes", "limit"], rows))
    if data["workers"]:
        console.print(make_table("fleet workers", ["node", "worker", "beat", "queued"],
                                 [[n, _liveness(w["worker"]), _liveness(w["beat"]), w["queue_depth"]]
                                  for n, w in data["workers"].items()]))
    console.print(make_table("staging jobs", ["id", "target", "state", "objects", "bytes", "percent", "eta"],
                         [[s["id"], f"s3://{s['bucket']}/{s['prefix']}", s["state"],
                           f"{s['objects_done']}/{s['objects_total']}", human(s["bytes_done"]),
                           s["percent"], f"{s['eta_seconds']}s" if s["eta_seconds"] is not None else None]
                          for s in data["staging"]]))
