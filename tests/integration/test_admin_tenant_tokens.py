"""Admin tokens bound to a tenant (issue 15, tenancy): a ``read``/``write`` token scoped to tenant A
sees and changes only A's buckets through the admin API (owners, policies, staging jobs, journal,
flush, evict) and gets 403 on B's buckets and on every endpoint that is not about a bucket.
S3 keys are held to their tenant's buckets by test_tenancy.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.test_tenancy import admin, new_tenant, uid
from tests.support.gateway import GatewayProcess
from tests.support.seaweed import SeaweedServer


@pytest.fixture(scope="module")
def gw(seaweed: SeaweedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(seaweed, tmp_path_factory.mktemp("tenant-tokens")) as g:
        yield g


def token(gw: GatewayProcess, tenant: str, scopes: list[str]) -> httpx.Client:
    with admin(gw) as api:
        made = api.post("/admin/tokens", json={"name": uid("tok"), "scopes": scopes, "tenant": tenant})
        assert made.status_code == 201, made.text
        assert made.json()["tenant"] == tenant
    return httpx.Client(base_url=gw.endpoint, headers={"Authorization": f"Bearer {made.json()['token']}"}, timeout=30)


@pytest.fixture(scope="module")
def world(gw: GatewayProcess) -> dict[str, Any]:
    """Tenants A and B, one bucket and object each, a policy and a staging job on B's bucket."""
    a, b = new_tenant(gw), new_tenant(gw)
    bucket_a, bucket_b = uid("tka"), uid("tkb")
    a.create_bucket(Bucket=bucket_a)
    b.create_bucket(Bucket=bucket_b)
    a.put_object(Bucket=bucket_a, Key="k", Body=b"A's data")
    b.put_object(Bucket=bucket_b, Key="k", Body=b"B's data")
    with admin(gw) as api:
        rule_b = api.post("/admin/policies", json={"bucket": bucket_b, "prefix": "p/", "ttl_seconds": 7})
        job_b = api.post("/admin/staging", json={"bucket": bucket_b})
        assert rule_b.status_code == 201 and job_b.status_code == 201, (rule_b.text, job_b.text)
    return {"a": a, "b": b, "bucket_a": bucket_a, "bucket_b": bucket_b,
            "rule_b": rule_b.json()["id"], "job_b": job_b.json()["id"]}


