"""The admin REST API against a real gateway process (and a real SeaweedFS remote).

One gateway for the module (policies and tenants are node-wide state: kept apart from the
session's shared gateway). Each test names its own tenants, buckets and prefixes.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError

from app.bootstrap import BOOTSTRAP_TENANT
from tests.support.gateway import ADMIN_TOKEN, GatewayProcess, free_port
from tests.support.seaweed import SeaweedServer


@pytest.fixture(scope="module")
def gw(seaweed: SeaweedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    env = {"FERRY_DESTAGE_MAX_ATTEMPTS": "1", "FERRY_DESTAGE_BACKOFF_BASE": "0.2", "FERRY_DESTAGE_BACKOFF_CAP": "0.5"}
    with GatewayProcess(seaweed, tmp_path_factory.mktemp("admin"), env=env) as g:
        yield g


@pytest.fixture(scope="module")
def api(gw: GatewayProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gw.endpoint, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def anon(gw: GatewayProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gw.endpoint, timeout=30) as c:
        yield c


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def eventually(check: Callable[[], Any], timeout: float = 20.0, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        else:
            if result is not False:
                return result
            if time.monotonic() > deadline:
                raise AssertionError("condition not met in time")
        time.sleep(interval)


def s3_code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


# ---- auth and tokens ---------------------------------------------------------------------------
def test_missing_and_unknown_tokens_are_401(anon: httpx.Client) -> None:
    assert anon.get("/admin/tenants").status_code == 401
    r = anon.get("/admin/tenants", headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401 and r.json()["detail"]
    r = anon.post("/admin/flush")
    assert r.status_code == 401


def test_s3_secret_is_not_an_admin_token(anon: httpx.Client) -> None:
    from tests.support.gateway import SECRET_KEY

    r = anon.get("/admin/tenants", headers={"Authorization": f"Bearer {SECRET_KEY}"})
    assert r.status_code == 401


def test_scoped_tokens(api: httpx.Client, anon: httpx.Client) -> None:
    reader = api.post("/admin/tokens", json={"name": uid("reader"), "scopes": ["read"]})
    assert reader.status_code == 201, reader.text
    secret = reader.json()["token"]
    as_reader = {"Authorization": f"Bearer {secret}"}
    assert anon.get("/admin/tenants", headers=as_reader).status_code == 200
    r = anon.post("/admin/tenants", json={"name": uid("t")}, headers=as_reader)
    assert r.status_code == 403 and "write" in r.json()["detail"]

    writer = api.post("/admin/tokens", json={"name": uid("writer"), "scopes": ["write"]}).json()
    as_writer = {"Authorization": f"Bearer {writer['token']}"}
    assert anon.post("/admin/tenants", json={"name": uid("t")}, headers=as_writer).status_code == 201
    assert anon.get("/admin/tenants", headers=as_writer).status_code == 200  # write implies read
    assert anon.get("/admin/tokens", headers=as_writer).status_code == 403  # token management needs admin

    listed = api.get("/admin/tokens").json()
    mine = next(t for t in listed if t["id"] == reader.json()["id"])
    assert "token" not in mine and mine["scopes"] == ["read"] and mine["last_used_at"] is not None

    assert api.post(f"/admin/tokens/{mine['id']}/disable").json()["disabled"] is True
    assert anon.get("/admin/tenants", headers=as_reader).status_code == 401


def test_token_errors(api: httpx.Client) -> None:
    name = uid("dup")
    assert api.post("/admin/tokens", json={"name": name, "scopes": ["read"]}).status_code == 201
    assert api.post("/admin/tokens", json={"name": name, "scopes": ["read"]}).status_code == 409
    assert api.post("/admin/tokens", json={"name": uid("x"), "scopes": ["root"]}).status_code == 422
    assert api.post("/admin/tokens", json={"name": uid("x"), "scopes": []}).status_code == 422
    assert api.post("/admin/tokens/999999/disable").status_code == 404


# ---- tenants and keys --------------------------------------------------------------------------
def test_tenant_lifecycle(api: httpx.Client) -> None:
    name = uid("acme")
    r = api.post("/admin/tenants", json={"name": name, "cache_quota_bytes": 10 * 1024**3})
    assert r.status_code == 201, r.text
    assert r.json()["cache_quota_bytes"] == 10 * 1024**3 and r.json()["keys"] == 0
    assert api.post("/admin/tenants", json={"name": name}).status_code == 409
    assert name in [t["name"] for t in api.get("/admin/tenants").json()]
    assert api.patch(f"/admin/tenants/{name}", json={"cache_quota_bytes": 5}).json()["cache_quota_bytes"] == 5
    assert api.patch(f"/admin/tenants/{name}", json={"disabled": True}).json()["cache_quota_bytes"] == 5
    assert api.patch(f"/admin/tenants/{name}", json={"cache_quota_bytes": None}).json()["cache_quota_bytes"] is None
    assert api.post(f"/admin/tenants/{name}/enable").json()["disabled"] is False
    assert api.post(f"/admin/tenants/{name}/disable").json()["disabled"] is True
    assert api.get(f"/admin/tenants/{name}").json()["disabled"] is True


def test_tenant_errors(api: httpx.Client) -> None:
    assert api.get("/admin/tenants/no-such-tenant").status_code == 404
    assert api.post("/admin/tenants", json={"name": "bad name!"}).status_code == 422
    assert api.post("/admin/tenants", json={"name": "ok", "cache_quota_bytes": -1}).status_code == 422
    assert api.post("/admin/tenants", json={"name": "ok", "typo": 1}).status_code == 422
    assert api.post("/admin/tenants", content=b"{not json", headers={"content-type": "application/json"}
                    ).status_code == 422
    assert api.patch("/admin/tenants/no-such-tenant", json={"disabled": True}).status_code == 404
    assert api.post("/admin/tenants/no-such-tenant/keys").status_code == 404
    assert api.post("/admin/keys/NOSUCHKEY0000000000/rotate").status_code == 404


def test_keys_work_rotate_and_disable(api: httpx.Client, gw: GatewayProcess) -> None:
    tenant = uid("keys")
    api.post("/admin/tenants", json={"name": tenant})
    created = api.post(f"/admin/tenants/{tenant}/keys")
    assert created.status_code == 201, created.text
    key, secret = created.json()["access_key"], created.json()["secret_key"]
    s3 = gw.client(key, secret)
    s3.list_buckets()

    listed = api.get(f"/admin/tenants/{tenant}/keys").json()
    assert [k["access_key"] for k in listed] == [key] and "secret_key" not in listed[0]
    assert key in [k["access_key"] for k in api.get("/admin/keys", params={"tenant": tenant}).json()]
    assert api.get(f"/admin/keys/{key}").json()["tenant"] == tenant
    assert api.get("/admin/tenants/" + tenant).json()["keys"] == 1

    rotated = api.post(f"/admin/keys/{key}/rotate").json()
    assert rotated["access_key"] == key and rotated["secret_key"] != secret
    new_s3 = gw.client(key, rotated["secret_key"])
    eventually(lambda: new_s3.list_buckets() and True, timeout=10)
    with pytest.raises(ClientError) as err:
        gw.client(key, secret).list_buckets()
    assert s3_code(err) == "SignatureDoesNotMatch"

    assert api.post(f"/admin/keys/{key}/disable").json()["disabled"] is True

    def refused() -> None:
        with pytest.raises(ClientError) as err:
            new_s3.list_buckets()
        assert s3_code(err) in ("InvalidAccessKeyId", "AccessDenied")
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403

    eventually(refused, timeout=8)  # the S3 plane caches secrets ~5 s
    assert api.post(f"/admin/keys/{key}/enable").json()["disabled"] is False
    eventually(lambda: new_s3.list_buckets() and True, timeout=10)


def test_disabled_tenant_keys_stop_working(api: httpx.Client, gw: GatewayProcess) -> None:
    tenant = uid("off")
    api.post("/admin/tenants", json={"name": tenant})
    k = api.post(f"/admin/tenants/{tenant}/keys", json={"access_key": "FKCHOSEN" + uuid.uuid4().hex[:12].upper()}).json()
    s3 = gw.client(k["access_key"], k["secret_key"])
    s3.list_buckets()
    api.post(f"/admin/tenants/{tenant}/disable")
    # Wait past the secret cache window, then it must be refused.
    time.sleep(6)
    with pytest.raises(ClientError) as err:
        s3.list_buckets()
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert s3_code(err) in ("InvalidAccessKeyId", "AccessDenied")


# ---- remotes and bucket mappings ---------------------------------------------------------------
def test_remote_crud_and_check(api: httpx.Client, seaweed: SeaweedServer) -> None:
    name = uid("sw")
    body = {"name": name, "endpoint": seaweed.endpoint, "access_key": seaweed.access_key,
            "secret_key": seaweed.secret_key}
    r = api.post("/admin/remotes", json=body)
    assert r.status_code == 201, r.text
    remote = r.json()
    assert remote["has_secret"] is True and "secret_key" not in remote
    assert api.post("/admin/remotes", json=body).status_code == 409
    check = api.post(f"/admin/remotes/{remote['id']}/check").json()
    assert check["ok"] is True and check["latency_ms"] > 0 and check["error"] is None

    patched = api.patch(f"/admin/remotes/{remote['id']}", json={"region": "eu-west-1"}).json()
    assert patched["region"] == "eu-west-1" and patched["endpoint"] == seaweed.endpoint
    assert api.get(f"/admin/remotes/{remote['id']}").json()["region"] == "eu-west-1"
    assert remote["id"] in [x["id"] for x in api.get("/admin/remotes").json()]

    bucket = uid("map")
    r = api.put(f"/admin/bucket-mappings/{bucket}", json={"remote_id": remote["id"], "remote_bucket": "far-away"})
    assert r.status_code == 201 and r.json()["remote_name"] == name
    r = api.put(f"/admin/bucket-mappings/{bucket}", json={"remote_id": remote["id"], "remote_bucket": "other"})
    assert r.status_code == 200 and r.json()["remote_bucket"] == "other"
    assert api.get(f"/admin/bucket-mappings/{bucket}").json()["remote_bucket"] == "other"
    assert bucket in [m["bucket"] for m in api.get("/admin/bucket-mappings").json()]
    assert api.delete(f"/admin/remotes/{remote['id']}").status_code == 409  # still mapped
    assert api.delete(f"/admin/bucket-mappings/{bucket}").status_code == 204
    assert api.get(f"/admin/bucket-mappings/{bucket}").status_code == 404
    assert api.delete(f"/admin/remotes/{remote['id']}").status_code == 204
    assert api.get(f"/admin/remotes/{remote['id']}").status_code == 404


def test_remote_check_reports_an_unreachable_remote_quickly(api: httpx.Client) -> None:
    r = api.post("/admin/remotes", json={"name": uid("dead"), "endpoint": f"http://127.0.0.1:{free_port()}",
                                        "access_key": "a", "secret_key": "b"}).json()
    started = time.monotonic()
    check = api.post(f"/admin/remotes/{r['id']}/check").json()
    assert time.monotonic() - started < 15
    assert check["ok"] is False and check["error"]


def test_remote_errors(api: httpx.Client) -> None:
    assert api.post("/admin/remotes", json={"name": uid("x"), "endpoint": "ftp://nope"}).status_code == 422
    assert api.post("/admin/remotes", json={"name": uid("x"), "endpoint": "http://h:99999"}).status_code == 422
    assert api.get("/admin/remotes/424242").status_code == 404
    assert api.post("/admin/remotes/424242/check").status_code == 404
    assert api.put("/admin/bucket-mappings/some-bucket", json={"remote_id": 424242, "remote_bucket": "bbb"}
                   ).status_code == 404
    assert api.put("/admin/bucket-mappings/Bad_Bucket", json={"remote_id": 1, "remote_bucket": "b"}).status_code == 422


def test_default_remote_check(api: httpx.Client, seaweed: SeaweedServer) -> None:
    r = api.get("/admin/remote").json()
    assert r["endpoint"] == seaweed.endpoint and r["check"]["ok"] is True


# ---- policies ----------------------------------------------------------------------------------
def test_policy_crud_and_effective(api: httpx.Client) -> None:
    bucket = uid("pol")
    r = api.post("/admin/policies", json={"bucket": bucket, "prefix": "", "revalidate": "immutable"})
    assert r.status_code == 201, r.text
    base = r.json()
    r = api.post("/admin/policies", json={"bucket": bucket, "prefix": "hot/", "pinned": True, "ttl_seconds": 30})
    assert r.status_code == 201
    hot = r.json()
    again = api.post("/admin/policies", json={"bucket": bucket, "prefix": "hot/", "pinned": True, "ttl_seconds": 60})
    assert again.status_code == 200 and again.json()["id"] == hot["id"] and again.json()["ttl_seconds"] == 60

    eff = api.get("/admin/policies/effective", params={"bucket": bucket, "key": "hot/a"}).json()
    assert eff["policy"]["revalidate"] == "immutable" and eff["policy"]["pinned"] is True
    assert [x["id"] for x in eff["rules"]][-2:] == [base["id"], hot["id"]]
    cold = api.get("/admin/policies/effective", params={"bucket": bucket, "key": "cold/a"}).json()
    assert cold["policy"]["pinned"] is False

    put = api.put(f"/admin/policies/{hot['id']}", json={"admission": "second-hit"}).json()
    assert put["admission"] == "second-hit" and put["pinned"] is None and put["prefix"] == "hot/"
    assert api.get(f"/admin/policies/{hot['id']}").json()["admission"] == "second-hit"
    assert hot["id"] in [p["id"] for p in api.get("/admin/policies").json()]
    assert api.delete(f"/admin/policies/{hot['id']}").status_code == 204
    assert api.get(f"/admin/policies/{hot['id']}").status_code == 404
    assert api.delete(f"/admin/policies/{hot['id']}").status_code == 404
    api.delete(f"/admin/policies/{base['id']}")


@pytest.mark.parametrize("body", [
    {"bucket": "b-ok", "mode": "turbo"},
    {"bucket": "b-ok", "revalidate": "sometimes"},
    {"bucket": "b-ok", "ttl_seconds": -1},
    {"bucket": "b-ok", "quota_bytes": -5},
    {"bucket": "", "mode": "bypass"},
    {"bucket": "NOT_A_BUCKET"},
    {"bucket": "b-ok", "prefix": "a\u0000b"},
    {"bucket": "b-ok", "admission": "never"},
    {"bucket": "b-ok", "write_replicas": 3},
    {"bucket": "b-ok", "write_replicas": 0},
])
def test_policy_validation(api: httpx.Client, body: dict[str, Any]) -> None:
    r = api.post("/admin/policies", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"]


def test_policy_change_applies_without_restart(api: httpx.Client, gw: GatewayProcess) -> None:
    s3 = gw.client()
    bucket = uid("ro")
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="before", Body=b"1")
    rule = api.post("/admin/policies", json={"bucket": bucket, "mode": "read-only"}).json()
    try:
        def refused() -> None:
            with pytest.raises(ClientError) as err:
                s3.put_object(Bucket=bucket, Key="during", Body=b"2")
            assert s3_code(err) == "AccessDenied"

        eventually(refused, timeout=10)
        assert s3.get_object(Bucket=bucket, Key="before")["Body"].read() == b"1"  # reads still served
    finally:
        api.delete(f"/admin/policies/{rule['id']}")
    eventually(lambda: s3.put_object(Bucket=bucket, Key="after", Body=b"3") and True, timeout=10)


# ---- journal -----------------------------------------------------------------------------------
def test_journal_summary_entries_and_retry(api: httpx.Client, gw: GatewayProcess, seaweed: SeaweedServer) -> None:
    s3 = gw.client()
    bucket = uid("jr")
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="first", Body=b"ok")
    assert api.post("/admin/flush", params={"bucket": bucket}).json()["durable"] is True
    # The remote loses the bucket: the next write is refused by it (4xx) and fails after 1 attempt.
    remote = seaweed.client()
    remote.delete_object(Bucket=bucket, Key="first")
    remote.delete_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="doomed", Body=b"x" * 10)

    def failed() -> dict[str, Any]:
        rows = api.get("/admin/journal", params={"state": "failed", "bucket": bucket}).json()["entries"]
        assert rows, "not failed yet"
        return rows[0]

    row = eventually(failed, timeout=30)
    assert row["key"] == "doomed" and row["status"] == "failed" and row["attempts"] >= 1
    assert row["last_error"] and row["age_seconds"] >= 0

    summary = api.get("/admin/journal/summary", params={"bucket": bucket}).json()
    assert summary["failed"] == 1 and summary["dirty_bytes"] == 10 and summary["oldest_dirty_age_seconds"] >= 0
    overall = api.get("/admin/journal/summary").json()
    assert overall["failed"] >= 1 and overall["max_seq"] >= row["seq"]

    seaweed.create_bucket(bucket)  # the operator fixes the cause, then retries
    r = api.post(f"/admin/journal/{row['seq']}/retry")
    assert r.status_code == 200 and r.json()["status"] == "pending"

    def durable() -> None:
        summary = api.get("/admin/journal/summary", params={"bucket": bucket}).json()
        assert summary["dirty_objects"] == 0, summary

    eventually(durable, timeout=30)
    assert remote.get_object(Bucket=bucket, Key="doomed")["Body"].read() == b"x" * 10
    assert api.post(f"/admin/journal/{row['seq']}/retry").status_code == 409  # durable now
    assert api.post("/admin/journal/987654321/retry").status_code == 404
    assert api.get("/admin/journal", params={"state": "bogus"}).status_code == 422
    states = api.get("/admin/objects", params={"bucket": bucket}).json()["versions"]
    assert {v["key"]: v["state"] for v in states}["doomed"] == "durable"


# ---- read cache --------------------------------------------------------------------------------
def test_cache_usage_evict_and_wipe(api: httpx.Client, gw: GatewayProcess, seaweed: SeaweedServer) -> None:
    bucket = seaweed.create_bucket(uid("cache"))
    remote = seaweed.client()
    for i in range(3):
        remote.put_object(Bucket=bucket, Key=f"p/{i}", Body=b"c" * 1000)
    s3 = gw.client()
    for i in range(3):
        assert s3.get_object(Bucket=bucket, Key=f"p/{i}")["Body"].read() == b"c" * 1000

    def cached() -> dict[str, Any]:
        usage = api.get("/admin/cache/usage").json()
        row = next((b for b in usage["buckets"] if b["name"] == bucket), None)
        assert row and row["entries"] == 3 and row["bytes"] == 3000, usage
        return usage

    usage = eventually(cached, timeout=10)
    assert usage["capacity_bytes"] > 0 and usage["nodes"] and usage["tenants"]
    evicted = api.post("/admin/cache/evict", json={"bucket": bucket, "prefix": "p/"}).json()
    assert evicted == {"entries": 3, "bytes": 3000}
    assert bucket not in [b["name"] for b in api.get("/admin/cache/usage").json()["buckets"]]
    assert api.post("/admin/cache/evict", json={"bucket": "Bad!", "prefix": ""}).status_code == 422
    s3.get_object(Bucket=bucket, Key="p/0")["Body"].read()

    def recorded() -> None:  # an object without a stored checksum may end its GET before its row
        row = next((b for b in api.get("/admin/cache/usage").json()["buckets"] if b["name"] == bucket), None)
        assert row and row["bytes"] == 1000

    eventually(recorded, timeout=10)
    wiped = api.post("/admin/cache/wipe").json()
    assert wiped["entries"] >= 1 and wiped["bytes"] >= 1000


# ---- staging -----------------------------------------------------------------------------------
def test_staging_job_warms_a_prefix(api: httpx.Client, seaweed: SeaweedServer) -> None:
    bucket = seaweed.create_bucket(uid("stage"))
    remote = seaweed.client()
    for i in range(25):
        remote.put_object(Bucket=bucket, Key=f"data/{i:03d}", Body=bytes([i]) * 4096)
    remote.put_object(Bucket=bucket, Key="other/x", Body=b"not staged")

    r = api.post("/admin/staging", json={"bucket": bucket, "prefix": "data/"})
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]

    def finished() -> dict[str, Any]:
        job = api.get(f"/admin/staging/{job_id}").json()
        assert job["state"] in ("done", "failed", "cancelled"), job
        return job

    job = eventually(finished, timeout=60)
    assert job["state"] == "done", job
    assert job["objects_total"] == 25 and job["objects_done"] == 25 and job["objects_skipped"] == 0
    assert job["bytes_total"] == 25 * 4096 and job["bytes_done"] == 25 * 4096
    assert job["listing_done"] is True and job["percent"] == 100.0 and job["rate_bytes_per_second"] is not None
    assert job_id in [j["id"] for j in api.get("/admin/staging").json()]

    again = api.post("/admin/staging", json={"bucket": bucket, "prefix": "data/"}).json()
    job2 = eventually(lambda: (j := api.get(f"/admin/staging/{again['id']}").json())["state"] != "running"
                      and j["state"] != "queued" and j, timeout=60)
    assert job2["state"] == "done" and job2["objects_skipped"] == 25  # all fresh already

    assert api.post(f"/admin/staging/{job_id}/cancel").status_code == 409
    assert api.get("/admin/staging/doesnotexist").status_code == 404
    assert api.post("/admin/staging/doesnotexist/cancel").status_code == 404


def test_staged_data_belongs_to_the_bucket_owner_when_an_admin_stages(api: httpx.Client,
                                                                      seaweed: SeaweedServer) -> None:
    """Issue 31: an admin's `ferry stage` cached entries of no tenant: `ferry status` listed the
    bucket's tenant with 0 B beside a total of 190 MiB, and a "tenant -" row after a restart."""
    bucket = seaweed.create_bucket(uid("stage-owner"))
    for i in range(3):
        seaweed.client().put_object(Bucket=bucket, Key=f"d/{i}", Body=bytes([i]) * 8192)
    # made on the remote, so unowned: the bootstrap tenant's (test_tenancy.py)
    owner = {"tenant_id": next(t["id"] for t in api.get("/admin/tenants").json() if t["name"] == BOOTSTRAP_TENANT)}
    r = api.post("/admin/staging", json={"bucket": bucket, "prefix": "d/"})
    assert r.status_code == 201, r.text
    job = eventually(lambda: (j := api.get(f"/admin/staging/{r.json()['id']}").json())["state"]
                     not in ("queued", "running") and j, timeout=60)
    assert job["state"] == "done", job
    assert job["tenant_id"] is not None and job["tenant_id"] == owner["tenant_id"], (job, owner)
    usage = api.get("/admin/cache/usage").json()
    assert [t for t in usage["tenants"] if t["tenant_id"] is None] == [], usage["tenants"]
    mine = [t for t in usage["tenants"] if t["tenant_id"] == owner["tenant_id"]]
    assert mine and mine[0]["bytes"] >= 3 * 8192, usage["tenants"]


