"""Admin commands over the catalog: tenants, access keys, bucket owners, policies."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from app.cli_admin.common import (
    DEFAULT_URL,
    Admin,
    JsonOpt,
    TokenOpt,
    UrlOpt,
    emit,
    fail,
    human,
    make_table,
    parse_size,
    parse_target,
)

tenants_cli = typer.Typer(help="Tenants (they own access keys and a cache quota).", no_args_is_help=True)
keys_cli = typer.Typer(help="S3 access keys of tenants.", no_args_is_help=True)
policies_cli = typer.Typer(help="Policies per bucket and prefix.", no_args_is_help=True)
buckets_cli = typer.Typer(help="Bucket owners: which tenant's keys reach a bucket.", no_args_is_help=True)


# ---- tenants -------------------------------------------------------------------------------------
def _tenant_rows(items: list[dict[str, Any]]) -> Table:
    return make_table("tenants", ["name", "id", "disabled", "cache quota", "keys", "created"],
                  [[t["name"], t["id"], t["disabled"], human(t["cache_quota_bytes"]) if t["cache_quota_bytes"] is not None
                    else "none", t["keys"], t["created_at"][:19]] for t in items])


@tenants_cli.command("list")
def tenants_list(url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """List tenants."""
    emit(Admin(url, token).get("/admin/tenants"), as_json, _tenant_rows)


@tenants_cli.command("create")
def tenants_create(name: str, quota: Annotated[str | None, typer.Option(help="Cache quota, e.g. 100GiB.")] = None,
                   url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Create a tenant (then: ferry keys create NAME)."""
    body = {"name": name, "cache_quota_bytes": parse_size(quota) if quota else None}
    emit(Admin(url, token).post("/admin/tenants", body), as_json, lambda t: _tenant_rows([t]))


