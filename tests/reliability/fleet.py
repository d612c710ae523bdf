"""A fleet-mode node as real processes (``ferry serve``, a Celery worker, Celery beat on its own),
and the checks every fault test ends with: each key through the gateway and on the remote, and
no blob or cache block file left that no catalog row accounts for.
"""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError
from sqlalchemy import create_engine, text

from tests.reliability.ledger import ABSENT, Ledger, sha
from tests.reliability.record import Record
from tests.support.celery_worker import CELERY, ROOT, CeleryWorker
from tests.support.gateway import ADMIN_TOKEN, GatewayProcess

# Seconds a process may take to answer after it starts: the suite runs on shared CI machines whose
# load can reach dozens of runnable processes per core (a gateway then needs a minute to start).
START_TIMEOUT = 180.0
FAST_ENV = {
    "FERRY_DESTAGE_LEASE_SECONDS": "3",
    "FERRY_SWEEP_INTERVAL": "0.5",
    "FERRY_DESTAGE_BACKOFF_CAP": "2",
    "FERRY_REMOTE_CIRCUIT_COOLDOWN": "1",
}


class BeatProcess(CeleryWorker):
    """``celery beat`` alone: the sweeper's clock, killed independently of the worker."""

    def command(self) -> list[str]:
        return [CELERY, "-A", "workers.celery_app", "beat", "-l", "info",
                "-s", str(self.data_dir / "celerybeat-schedule")]

    def start(self, timeout: float = 30.0) -> BeatProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(self.command(), env=self.env(), cwd=ROOT, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        time.sleep(0.5)
        if self.proc.poll() is not None:
            raise RuntimeError(f"celery beat exited {self.proc.returncode}:\n{self.log_tail()}")
        return self


class FleetNode:
    """One node: gateway, worker (no beat) and beat, sharing one data dir and environment."""

    def __init__(self, remote: Any, data_dir: Path, env: dict[str, str]) -> None:
        self.gw = GatewayProcess(remote, data_dir, env={**FAST_ENV, **env})
        self.worker = CeleryWorker(self.gw, beat=False)
        self.beat = BeatProcess(self.gw, beat=False)
        self.beat.log_path = data_dir / "beat.log"
        self.database_url = env["FERRY_DATABASE_URL"]
        self.node_id = env["FERRY_NODE_ID"]
        self._client: Any = None

    def ensure_running(self) -> None:
        if self.gw.proc is None or self.gw.proc.poll() is not None:
            self.gw.start(timeout=START_TIMEOUT)
            self._client = None
        if not self.worker.is_running():
            self.worker.start(timeout=START_TIMEOUT)
        if not self.beat.is_running():
            self.beat.start(timeout=START_TIMEOUT)

    def client(self) -> Any:
        if self._client is None:
            self._client = self.gw.client(max_pool_connections=32, connect_timeout=3, read_timeout=60)
        return self._client

    def kill(self, victim: str) -> None:
        """kill -9 of the gateway's process group, the worker's or beat's."""
        {"gateway": self.gw.kill, "worker": self.worker.kill, "beat": self.beat.kill}[victim]()

    def stop(self) -> None:
        for proc in (self.beat, self.worker):
            proc.stop()
        self.gw.stop()

    def logs(self) -> str:
        return (self.gw.log_tail() + "\n--- celery ---\n" + self.worker.log_tail(2000)
                + "\n--- beat ---\n" + self.beat.log_tail(1000))


def admin(gw: GatewayProcess, method: str, path: str, body: dict[str, Any] | None = None,
          timeout: float = 60.0) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{gw.endpoint}{path}", data=data, method=method,
                                 headers={"Authorization": f"Bearer {ADMIN_TOKEN}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        result: dict[str, Any] = json.loads(r.read())
    return result


def read_state(client: Any, bucket: str, key: str) -> tuple[str, int]:
    try:
        data = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "NoSuchKey":
            return ABSENT, 0
        raise
    return sha(data), len(data)


def verify_keys(ledger: Ledger, gateway: Any, remote: Any, bucket: str, keys: list[str]) -> None:
    """Each key's final state through the gateway and on the remote (after the flush barrier)."""

    def one(key: str) -> None:
        for where, client in (("gateway", gateway), ("remote", remote)):
            try:
                state, size = read_state(client, bucket, key)
            except Exception as exc:  # an error answer where the key must be readable
                ledger.record.odd(f"{where}: reading {key} after the faults: {exc}")
                continue
            ledger.verify_final(key, state, size, where=where)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, keys))


