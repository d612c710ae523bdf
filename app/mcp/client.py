"""The admin API as the MCP tools see it: the CLI's client, with errors raised, not exited.

The MCP server holds no privilege of its own: every call carries the operator's bearer token, so
the admin API's own scope check (read / write) decides what an agent may do.
"""

from __future__ import annotations

from typing import Any

import httpx

from app.cli_admin import Admin


class AdminError(Exception):
    """The gateway refused a call (status and its detail) or could not be reached (status 0)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{status}: {detail}" if status else detail)
        self.status = status
        self.detail = detail


def _detail(resp: httpx.Response) -> str:
    try:
        detail = resp.json().get("detail")
    except ValueError:
        return resp.text
    if isinstance(detail, list):  # FastAPI validation errors
        return "; ".join(f"{'.'.join(str(p) for p in d.get('loc', [])[1:])}: {d.get('msg')}" for d in detail)
    return str(detail)


class AdminClient:
    """JSON in and out over the CLI's ``Admin`` HTTP client; a 4xx/5xx raises ``AdminError``."""

    def __init__(self, url: str, token: str | None, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.client = Admin(url, token, timeout).client

    def call(self, method: str, path: str, *, params: dict[str, Any] | None = None, body: Any = None,
             timeout: float | None = None) -> Any:
        clean = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            resp = self.client.request(method, path, params=clean, json=body,
                                       timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT)
        except httpx.HTTPError as exc:
            raise AdminError(0, f"cannot reach {self.url}: {exc}") from exc
        if resp.status_code >= 400:
            raise AdminError(resp.status_code, _detail(resp))
        return resp.json() if resp.content else None

    def get(self, path: str, **params: Any) -> Any:
        return self.call("GET", path, params=params)

    def post(self, path: str, body: Any = None, *, timeout: float | None = None, **params: Any) -> Any:
        return self.call("POST", path, params=params, body=body, timeout=timeout)
