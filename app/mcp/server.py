"""``ferry mcp``: the MCP server (official ``mcp`` SDK) over stdio or streamable HTTP.

Every tool is an admin API call made with the operator's token (FERRY_ADMIN_TOKEN), so the
gateway's scope check governs the agent: a read token can inspect, only a write token can act.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from app.mcp import tools
from app.mcp.client import AdminClient, AdminError

DOCS = Path(__file__).resolve().parents[2] / "docs"
READ_TOOLS: dict[str, Callable[..., Any]] = {
    "status": tools.status, "traffic": tools.traffic, "where_is": tools.where_is,
    "destage": tools.destage, "slow_requests": tools.slow_requests, "effective_policy": tools.effective_policy,
    "cache_sizing": tools.cache_sizing,
}
ACTION_TOOLS: dict[str, Callable[..., Any]] = {
    "stage": tools.stage, "flush": tools.flush, "evict": tools.evict, "retry": tools.retry,
}
DESCRIPTIONS = {
    "status": "Node status (cache, dirty writes, destage, remote), readiness, fleet nodes by cached bytes.",
    "traffic": "Hit ratio, requests and bytes by tenant, bucket and operation. window_seconds=0: since "
               "the gateway started; >0 (max 300): samples the counters twice that far apart and diffs.",
    "where_is": "Where is s3://bucket/key: cached or not and on which node in how many blocks; its journal "
                "history, dirty or durable, attempts, last error.",
    "destage": "Destage lag (oldest dirty write's age), pending/inflight/failed counts, failed rows and errors.",
    "slow_requests": "The slowest recent S3 requests with ms per stage: auth (parse+signature+access), "
                     "lookup (handler until the response starts: catalog, cache, remote, body upload), "
                     "first_byte, transfer, total. Per gateway worker process.",
    "cache_sizing": "What a bigger or smaller read cache would hit: points {cache_bytes, hit_ratio} from "
                    "budget/4 to 4x the configured budget (the miss-ratio curve of the answering worker's "
                    "reads), per bucket and tenant, bytes touched in the last hour and day, and the hit "
                    "ratio predicted at the budget against the one measured.",
    "effective_policy": "The effective policy (revalidation, pinning, write mode...) for s3://bucket/key.",
    "stage": "ACTION (write token): warm s3://bucket/prefix into the cache; returns the staging job.",
    "flush": "ACTION (write token): destage everything under s3://bucket/prefix (or all) and wait.",
    "evict": "ACTION (write token): drop cached clean objects under s3://bucket/prefix on the node.",
    "retry": "ACTION (write token): retry a failed journal row by its seq.",
}


def _wrap(fn: Callable[..., Any], admin: AdminClient, action: bool) -> Callable[..., Any]:
    """Bind the client and turn gateway refusals into tool errors the agent can read."""
    @functools.wraps(fn)
    def tool(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(admin, *args, **kwargs)
        except AdminError as exc:
            raise ToolError(str(tools.explain(exc, action))) from exc
        except tools.ToolFailure as exc:
            raise ToolError(str(exc)) from exc
    # the SDK reads the signature for the input schema: drop the bound first parameter
    sig = inspect.signature(fn)
    tool.__dict__["__signature__"] = sig.replace(parameters=list(sig.parameters.values())[1:])
    del tool.__wrapped__
    return tool


def _reader(path: Path) -> Callable[[], str]:
    def read() -> str:
        return path.read_text(encoding="utf-8")
    return read


def _add_docs(server: MCPServer) -> None:
    for name in ("operations", "configuration"):
        path = DOCS / f"{name}.md"

        server.resource(f"ferry://docs/{name}", name=name, mime_type="text/markdown",
                        description=f"Ferry's {name} guide ({path.name})")(_reader(path))


def build(url: str, token: str | None) -> MCPServer:
    """An MCP server whose tools call the gateway at ``url`` with ``token``."""
    admin = AdminClient(url, token)
    server: MCPServer = MCPServer(name="ferry", instructions=(
        "Inspect and operate a Ferry S3 gateway. Read ferry://docs/operations first. Tools marked "
        "ACTION need a write-scoped admin token."))
    for name, fn in READ_TOOLS.items():
        server.tool(name=name, description=DESCRIPTIONS[name])(_wrap(fn, admin, action=False))
    for name, fn in ACTION_TOOLS.items():
        server.tool(name=name, description=DESCRIPTIONS[name])(_wrap(fn, admin, action=True))
    _add_docs(server)
    return server


def serve(url: str, token: str | None, transport: str, host: str, port: int) -> None:
    """Run until stdin closes (stdio) or the process is stopped (http, path /mcp)."""
    if transport not in ("stdio", "http"):
        raise SystemExit(f"ferry: --transport must be stdio or http, not {transport!r}")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per admin call is noise
    server = build(url, token)
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=port)
