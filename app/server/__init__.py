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
