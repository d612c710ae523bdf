"""The ``ferry`` admin commands, run as subprocesses against a real gateway."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway import ADMIN_TOKEN, GatewayProcess, free_port
from tests.support.seaweed import SeaweedServer

FERRY = str(Path(sys.executable).with_name("ferry"))


@pytest.fixture(scope="module")
def gw(seaweed: SeaweedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(seaweed, tmp_path_factory.mktemp("cli")) as g:
        yield g


def ferry(gw: GatewayProcess, *args: str, token: str | None = ADMIN_TOKEN, timeout: float = 120,
          cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRY_")}
    env.update(FERRY_URL=gw.endpoint, COLUMNS="200")
    if token:
        env["FERRY_ADMIN_TOKEN"] = token
    return subprocess.run([FERRY, *args], capture_output=True, text=True, env=env, timeout=timeout,
                          stdin=subprocess.DEVNULL, cwd=cwd)


def ok_json(out: subprocess.CompletedProcess[str]) -> Any:
    assert out.returncode == 0, out.stderr + out.stdout
    return json.loads(out.stdout)


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_tenants_and_keys(gw: GatewayProcess) -> None:
    name = uid("cli")
    created = ok_json(ferry(gw, "tenants", "create", name, "--quota", "2GiB", "--json"))
    assert created["cache_quota_bytes"] == 2 * 1024**3
    out = ferry(gw, "tenants", "list")
    assert out.returncode == 0 and name in out.stdout
    assert ok_json(ferry(gw, "tenants", "quota", name, "500MB", "--json"))["cache_quota_bytes"] == 500 * 10**6
    assert ok_json(ferry(gw, "tenants", "quota", name, "none", "--json"))["cache_quota_bytes"] is None

    key = ok_json(ferry(gw, "keys", "create", name, "--json"))
    gw.client(key["access_key"], key["secret_key"]).list_buckets()
    plain = ferry(gw, "keys", "create", name)
    assert plain.returncode == 0 and "secret_key=" in plain.stdout
    listed = ok_json(ferry(gw, "keys", "list", name, "--json"))
    assert key["access_key"] in [k["access_key"] for k in listed] and all("secret_key" not in k for k in listed)
    rotated = ok_json(ferry(gw, "keys", "rotate", key["access_key"], "--json"))
    assert rotated["secret_key"] != key["secret_key"]
    assert ok_json(ferry(gw, "keys", "disable", key["access_key"], "--json"))["disabled"] is True
    assert ok_json(ferry(gw, "tenants", "disable", name, "--json"))["disabled"] is True
    assert ok_json(ferry(gw, "tenants", "disable", name, "--enable", "--json"))["disabled"] is False


def test_errors_are_reported(gw: GatewayProcess) -> None:
    out = ferry(gw, "tenants", "quota", "no-such-tenant", "1GiB")
    assert out.returncode == 1 and "404" in out.stderr
    out = ferry(gw, "tenants", "list", token="wrong")
    assert out.returncode == 2 and "401" in out.stderr
    out = ferry(gw, "tenants", "list", "--url", f"http://127.0.0.1:{free_port()}")
    assert out.returncode == 2 and "cannot reach" in out.stderr
    out = ferry(gw, "policies", "set", "s3://some-bucket/", "--mode", "turbo")
    assert out.returncode == 1 and "mode" in out.stderr


def test_401_without_a_token_names_the_variable_and_the_quickstart_env_file(gw: GatewayProcess,
                                                                           tmp_path: Path) -> None:
    """Issue 31: `ferry status` in a shell without ferry.env said only "401: missing bearer token"."""
    out = ferry(gw, "status", token=None, cwd=tmp_path)
    said = " ".join(out.stderr.split())  # rich wraps long lines
    assert out.returncode == 2 and "401" in said, said
    assert "FERRY_ADMIN_TOKEN is not set" in said and "ferry.env" in said, said
    env_file = tmp_path / "var" / "quickstart" / "ferry.env"  # what a quickstart run from here wrote
    env_file.parent.mkdir(parents=True)
    env_file.write_text("export FERRY_ADMIN_TOKEN=x\n")
    out = ferry(gw, "status", token=None, cwd=tmp_path)
    assert out.returncode == 2 and f"source it: . {env_file}" in " ".join(out.stderr.split()), out.stderr
    assert "FERRY_ADMIN_TOKEN" not in ferry(gw, "status", token="wrong").stderr  # a wrong token is another story


def test_policies(gw: GatewayProcess) -> None:
    bucket = uid("clipol")
    rule = ok_json(ferry(gw, "policies", "set", f"s3://{bucket}/hot/", "--pinned", "--ttl", "60", "--json"))
    assert rule["bucket"] == bucket and rule["prefix"] == "hot/" and rule["pinned"] is True
    assert rule["id"] in [p["id"] for p in ok_json(ferry(gw, "policies", "list", "--json"))]
    table = ferry(gw, "policies", "list")
    assert table.returncode == 0 and bucket in table.stdout
    eff = ok_json(ferry(gw, "policies", "effective", f"s3://{bucket}/hot/x", "--json"))
    assert eff["policy"]["pinned"] is True and eff["policy"]["ttl_seconds"] == 60
    text = ferry(gw, "policies", "effective", f"s3://{bucket}/cold/x")
    assert text.returncode == 0 and "pinned: False" in text.stdout
    out = ferry(gw, "policies", "delete", f"s3://{bucket}/hot/")
    assert out.returncode == 0 and f"deleted policy {rule['id']}" in out.stdout
    assert ferry(gw, "policies", "delete", str(rule["id"])).returncode == 1


def test_stage_shows_progress_until_done(gw: GatewayProcess, seaweed: SeaweedServer) -> None:
    bucket = seaweed.create_bucket(uid("clistage"))
    remote = seaweed.client()
    for i in range(12):
        remote.put_object(Bucket=bucket, Key=f"ds/{i}", Body=b"s" * 8192)
    out = ferry(gw, "stage", f"s3://{bucket}/ds/")
    assert out.returncode == 0, out.stderr
    assert "done: 12 objects (0 already fresh)" in out.stdout
    job = ok_json(ferry(gw, "stage", f"s3://{bucket}/ds/", "--json"))
    assert job["state"] == "done" and job["objects_skipped"] == 12
    detached = ok_json(ferry(gw, "stage", f"s3://{bucket}/ds/", "--detach", "--json"))
    assert detached["state"] in ("queued", "running", "done")
    failed = ferry(gw, "stage", f"s3://{uid('missing')}/")
    assert failed.returncode == 1 and "NoSuchBucket" in failed.stdout


def test_flush_status_and_evict(gw: GatewayProcess, seaweed: SeaweedServer) -> None:
    s3 = gw.client()
    bucket = uid("cliflush")
    s3.create_bucket(Bucket=bucket)
    for i in range(5):
        s3.put_object(Bucket=bucket, Key=f"f/{i}", Body=b"f" * 100)
    out = ferry(gw, "flush", f"s3://{bucket}/f/")
    assert out.returncode == 0, out.stderr
    assert "durable=True" in out.stdout
    assert seaweed.client().list_objects_v2(Bucket=bucket, Prefix="f/")["KeyCount"] == 5
    assert "durable=True" in ferry(gw, "flush").stdout

    for i in range(5):
        s3.get_object(Bucket=bucket, Key=f"f/{i}")["Body"].read()
    status = ok_json(ferry(gw, "status", "--json"))
    assert {"journal", "cache", "staging"} <= set(status)
    table = ferry(gw, "status")
    assert table.returncode == 0 and "write journal" in table.stdout and "read cache" in table.stdout
    evicted = ok_json(ferry(gw, "evict", f"s3://{bucket}/f/", "--json"))
    assert evicted["entries"] >= 0
    assert ferry(gw, "evict").returncode == 1
    wiped = ferry(gw, "evict", "--wipe")
    assert wiped.returncode == 0 and "evicted" in wiped.stdout
    swept = ferry(gw, "evict", "--orphans")
    assert swept.returncode == 0 and "orphan block files" in swept.stdout, swept.stdout
    assert ok_json(ferry(gw, "evict", "--orphans", "--json")) == {"entries": 0, "bytes": 0}


def test_bucket_owners(gw: GatewayProcess, seaweed: SeaweedServer) -> None:
    """``ferry buckets assign`` gives an existing remote bucket to a tenant, whose key then reaches it."""
    tenant, bucket = uid("own"), seaweed.create_bucket(uid("cli-own"))
    ok_json(ferry(gw, "tenants", "create", tenant, "--json"))
    key = ok_json(ferry(gw, "keys", "create", tenant, "--json"))
    s3 = gw.client(key["access_key"], key["secret_key"])
    assert bucket not in {b["Name"] for b in s3.list_buckets()["Buckets"]}
    assert ok_json(ferry(gw, "buckets", "assign", bucket, tenant, "--json"))["tenant"] == tenant
    assert bucket in {b["Name"] for b in s3.list_buckets()["Buckets"]}
    assert [o["bucket"] for o in ok_json(ferry(gw, "buckets", "list", tenant, "--json"))] == [bucket]
    assert ferry(gw, "buckets", "unassign", bucket).returncode == 0
    assert ferry(gw, "buckets", "unassign", bucket).returncode == 1
    assert bucket not in {b["Name"] for b in s3.list_buckets()["Buckets"]}


def test_admin_tokens(gw: GatewayProcess) -> None:
    tenant = uid("tok")
    ok_json(ferry(gw, "tenants", "create", tenant, "--json"))
    name = uid("ci")
    created = ok_json(ferry(gw, "admin", "tokens", "create", name, "--scope", "read", "--scope", "write",
                            "--tenant", tenant, "--json"))
    assert created["scopes"] == ["read", "write"] and created["tenant"] == tenant and created["token"]
    # The new token works (read, bound to its tenant), and cannot manage tokens (admin scope).
    assert ferry(gw, "buckets", "list", token=created["token"]).returncode == 0
    assert ferry(gw, "admin", "tokens", "list", token=created["token"]).returncode == 2
    listed = ok_json(ferry(gw, "admin", "tokens", "list", "--json"))
    mine = [t for t in listed if t["id"] == created["id"]]
    assert mine and mine[0]["disabled"] is False and all("token" not in t for t in listed)
    table = ferry(gw, "admin", "tokens", "list")
    assert table.returncode == 0 and name in table.stdout and created["token"] not in table.stdout

    plain = ferry(gw, "admin", "tokens", "create", uid("ops"), "--scope", "admin")
    assert plain.returncode == 0 and "token=" in plain.stdout and "shown only now" in plain.stdout

    revoked = ok_json(ferry(gw, "admin", "tokens", "revoke", name, "--json"))  # by name
    assert revoked["id"] == created["id"] and revoked["disabled"] is True
    out = ferry(gw, "buckets", "list", token=created["token"])
    assert out.returncode == 2 and "401" in out.stderr
    by_id = ferry(gw, "admin", "tokens", "revoke", str(created["id"]))
    assert by_id.returncode == 0 and f"revoked admin token {created['id']}" in by_id.stdout


def test_admin_token_errors(gw: GatewayProcess) -> None:
    out = ferry(gw, "admin", "tokens", "create", uid("bad"), "--scope", "root")
    assert out.returncode == 2 and "root" in out.stderr  # refused before asking the gateway
    out = ferry(gw, "admin", "tokens", "create", uid("bad"), "--scope", "admin", "--tenant", "anyone")
    assert out.returncode == 1 and "422" in out.stderr
    out = ferry(gw, "admin", "tokens", "revoke", "no-such-token")
    assert out.returncode == 1 and "no admin token named" in out.stderr
    out = ferry(gw, "admin", "tokens", "revoke", "999999")
    assert out.returncode == 1 and "404" in out.stderr
