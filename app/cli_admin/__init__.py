"""``ferry`` admin commands: they talk to a running gateway's admin API over HTTP.

    export FERRY_URL=http://gateway:9000 FERRY_ADMIN_TOKEN=...
    ferry tenants create acme --quota 100GiB && ferry keys create acme
    ferry policies set s3://datasets/imagenet/ --revalidate immutable --pinned
    ferry stage s3://datasets/imagenet/train/      # live progress; Ctrl-C offers to cancel
    ferry flush s3://checkpoints/run-42/           # waits, with progress, until durable
    ferry status
    ferry cache sizing                             # hit ratio vs cache size around the budget
    ferry admin tokens create ci --scope read --scope write --tenant acme   # the token, once

Exit codes: 0 success, 1 the gateway refused or the operation did not complete, 2 the gateway
could not be reached (or the token was refused).
"""

from __future__ import annotations

import typer

from app.cli_admin.cache import cache_cli
from app.cli_admin.catalog import buckets_cli, keys_cli, policies_cli, tenants_cli
from app.cli_admin.common import parse_size, parse_target
from app.cli_admin.jobs import evict, flush, stage, status
from app.cli_admin.tokens import admin_cli

__all__ = ["parse_size", "parse_target", "register"]


def register(cli: typer.Typer) -> None:
    """Add the admin commands to the ``ferry`` command line."""
    cli.add_typer(tenants_cli, name="tenants")
    cli.add_typer(keys_cli, name="keys")
    cli.add_typer(policies_cli, name="policies")
    cli.add_typer(buckets_cli, name="buckets")
    cli.add_typer(admin_cli, name="admin")
    cli.add_typer(cache_cli, name="cache")
    cli.command("stage")(stage)
    cli.command("flush")(flush)
    cli.command("evict")(evict)
    cli.command("status")(status)