def test_a_bound_token_reaches_only_its_tenants_buckets(gw: GatewayProcess, world: dict[str, Any]) -> None:
    a_name, bucket_a, bucket_b = world["a"].tenant_name, world["bucket_a"], world["bucket_b"]
    rule_b, job_b = world["rule_b"], world["job_b"]
    with token(gw, a_name, ["write"]) as tok:
        # its own buckets: allowed
        assert tok.get(f"/admin/buckets/{bucket_a}").status_code == 200
        assert [o["bucket"] for o in tok.get("/admin/buckets").json()] == [bucket_a]
        made = tok.post("/admin/policies", json={"bucket": bucket_a, "prefix": "x/", "ttl_seconds": 3})
        assert made.status_code == 201, made.text
        assert tok.put(f"/admin/policies/{made.json()['id']}", json={"ttl_seconds": 4}).status_code == 200
        assert [r["bucket"] for r in tok.get("/admin/policies").json()] == [bucket_a]
        assert tok.get("/admin/policies/effective", params={"bucket": bucket_a}).status_code == 200
        job = tok.post("/admin/staging", json={"bucket": bucket_a})
        assert job.status_code == 201, job.text
        assert {j["bucket"] for j in tok.get("/admin/staging").json()} == {bucket_a}
        assert tok.get(f"/admin/staging/{job.json()['id']}").status_code == 200
        assert tok.post("/admin/cache/evict", json={"bucket": bucket_a}).status_code == 200
        assert tok.get("/admin/cache/object", params={"bucket": bucket_a, "key": "k"}).status_code == 200
        assert tok.post("/admin/flush", params={"bucket": bucket_a, "timeout": 30}).json()["durable"]
        assert tok.get("/admin/journal", params={"bucket": bucket_a}).status_code == 200
        assert tok.get("/admin/journal/summary", params={"bucket": bucket_a}).status_code == 200
        assert tok.get("/admin/objects", params={"bucket": bucket_a}).status_code == 200

        # another tenant's bucket, or every bucket at once: 403
        refused = {
            "owner": tok.get(f"/admin/buckets/{bucket_b}"),
            "owners of B": tok.get("/admin/buckets", params={"tenant": world["b"].tenant_name}),
            "policy on B": tok.post("/admin/policies", json={"bucket": bucket_b, "prefix": "", "mode": "bypass"}),
            "policy on *": tok.post("/admin/policies", json={"bucket": "*", "prefix": "", "mode": "bypass"}),
            "effective on B": tok.get("/admin/policies/effective", params={"bucket": bucket_b}),
            "stage B": tok.post("/admin/staging", json={"bucket": bucket_b}),
            "stage for B": tok.post("/admin/staging", json={"bucket": bucket_a, "tenant": world["b"].tenant_name}),
            "evict B": tok.post("/admin/cache/evict", json={"bucket": bucket_b}),
            "B's cache": tok.get("/admin/cache/object", params={"bucket": bucket_b, "key": "k"}),
            "flush B": tok.post("/admin/flush", params={"bucket": bucket_b}),
            "flush all": tok.post("/admin/flush"),
            "B's journal": tok.get("/admin/journal", params={"bucket": bucket_b}),
            "whole journal": tok.get("/admin/journal"),
            "B's summary": tok.get("/admin/journal/summary", params={"bucket": bucket_b}),
            "B's objects": tok.get("/admin/objects", params={"bucket": bucket_b}),
            # endpoints that are not about one bucket are for unbound tokens only
            "give B's bucket": tok.put(f"/admin/buckets/{bucket_b}", json={"tenant": a_name}),
            "take own bucket away": tok.delete(f"/admin/buckets/{bucket_a}"),
            "wipe": tok.post("/admin/cache/wipe"),
            "usage": tok.get("/admin/cache/usage"),
            "tenants": tok.get("/admin/tenants"),
            "keys": tok.get("/admin/keys"),
            "remotes": tok.get("/admin/remotes"),
            "stats": tok.get("/admin/stats"),
            "tokens": tok.get("/admin/tokens"),
        }
        wrong = {what: r.status_code for what, r in refused.items()
                 if not (r.status_code == 403 or (what == "owners of B" and r.json() == []))}
        assert not wrong, wrong
        hidden = _answers_by_id(tok, rule_b, job_b)
        absent = _answers_by_id(tok, 2**62, "absent0000000000")
        # records named by id: B's answers exactly as an absent one (issue 25: 403 told they exist)
        for what, (status, detail) in hidden.items():
            assert status == 404 and detail == absent[what][1].replace(str(2**62), str(rule_b)).replace(
                "absent0000000000", job_b), (what, status, detail, absent[what])

    with admin(gw) as api:  # B's things are as they were
        assert api.get(f"/admin/policies/{rule_b}").json()["ttl_seconds"] == 7
        assert api.get(f"/admin/buckets/{bucket_b}").json()["tenant"] == world["b"].tenant_name
        assert api.get(f"/admin/staging/{job_b}").json()["bucket"] == bucket_b
    assert world["b"].get_object(Bucket=bucket_b, Key="k")["Body"].read() == b"B's data"


def _answers_by_id(tok: httpx.Client, rule: int, job: str) -> dict[str, tuple[int, str]]:
    """(status, detail) of every endpoint that names a policy or a staging job by its id."""
    calls = {
        "rule": tok.get(f"/admin/policies/{rule}"),
        "replace rule": tok.put(f"/admin/policies/{rule}", json={"mode": "bypass"}),
        "delete rule": tok.delete(f"/admin/policies/{rule}"),
        "job": tok.get(f"/admin/staging/{job}"),
        "cancel job": tok.post(f"/admin/staging/{job}/cancel"),
    }
    return {what: (r.status_code, r.json().get("detail", "")) for what, r in calls.items()}


def test_a_bound_read_token_cannot_write(gw: GatewayProcess, world: dict[str, Any]) -> None:
    with token(gw, world["a"].tenant_name, ["read"]) as tok:
        assert tok.get(f"/admin/buckets/{world['bucket_a']}").status_code == 200
        assert tok.post("/admin/policies", json={"bucket": world["bucket_a"], "prefix": "r/"}).status_code == 403
        assert tok.post("/admin/cache/evict", json={"bucket": world["bucket_a"]}).status_code == 403
        assert tok.post("/admin/staging", json={"bucket": world["bucket_a"]}).status_code == 403


def test_bound_tokens_hold_read_and_write_only(gw: GatewayProcess, world: dict[str, Any]) -> None:
    with admin(gw) as api:
        bound_admin = api.post("/admin/tokens", json={"name": uid("tok"), "scopes": ["admin"],
                                                      "tenant": world["a"].tenant_name})
        assert bound_admin.status_code == 422, bound_admin.text
        unknown = api.post("/admin/tokens", json={"name": uid("tok"), "scopes": ["read"], "tenant": uid("none")})
        assert unknown.status_code == 404, unknown.text
        listed = {t["name"]: t for t in api.get("/admin/tokens").json()}
        assert any(t["tenant"] == world["a"].tenant_name for t in listed.values())
