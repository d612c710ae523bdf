"""``ferry mcp``: a Model Context Protocol server for agents, backed by the admin API."""