def test_staging_cancel_and_bad_bucket(api: httpx.Client, seaweed: SeaweedServer) -> None:
    bucket = seaweed.create_bucket(uid("stc"))
    remote = seaweed.client()
    for i in range(60):
        remote.put_object(Bucket=bucket, Key=f"k/{i:03d}", Body=b"z" * 65536)
    job = api.post("/admin/staging", json={"bucket": bucket, "prefix": "k/"}).json()
    cancelled = api.post(f"/admin/staging/{job['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    time.sleep(1.5)
    assert api.get(f"/admin/staging/{job['id']}").json()["state"] == "cancelled"

    missing = api.post("/admin/staging", json={"bucket": uid("nobucket"), "prefix": ""}).json()
    job = eventually(lambda: (j := api.get(f"/admin/staging/{missing['id']}").json())["state"] == "failed" and j)
    assert "NoSuchBucket" in job["error"]
    assert api.post("/admin/staging", json={"bucket": "x", "prefix": ""}).status_code == 422
    assert api.post("/admin/staging", json={"bucket": bucket, "tenant": "no-such-tenant"}).status_code == 404


# ---- health ------------------------------------------------------------------------------------
def test_readyz(anon: httpx.Client, api: httpx.Client) -> None:
    assert anon.get("/readyz").json() == {"ready": True}  # details only with a token
    r = api.get("/readyz")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["ready"] is True
    assert {"catalog", "remote", "disk"} <= set(body["checks"]) and all(c["ok"] for c in body["checks"].values())
    assert anon.get("/healthz").json() == {"status": "ok"}


def test_readyz_fails_on_low_disk_and_dead_remote(seaweed: SeaweedServer, tmp_path: Any) -> None:
    class Dead:
        endpoint = f"http://127.0.0.1:{free_port()}"
        access_key = "a"
        secret_key = "b"

    env = {"FERRY_READY_MIN_FREE_RATIO": "1.0", "FERRY_REMOTE_CONNECT_TIMEOUT": "1"}
    with GatewayProcess(Dead(), tmp_path / "gw", env=env) as g:
        r = httpx.get(f"{g.endpoint}/readyz", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30)
        assert r.status_code == 503
        checks = r.json()["checks"]
        assert checks["catalog"]["ok"] is True
        assert checks["disk"]["ok"] is False and "needs at least" in checks["disk"]["detail"]
        assert checks["remote"]["ok"] is False and checks["remote"]["detail"]


def test_openapi_schema_is_served(anon: httpx.Client) -> None:
    schema = anon.get("/admin/openapi.json").json()
    for path in ("/admin/tenants", "/admin/policies/effective", "/admin/journal/summary", "/admin/staging/{job_id}",
                 "/admin/cache/usage", "/admin/remotes/{remote_id}/check", "/readyz", "/admin/flush"):
        assert path in schema["paths"], path
    assert "AdminToken" in schema["components"]["securitySchemes"]


def test_staging_job_of_a_killed_gateway_is_marked_failed(seaweed: SeaweedServer, tmp_path: Any) -> None:
    bucket = seaweed.create_bucket(uid("stk"))
    remote = seaweed.client()
    for i in range(300):
        remote.put_object(Bucket=bucket, Key=f"k/{i:04d}", Body=b"k" * 1024)
    with GatewayProcess(seaweed, tmp_path / "gw") as g:
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        job = httpx.post(f"{g.endpoint}/admin/staging", json={"bucket": bucket, "prefix": "k/"}, headers=headers,
                         timeout=30).json()
        g.kill()  # mid-job: nothing can finish it
        g.start()
        after = httpx.get(f"{g.endpoint}/admin/staging/{job['id']}", headers=headers, timeout=30).json()
        assert after["state"] == "failed" and "interrupted" in after["error"]
