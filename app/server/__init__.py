"""Server-side extensions to uvicorn (see zerocopy.py)."""

from __future__ import annotations


def http_protocol(zero_copy: bool) -> str:
    """What ``uvicorn.Config(http=...)`` loads: the httptools protocol with a header timeout
    (headers.py), plus the zero-copy extension unless disabled; uvicorn's "auto" (h11, no header
    timeout) when httptools is not installed."""
    try:
        import httptools  # noqa: F401
    except ImportError:
        return "auto"
    if not zero_copy:
        return "app.server.headers:HeaderTimeoutProtocol"
    return "app.server.zerocopy:ZeroCopyHttpToolsProtocol"


FD_RESERVE = 512  # descriptors kept for what a request opens: cache blocks, blobs, the catalog, the remote pool


def connection_limit(configured: int) -> int | None:
    """uvicorn's ``limit_concurrency`` for each worker: the configured one, but never more than the
    process can open descriptors for (past that, accept() fails and requests in flight get cut-off
    bodies: an answer the server never finishes). Raises the soft RLIMIT_NOFILE to the hard one first."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    room = max(64, soft - FD_RESERVE) if soft > 2 * FD_RESERVE else max(16, soft // 2)
    return min(configured, room) if configured else room