@tenants_cli.command("quota")
def tenants_quota(name: str, size: Annotated[str, typer.Argument(help="e.g. 100GiB, or none")],
                  url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Set (or remove, with "none") a tenant's read cache quota."""
    data = Admin(url, token).call("PATCH", f"/admin/tenants/{name}", body={"cache_quota_bytes": parse_size(size)})
    emit(data, as_json, lambda t: _tenant_rows([t]))


@tenants_cli.command("disable")
def tenants_disable(name: str, enable: Annotated[bool, typer.Option("--enable", help="Enable it again.")] = False,
                    url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Disable a tenant: its keys stop working within seconds (--enable reverses it)."""
    data = Admin(url, token).post(f"/admin/tenants/{name}/{'enable' if enable else 'disable'}")
    emit(data, as_json, lambda t: _tenant_rows([t]))


# ---- keys ----------------------------------------------------------------------------------------
def _key_rows(items: list[dict[str, Any]]) -> Table:
    return make_table("access keys", ["access key", "tenant", "disabled", "created"],
                  [[k["access_key"], k["tenant"], k["disabled"], k["created_at"][:19]] for k in items])


def _secret(k: dict[str, Any]) -> str:
    return (f"access_key={k['access_key']}\nsecret_key={k['secret_key']}\n"
            "(the secret is shown only now: store it)")


@keys_cli.command("create")
def keys_create(tenant: str, access_key: Annotated[str | None, typer.Option(help="Choose the access key id.")] = None,
                url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Create an access key for a tenant; prints the secret once."""
    body = {"access_key": access_key} if access_key else None
    emit(Admin(url, token).post(f"/admin/tenants/{tenant}/keys", body), as_json, _secret)


@keys_cli.command("list")
def keys_list(tenant: Annotated[str | None, typer.Argument(help="Only this tenant's keys.")] = None,
              url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """List access keys (never their secrets)."""
    emit(Admin(url, token).get("/admin/keys", tenant=tenant), as_json, _key_rows)


@keys_cli.command("rotate")
def keys_rotate(access_key: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Give a key a new secret (printed once); the old secret stops working within seconds."""
    emit(Admin(url, token).post(f"/admin/keys/{access_key}/rotate"), as_json, _secret)


@keys_cli.command("disable")
def keys_disable(access_key: str, enable: Annotated[bool, typer.Option("--enable", help="Enable it again.")] = False,
                 url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Disable an access key (--enable reverses it)."""
    data = Admin(url, token).post(f"/admin/keys/{access_key}/{'enable' if enable else 'disable'}")
    emit(data, as_json, lambda k: _key_rows([k]))


# ---- bucket owners -------------------------------------------------------------------------------
def _owner_rows(items: list[dict[str, Any]]) -> Table:
    return make_table("bucket owners", ["bucket", "tenant"], [[o["bucket"], o["tenant"]] for o in items])


@buckets_cli.command("list")
def buckets_list(tenant: Annotated[str | None, typer.Argument(help="Only this tenant's buckets.")] = None,
                 url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Buckets with an explicit owner (the others belong to the bootstrap tenant)."""
    emit(Admin(url, token).get("/admin/buckets", tenant=tenant), as_json, _owner_rows)


@buckets_cli.command("assign")
def buckets_assign(bucket: str, tenant: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None,
                   as_json: JsonOpt = False) -> None:
    """Give a bucket (e.g. one already on the remote) to a tenant."""
    data = Admin(url, token).call("PUT", f"/admin/buckets/{bucket}", body={"tenant": tenant})
    emit(data, as_json, lambda o: _owner_rows([o]))


@buckets_cli.command("unassign")
def buckets_unassign(bucket: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None) -> None:
    """Remove a bucket's explicit owner: it belongs to the bootstrap tenant again."""
    Admin(url, token).call("DELETE", f"/admin/buckets/{bucket}")


# ---- policies ------------------------------------------------------------------------------------
_POLICY_FIELDS = ("mode", "revalidate", "ttl_seconds", "serve_stale", "pinned", "admission", "quota_bytes",
                  "write_replicas", "prefetch")


def _policy_rows(items: list[dict[str, Any]]) -> Table:
    return make_table("policies", ["id", "bucket", "prefix", *_POLICY_FIELDS],
                  [[p["id"], p["bucket"], p["prefix"] or "(all)", *[p[f] for f in _POLICY_FIELDS]] for p in items])


@policies_cli.command("list")
def policies_list(url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """List policy rules."""
    emit(Admin(url, token).get("/admin/policies"), as_json, _policy_rows)


@policies_cli.command("set")
def policies_set(
    target: Annotated[str, typer.Argument(help="s3://bucket/prefix, bucket, or '*' for every bucket")],
    mode: Annotated[str | None, typer.Option(help="write-back | write-through | read-only | bypass")] = None,
    revalidate: Annotated[str | None, typer.Option(help="immutable | ttl | always")] = None,
    ttl: Annotated[float | None, typer.Option(help="Seconds a cached object is fresh (revalidate=ttl).")] = None,
    serve_stale: Annotated[bool | None, typer.Option("--serve-stale/--no-serve-stale")] = None,
    pinned: Annotated[bool | None, typer.Option("--pinned/--no-pinned")] = None,
    admission: Annotated[str | None, typer.Option(help="frequency | always | second-hit")] = None,
    quota: Annotated[str | None, typer.Option(help="Cache quota for the prefix, e.g. 50GiB.")] = None,
    write_replicas: Annotated[int | None, typer.Option(help="1 | 2: nodes holding a write before its answer (fleet).")] = None,
    prefetch: Annotated[str | None, typer.Option(help="sequential | prefix | off: what a read fetches ahead.")] = None,
    url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False,
) -> None:
    """Create or replace the rule for a bucket/prefix; options left out inherit. Applies at once."""
    bucket, prefix = parse_target(target)
    body = {"bucket": bucket, "prefix": prefix, "mode": mode, "revalidate": revalidate, "ttl_seconds": ttl,
            "serve_stale": serve_stale, "pinned": pinned, "admission": admission,
            "quota_bytes": parse_size(quota) if quota else None, "write_replicas": write_replicas,
            "prefetch": prefetch}
    emit(Admin(url, token).post("/admin/policies", body), as_json, lambda p: _policy_rows([p]))


@policies_cli.command("delete")
def policies_delete(target: Annotated[str, typer.Argument(help="A rule id, or its s3://bucket/prefix")],
                    url: UrlOpt = DEFAULT_URL, token: TokenOpt = None) -> None:
    """Delete a rule (by id or by its bucket/prefix)."""
    admin = Admin(url, token)
    if target.isdigit():
        rule_id = int(target)
    else:
        bucket, prefix = parse_target(target)
        ids = [p["id"] for p in admin.get("/admin/policies") if p["bucket"] == bucket and p["prefix"] == prefix]
        if not ids:
            fail(f"no policy for bucket {bucket!r} prefix {prefix!r}")
        rule_id = ids[0]
    admin.call("DELETE", f"/admin/policies/{rule_id}")
    typer.echo(f"deleted policy {rule_id}")


@policies_cli.command("effective")
def policies_effective(target: Annotated[str, typer.Argument(help="s3://bucket/key")],
                       url: UrlOpt = DEFAULT_URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """The policy a request for this key gets now, and the rules it comes from."""
    bucket, key = parse_target(target)
    data = Admin(url, token).get("/admin/policies/effective", bucket=bucket, key=key)

    def render(d: dict[str, Any]) -> str:
        lines = [f"s3://{d['bucket']}/{d['key']}"] + [f"  {k}: {v}" for k, v in d["policy"].items()]
        lines.append("from rules: " + (", ".join(f"#{r['id']} {r['bucket']}/{r['prefix']}" for r in d["rules"])
                                       or "(node defaults)"))
        return "\n".join(lines)

    emit(data, as_json, render)
