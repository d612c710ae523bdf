"""Operator-managed rows: tenants, tokens, owners, policies, remotes, nodes, staging jobs."""
