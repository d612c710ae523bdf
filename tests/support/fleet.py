"""A fleet of real ``ferry serve`` nodes on loopback for tests (docs/fleet.md).

    with Fleet(proxy, fresh_postgres_url, tmp_path, broker_url=redis_url) as fleet:
        fleet.wait_live(3)                 # every node sees the others (nodes table)
        fleet.nodes[0].client().get_object(...)
        fleet.kill(2); fleet.start_node(2)  # kill -9 of node 3 (and its worker), restart

Each node is its own process group with its own data dir and node id (``node-1``...), sharing
one PostgreSQL database, optionally one Redis broker (then each node also runs its Celery worker
with beat, as production does), and one remote: pass a ``CountingProxy`` to count what the
whole fleet asked of it. Nodes beat every 0.5 s and are gone after 3 s without a beat, so
membership changes are quick to observe.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from app.fleet import auth
from app.fleet.wire import PING_PATH
from tests.support.celery_worker import CeleryWorker
from tests.support.gateway import GatewayProcess, free_port

FLEET_SECRET = "ferry-test-fleet-secret-0123456789"
HEARTBEAT = 0.5
STALE = 3.0


class Fleet:
    def __init__(self, remote: Any, database_url: str, base_dir: Path, *, size: int = 3,
                 broker_url: str | None = None, workers: int = 1, env: dict[str, str] | None = None) -> None:
        self.remote = remote
        self.database_url = database_url
        self.broker_url = broker_url
        self.nodes: list[GatewayProcess] = []
        self.fleet_ports: list[int] = []
        self.celery: list[CeleryWorker | None] = []
        for i in range(size):
            port = free_port()
            node_env = {
                "FERRY_NODE_ID": f"node-{i + 1}",
                "FERRY_DATABASE_URL": database_url,
                "FERRY_FLEET_PORT": str(port),
                "FERRY_FLEET_SECRET": FLEET_SECRET,
                "FERRY_NODE_HEARTBEAT_SECONDS": str(HEARTBEAT),
                "FERRY_NODE_STALE_SECONDS": str(STALE),
                **({"FERRY_BROKER_URL": broker_url} if broker_url else {}),
                **(env or {}),
            }
            gw = GatewayProcess(remote, base_dir / f"node-{i + 1}", workers=workers, env=node_env)
            self.nodes.append(gw)
            self.fleet_ports.append(port)
            self.celery.append(CeleryWorker(gw) if broker_url else None)

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Fleet:
        try:
            for i in range(len(self.nodes)):  # one at a time: the first migrates the catalog
                self.start_node(i)
        except BaseException:
            self.stop()
            raise
        return self

    def start_node(self, i: int) -> None:
        self.nodes[i].start(timeout=90)
        worker = self.celery[i]
        if worker is not None:
            worker.start(timeout=90)  # as long as a gateway: a loaded machine starts both slowly

    def kill(self, i: int) -> None:
        """kill -9 of node ``i`` (0-based): its gateway and its Celery worker."""
        self.nodes[i].kill()
        worker = self.celery[i]
        if worker is not None:
            worker.kill()

    def stop(self) -> None:
        for gw, worker in zip(self.nodes, self.celery, strict=True):
            if worker is not None:
                worker.stop()
            gw.stop()

    def __enter__(self) -> Fleet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- views -------------------------------------------------------------------------------
    def node_ids(self) -> list[str]:
        return [gw.extra_env["FERRY_NODE_ID"] for gw in self.nodes]

    def live(self) -> list[str]:
        """Node ids with a fresh heartbeat and an internal address, as the catalog has them."""
        engine = create_engine(self.database_url)
        try:
            with engine.connect() as conn:
                rows = conn.execute(text("SELECT node_id FROM nodes WHERE heartbeat_at > :t AND address <> '' "
                                         "ORDER BY node_id"), {"t": time.time() - STALE}).all()
        finally:
            engine.dispose()
        return [r[0] for r in rows]

    def wait_live(self, expected: list[str] | int, timeout: float = 15.0) -> None:
        """Wait until the catalog's live set is ``expected`` (ids, or a count), and one more
        heartbeat so that every node's membership has re-read it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = self.live()
            if (len(live) == expected) if isinstance(expected, int) else (live == sorted(expected)):
                time.sleep(2 * HEARTBEAT + 0.2)
                return
            time.sleep(0.1)
        raise AssertionError(f"live nodes {self.live()} never became {expected}")

    def internal_url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.fleet_ports[i]}"

    def internal_get(self, i: int, path: str, query: str = "", headers: dict[str, str] | None = None,
                     *, sign: bool = True, secret: str = FLEET_SECRET, now: float | None = None) -> tuple[int, bytes]:
        """One GET of node ``i``'s internal endpoint, signed (or not, or wrongly): status and body."""
        all_headers = dict(headers or {})
        if sign:
            all_headers.update(auth.sign(secret, "GET", path, query, now=now))
        url = f"{self.internal_url(i)}{path}" + (f"?{query}" if query else "")
        req = urllib.request.Request(url, headers=all_headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def ping(self, i: int) -> int:
        return self.internal_get(i, PING_PATH)[0]
