"""``/readyz``'s ``fleet`` check: this node's internal endpoint and every live peer it routes
blocks and buffered writes to answer a signed ping with their own node id.

A node whose fleet port is closed, or that routes to a peer that does not answer, serves misses
and reads of other nodes' writes slowly or not at all, although its own catalog, broker and
remote are fine; that is what this check adds.
"""

from __future__ import annotations

import json

import httpx

from app.bootstrap import Container
from app.fleet import auth
from app.fleet.wire import PING_PATH
from app.services.control.probes import CheckResult, bounded


def _ping(client: httpx.Client, secret: str, node_id: str, address: str) -> str | None:
    """None when ``address`` answers as ``node_id``, else why not."""
    try:
        resp = client.get(f"http://{address}{PING_PATH}", headers=auth.sign(secret, "GET", PING_PATH))
    except httpx.HTTPError as exc:
        return f"{node_id} at {address}: {type(exc).__name__}"
    if resp.status_code != 200:
        return f"{node_id} at {address}: HTTP {resp.status_code}"
    if json.loads(resp.content or b"{}").get("node_id") != node_id:
        return f"{address} answers as another node, not {node_id}"
    return None


async def check_fleet(container: Container, timeout: float = 3.0) -> CheckResult:
    fleet, settings = container.fleet, container.settings
    assert fleet is not None
    own = f"{'127.0.0.1' if fleet.host in ('', '0.0.0.0', '::') else fleet.host}:{fleet.port}"

    def call() -> str:
        targets = [(settings.node_id, own)] + [
            (n, addr) for n in fleet.membership.live_ids() if (addr := fleet.membership.address_of(n))]
        with httpx.Client(timeout=timeout / 2) as client:
            problems = [p for n, a in targets if (p := _ping(client, settings.fleet_secret or "", n, a))]
        if problems:
            raise RuntimeError("; ".join(problems))
        return f"fleet port and {len(targets) - 1} peers answer"

    return await bounded(call, timeout)
