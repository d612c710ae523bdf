"""One client of the admin API, shared by the CLI and the MCP tools: JSON in and out, a refusal raises.

The CLI turns ``AdminError`` into a message and an exit code; the MCP tools turn it into a tool
failure an agent can read. Neither holds a privilege of its own: the bearer token decides.
"""

from __future__ import annotations

from typing import Any

import httpx


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
    """The admin API over HTTP; a 4xx/5xx or an unreachable gateway raises ``AdminError``."""

    def __init__(self, url: str, token: str | None, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.client = httpx.Client(base_url=self.url, timeout=timeout,
                                   headers={"Authorization": f"Bearer {token}"} if token else {})

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