def _blob_files(data_dir: Path) -> dict[str, Path]:
    return {p.name: p for p in (data_dir / "blobs").rglob("*") if p.is_file()}


def referenced_blobs(database_url: str, node_id: str) -> set[str]:
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            ids = {b[0] for (blobs,) in conn.execute(text(
                "SELECT blobs_json FROM object_versions WHERE node_id = :n AND state NOT IN ('durable', 'superseded')"),
                {"n": node_id}) for b in json.loads(blobs)}
            ids |= {b for (b,) in conn.execute(text("SELECT blob FROM multipart_parts WHERE node_id = :n"),
                                               {"n": node_id})}
    finally:
        engine.dispose()
    return ids


def describe_blob(node: FleetNode, blob_id: str) -> str:
    """What a leaked blob is: its age, whether a drop intent names it, which rows (any state) do."""
    path = _blob_files(node.gw.data_dir).get(blob_id)
    age = f"{time.time() - path.stat().st_mtime:.0f}s old" if path is not None and path.exists() else "gone"
    tmp = node.gw.data_dir / "tmp"
    intent = (tmp / blob_id).exists() or (tmp / f"{blob_id}.drop").exists()
    engine = create_engine(node.database_url)
    try:
        with engine.connect() as conn:
            rows = [f"seq {seq} {state} {key}" for seq, state, key, blobs in conn.execute(text(
                "SELECT seq, state, key, blobs_json FROM object_versions WHERE blobs_json LIKE :b"),
                {"b": f"%{blob_id}%"})]
            parts = [f"part {n} of {u}" for u, n in conn.execute(text(
                "SELECT upload_id, part_number FROM multipart_parts WHERE blob = :b"), {"b": blob_id})]
    finally:
        engine.dispose()
    return f"{blob_id}: {age}, intent={'yes' if intent else 'no'}, rows={rows + parts}"


def unaccounted_blocks(database_url: str, node_id: str, data_dir: Path) -> list[Path]:
    """Cache block files that no ready entry of the node names."""
    from app.domain.cache import block_name

    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            rows = list(conn.execute(text("SELECT bucket, key, etag, size, block_size FROM cache_entries "
                                          "WHERE node_id = :n AND state = 'ready'"), {"n": node_id}))
    finally:
        engine.dispose()
    names = {block_name(b, k, e, i, bs) for b, k, e, size, bs in rows
             for i in range(max(1, math.ceil(size / bs)) if bs else 1)}
    files = [p for p in (data_dir / "cache" / "blocks").rglob("*") if p.is_file()]
    return [p for p in files if p.name not in names]


def check_leaks(record: Record, node: FleetNode, bucket: str, settle: float = 20.0) -> dict[str, int]:
    """After the flush barrier and the abort of uploads left open by kills: every blob file is
    referenced by a dirty row or an open part, and none is left once those are gone; every cache
    block file is named by a ready entry once the orphan sweep (the designed repair of a crash
    between a row's delete and its unlink) has run."""
    client = node.client()
    for up in client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
        with contextlib.suppress(ClientError):
            client.abort_multipart_upload(Bucket=bucket, Key=up["Key"], UploadId=up["UploadId"])
    deadline = time.monotonic() + settle
    while True:
        files = _blob_files(node.gw.data_dir)
        referenced = referenced_blobs(node.database_url, node.node_id)
        orphans = [name for name in files if name not in referenced]
        if not orphans or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if orphans:
        record.odd(f"{len(orphans)} blob files leaked (no dirty row or open part names them): "
                   f"{[describe_blob(node, name) for name in orphans[:3]]}")
    stale_tmp = [p.name for p in (node.gw.data_dir / "tmp").glob("*")] if (node.gw.data_dir / "tmp").exists() else []
    before = unaccounted_blocks(node.database_url, node.node_id, node.gw.data_dir)
    swept = admin(node.gw, "POST", "/admin/cache/sweep", {"grace_seconds": 0})
    for _ in range(10):  # blocks of invalidated entries go with the janitor's next pass (1 s)
        after = unaccounted_blocks(node.database_url, node.node_id, node.gw.data_dir)
        if not after:
            break
        time.sleep(0.5)
    if after:
        record.odd(f"{len(after)} cache block files no entry names, even after the orphan sweep")
    return {"blob_files": len(files), "blob_orphans": len(orphans), "tmp_files": len(stale_tmp),
            "block_orphans_swept": int(swept["entries"]), "block_orphans_before_sweep": len(before),
            "block_orphans_after": len(after)}
