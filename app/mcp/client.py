"""The admin API as the MCP tools see it: the shared client (app/admin_client.py), errors raised.

The MCP server holds no privilege of its own: every call carries the operator's bearer token, so
the admin API's own scope check (read / write) decides what an agent may do.
"""

from __future__ import annotations

from app.admin_client import AdminClient, AdminError

__all__ = ["AdminClient", "AdminError"]
