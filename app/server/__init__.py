"""Server-side extensions to uvicorn (see zerocopy.py)."""

from __future__ import annotations


def http_protocol(zero_copy: bool) -> str:
    """What ``uvicorn.Config(http=...)`` loads: the zero-copy httptools protocol, or uvicorn's "auto"
    (httptools, else h11) when disabled or when httptools is not installed."""
    if not zero_copy:
        return "auto"
    try:
        import httptools  # noqa: F401
    except ImportError:
        return "auto"
    return "app.server.zerocopy:ZeroCopyHttpToolsProtocol"
