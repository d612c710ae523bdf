"""``ferry admin tokens``: the admin API's bearer tokens (``/admin/tokens``, app/admin/auth.py).

Scopes nest (``admin`` implies ``write`` implies ``read``); a read/write token may be bound to
one tenant's buckets with ``--tenant``. The secret is printed once, at creation: the catalog
keeps only its SHA-256. Revoking disables the token at once (every process checks the catalog
on each request); the API keeps the row, so ``list`` still shows it, disabled.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich.table import Table

from app.cli_admin.common import DEFAULT_URL, Admin, JsonOpt, TokenOpt, UrlOpt, emit, fail, make_table

admin_cli = typer.Typer(help="The gateway's admin API itself: its tokens.", no_args_is_help=True)
tokens_cli = typer.Typer(help="Admin API tokens (scopes read, write, admin).", no_args_is_help=True)
admin_cli.add_typer(tokens_cli, name="tokens")

SCOPES = ("read", "write", "admin")


def _when(stamp: float | None) -> str | None:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(stamp)) if stamp else None


def _token_rows(items: list[dict[str, Any]]) -> Table:
    return make_table("admin tokens", ["id", "name", "scopes", "tenant", "disabled", "created", "last used"],
                      [[t["id"], t["name"], " ".join(t["scopes"]), t.get("tenant"), t["disabled"],
                        _when(t["created_at"]), _when(t["last_used_at"])] for t in items])


def _secret(t: dict[str, Any]) -> str:
    bound = f" for tenant {t['tenant']}" if t.get("tenant") else ""
    return (f"token {t['id']} ({t['name']}, {' '.join(t['scopes'])}{bound})\n"
            f"token={t['token']}\n(the token is shown only now: store it)")


@tokens_cli.command("list")
def tokens_list(url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """List admin tokens (never their secrets)."""
    emit(Admin(url, token).get("/admin/tokens"), as_json, _token_rows)


@tokens_cli.command("create")
def tokens_create(
    name: str,
    scope: Annotated[list[str], typer.Option("--scope", help="read, write or admin; repeat for several.")],
    tenant: Annotated[str | None, typer.Option(help="Bind a read/write token to this tenant's buckets.")] = None,
    url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False,
) -> None:
    """Create an admin token; prints its secret once."""
    wrong = [s for s in scope if s not in SCOPES]
    if wrong:
        raise typer.BadParameter(f"unknown scope {wrong[0]!r}: use read, write or admin", param_hint="--scope")
    body = {"name": name, "scopes": sorted(set(scope)), "tenant": tenant}
    emit(Admin(url, token).post("/admin/tokens", body), as_json, _secret)


@tokens_cli.command("revoke")
def tokens_revoke(
    which: Annotated[str, typer.Argument(metavar="ID_OR_NAME", help="The token's id, or its name if unique.")],
    url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False,
) -> None:
    """Revoke an admin token: it stops working at once."""
    admin = Admin(url, token)
    token_id = which if which.isdigit() else _id_of(admin, which)
    data = admin.post(f"/admin/tokens/{token_id}/disable")
    emit(data, as_json, lambda t: f"revoked admin token {t['id']} ({t['name']})")


def _id_of(admin: Admin, name: str) -> int:
    found = [t["id"] for t in admin.get("/admin/tokens") if t["name"] == name]
    if len(found) != 1:
        fail(f"no admin token named {name!r}" if not found else
             f"{len(found)} admin tokens are named {name!r}: name one by id ({', '.join(map(str, found))})")
    return int(found[0])
