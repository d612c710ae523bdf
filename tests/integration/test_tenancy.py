"""Tenant isolation through a real gateway and a real SeaweedFS: a tenant's keys reach only the
buckets it owns, on every S3 operation; ListBuckets shows only those; FERRY_TENANCY=shared lifts
the rule; the admin API gives an existing remote bucket to a tenant.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError

from tests.support.counting_proxy import CountingProxy
from tests.support.gateway import ADMIN_TOKEN, GatewayProcess
from tests.support.seaweed import SeaweedServer


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def gw(seaweed: SeaweedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(seaweed, tmp_path_factory.mktemp("tenancy")) as g:
        yield g


def admin(gw: GatewayProcess) -> httpx.Client:
    return httpx.Client(base_url=gw.endpoint, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30)


def new_tenant(gw: GatewayProcess) -> Any:
    """A tenant with one key, created through the admin API; returns its S3 client."""
    name = uid("tn")
    with admin(gw) as api:
        assert api.post("/admin/tenants", json={"name": name}).status_code == 201
        key = api.post(f"/admin/tenants/{name}/keys").json()
    client = gw.client(key["access_key"], key["secret_key"])
    client.tenant_name = name
    client.presigner = gw.client(key["access_key"], key["secret_key"], signature_version="s3v4")
    return client


def denied(call: Callable[[], Any], code: str = "AccessDenied", *, head: bool = False) -> None:
    """The call fails with ``code`` (a HEAD answer has no body: only its status is checked)."""
    with pytest.raises(ClientError) as err:
        call()
    assert err.value.response["Error"]["Code"] == ("403" if head else code), err.value.response
    conflict = code in ("BucketAlreadyExists", "OperationAborted")
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == (409 if conflict else 403)


def names(client: Any) -> set[str]:
    return {b["Name"] for b in client.list_buckets()["Buckets"]}


def test_tenant_b_cannot_reach_tenant_a_bucket(gw: GatewayProcess) -> None:
    a, b = new_tenant(gw), new_tenant(gw)
    bucket_a, bucket_b = uid("ta"), uid("tb")
    a.create_bucket(Bucket=bucket_a)
    b.create_bucket(Bucket=bucket_b)
    a.put_object(Bucket=bucket_a, Key="secret", Body=b"A's data")
    b.put_object(Bucket=bucket_b, Key="mine", Body=b"B's data")
    upload = a.create_multipart_upload(Bucket=bucket_a, Key="mp")["UploadId"]

    assert bucket_a in names(a) and bucket_b not in names(a)
    assert bucket_b in names(b) and bucket_a not in names(b)

    denied(lambda: b.head_bucket(Bucket=bucket_a), head=True)
    denied(lambda: b.list_objects_v2(Bucket=bucket_a))
    denied(lambda: b.list_objects(Bucket=bucket_a))
    denied(lambda: b.get_object(Bucket=bucket_a, Key="secret"))
    denied(lambda: b.head_object(Bucket=bucket_a, Key="secret"), head=True)
    denied(lambda: b.put_object(Bucket=bucket_a, Key="secret", Body=b"overwritten"))
    denied(lambda: b.delete_object(Bucket=bucket_a, Key="secret"))
    denied(lambda: b.delete_objects(Bucket=bucket_a, Delete={"Objects": [{"Key": "secret"}]}))
    denied(lambda: b.copy_object(Bucket=bucket_b, Key="stolen", CopySource={"Bucket": bucket_a, "Key": "secret"}))
    denied(lambda: b.copy_object(Bucket=bucket_a, Key="planted", CopySource={"Bucket": bucket_b, "Key": "mine"}))
    denied(lambda: b.create_multipart_upload(Bucket=bucket_a, Key="mp2"))
    denied(lambda: b.upload_part(Bucket=bucket_a, Key="mp", UploadId=upload, PartNumber=1, Body=b"x"))
    denied(lambda: b.list_parts(Bucket=bucket_a, Key="mp", UploadId=upload))
    denied(lambda: b.list_multipart_uploads(Bucket=bucket_a))
    denied(lambda: b.complete_multipart_upload(Bucket=bucket_a, Key="mp", UploadId=upload,
                                               MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": '"x"'}]}))
    denied(lambda: b.abort_multipart_upload(Bucket=bucket_a, Key="mp", UploadId=upload))
    b_upload = b.create_multipart_upload(Bucket=bucket_b, Key="mp")["UploadId"]
    denied(lambda: b.upload_part_copy(Bucket=bucket_b, Key="mp", UploadId=b_upload, PartNumber=1,
                                      CopySource={"Bucket": bucket_a, "Key": "secret"}))
    denied(lambda: b.get_bucket_location(Bucket=bucket_a))
    denied(lambda: b.delete_bucket(Bucket=bucket_a))
    denied(lambda: b.create_bucket(Bucket=bucket_a), "BucketAlreadyExists")
    url = b.presigner.generate_presigned_url("get_object", Params={"Bucket": bucket_a, "Key": "secret"})
    r = httpx.get(url, timeout=30)
    assert r.status_code == 403 and b"<Code>AccessDenied</Code>" in r.content, r.text
    url = a.presigner.generate_presigned_url("get_object", Params={"Bucket": bucket_a, "Key": "secret"})
    assert httpx.get(url, timeout=30).content == b"A's data"

    # A still has everything, untouched; and A's own operations all work.
    assert a.get_object(Bucket=bucket_a, Key="secret")["Body"].read() == b"A's data"
    assert [o["Key"] for o in a.list_objects_v2(Bucket=bucket_a)["Contents"]] == ["secret"]
    a.upload_part(Bucket=bucket_a, Key="mp", UploadId=upload, PartNumber=1, Body=b"part")
    a.abort_multipart_upload(Bucket=bucket_a, Key="mp", UploadId=upload)
    a.copy_object(Bucket=bucket_a, Key="copy", CopySource={"Bucket": bucket_a, "Key": "secret"})
    a.delete_objects(Bucket=bucket_a, Delete={"Objects": [{"Key": "copy"}]})
    a.create_bucket(Bucket=bucket_a)  # re-creating one's own bucket is a no-op (us-east-1)


def test_unowned_buckets_belong_to_the_bootstrap_tenant(gw: GatewayProcess, seaweed: SeaweedServer) -> None:
    """A bucket that exists on the remote without an owner is the bootstrap key's (the
    single-tenant setup works as before); no other tenant reaches or claims it."""
    existing = seaweed.create_bucket(uid("pre"))
    operator, c = gw.client(), new_tenant(gw)
    operator.put_object(Bucket=existing, Key="k", Body=b"ops")
    assert existing in names(operator) and existing not in names(c)
    denied(lambda: c.get_object(Bucket=existing, Key="k"))
    denied(lambda: c.create_bucket(Bucket=existing), "BucketAlreadyExists")
    denied(lambda: c.list_objects_v2(Bucket=existing))
    # The bootstrap key still cannot reach another tenant's bucket.
    owned = uid("own")
    c.create_bucket(Bucket=owned)
    denied(lambda: operator.list_objects_v2(Bucket=owned))
    assert owned not in names(operator)


def test_admin_api_assigns_an_existing_remote_bucket(gw: GatewayProcess, seaweed: SeaweedServer) -> None:
    existing = seaweed.create_bucket(uid("asg"))
    operator, d = gw.client(), new_tenant(gw)
    operator.put_object(Bucket=existing, Key="k", Body=b"data")
    with admin(gw) as api:
        assert api.get(f"/admin/buckets/{existing}").status_code == 404
        r = api.put(f"/admin/buckets/{existing}", json={"tenant": d.tenant_name})
        assert r.status_code == 201, r.text
        assert r.json()["tenant"] == d.tenant_name
        assert api.put(f"/admin/buckets/{existing}", json={"tenant": d.tenant_name}).status_code == 200
        assert api.get(f"/admin/buckets/{existing}").json()["tenant"] == d.tenant_name
        assert existing in [o["bucket"] for o in api.get("/admin/buckets", params={"tenant": d.tenant_name}).json()]
        assert api.put(f"/admin/buckets/{existing}", json={"tenant": "no-such-tenant"}).status_code == 404
        assert api.put("/admin/buckets/Bad_Name", json={"tenant": d.tenant_name}).status_code == 422

        assert d.get_object(Bucket=existing, Key="k")["Body"].read() == b"data"
        assert existing in names(d)
        denied(lambda: operator.get_object(Bucket=existing, Key="k"))
        assert existing not in names(operator)

        assert api.delete(f"/admin/buckets/{existing}").status_code == 204
        assert api.delete(f"/admin/buckets/{existing}").status_code == 404
    assert operator.get_object(Bucket=existing, Key="k")["Body"].read() == b"data"
    denied(lambda: d.get_object(Bucket=existing, Key="k"))


def test_two_tenants_racing_to_create_one_bucket_one_owns_it(gw: GatewayProcess) -> None:
    race_to_create(gw, [new_tenant(gw) for _ in range(4)], uid("race"))


def test_tenants_racing_to_create_a_bucket_many_times(gw: GatewayProcess) -> None:
    """The race repeated: a loser must always get BucketAlreadyExists (409), never NoSuchBucket
    (under load SeaweedFS answers NoSuchBucket to the losers' CreateBucket itself)."""
    clients = [new_tenant(gw) for _ in range(4)]
    for _ in range(25):
        race_to_create(gw, clients, uid("races"))


def test_a_loser_whose_head_does_not_see_the_winners_bucket_yet_gets_bucket_already_exists(
        seaweed: SeaweedServer, proxy: CountingProxy, tmp_path: Any) -> None:
    """The race's window, made deterministic: the remote says the name exists (another creator
    made it) but a HEAD right after does not see it yet (the remote's create is not visible
    everywhere at once). The answer is still BucketAlreadyExists (409), not NoSuchBucket."""
    bucket = seaweed.create_bucket(uid("win"))  # the winner's bucket; no tenant owns it yet
    with GatewayProcess(proxy, tmp_path) as g:
        loser = new_tenant(g)
        proxy.fail_with, proxy.fail_code = 404, "NoSuchBucket"
        proxy.fail_only = lambda method, path: method == "HEAD" and path.strip("/") == bucket
        try:
            denied(lambda: loser.create_bucket(Bucket=bucket), "BucketAlreadyExists")
        finally:
            proxy.fail_with, proxy.fail_only = None, None


def _first_creates_fail(proxy: CountingProxy, bucket: str, times: int) -> None:
    """The remote's answer to the next ``times`` CreateBucket of ``bucket``: NoSuchBucket, as
    SeaweedFS answers the losers of racing creates on a loaded machine."""
    left = [times]

    def only(method: str, path: str) -> bool:
        if method == "PUT" and path.split("?")[0].strip("/") == bucket and left[0] > 0:
            left[0] -= 1
            return True
        return False

    proxy.fail_with, proxy.fail_code, proxy.fail_only = 404, "NoSuchBucket", only


def test_a_create_the_remote_answers_no_such_bucket_is_asked_again(
        seaweed: SeaweedServer, proxy: CountingProxy, tmp_path: Any) -> None:
    """A racing loser's NoSuchBucket from the remote's CreateBucket becomes BucketAlreadyExists
    once the remote says the name is taken; a lone creator's spurious one becomes its bucket;
    a remote that keeps saying it gets OperationAborted (409, retryable), never NoSuchBucket."""
    taken = seaweed.create_bucket(uid("win"))  # the winner's bucket; no tenant owns it yet
    with GatewayProcess(proxy, tmp_path) as g:
        loser, alone = new_tenant(g), new_tenant(g)
        try:
            _first_creates_fail(proxy, taken, 1)
            denied(lambda: loser.create_bucket(Bucket=taken), "BucketAlreadyExists")
            mine = uid("alone")
            _first_creates_fail(proxy, mine, 2)
            alone.create_bucket(Bucket=mine)
            alone.put_object(Bucket=mine, Key="k", Body=b"x")  # its owner's bucket
            denied(lambda: loser.put_object(Bucket=mine, Key="k", Body=b"y"))
            stuck = uid("stuck")
            _first_creates_fail(proxy, stuck, 1000)
            denied(lambda: alone.create_bucket(Bucket=stuck), "OperationAborted")
        finally:
            proxy.fail_with, proxy.fail_only = None, None


def race_to_create(gw: GatewayProcess, clients: list[Any], bucket: str) -> None:
    barrier = threading.Barrier(len(clients))
    outcomes: list[str] = []

    def create(client: Any) -> None:
        barrier.wait()
        try:
            client.create_bucket(Bucket=bucket)
            outcomes.append("ok")
        except ClientError as err:
            outcomes.append(str(err.response["Error"]["Code"]))

    threads = [threading.Thread(target=create, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("ok") == 1, outcomes
    assert set(outcomes) <= {"ok", "BucketAlreadyExists"}, outcomes
    owners = [c for c in clients if bucket in names(c)]
    assert len(owners) == 1
    owners[0].put_object(Bucket=bucket, Key="k", Body=b"1")
    for other in clients:
        if other is not owners[0]:
            denied(lambda o=other: o.get_object(Bucket=bucket, Key="k"))


def test_deleted_bucket_name_is_free_again(gw: GatewayProcess) -> None:
    a, b = new_tenant(gw), new_tenant(gw)
    bucket = uid("free")
    a.create_bucket(Bucket=bucket)
    a.delete_bucket(Bucket=bucket)
    b.create_bucket(Bucket=bucket)
    b.put_object(Bucket=bucket, Key="k", Body=b"b")
    denied(lambda: a.get_object(Bucket=bucket, Key="k"))


def test_shared_mode_lets_every_tenant_reach_every_bucket(seaweed: SeaweedServer, tmp_path: Any) -> None:
    with GatewayProcess(seaweed, tmp_path / "gw", env={"FERRY_TENANCY": "shared"}) as g:
        a, b = new_tenant(g), new_tenant(g)
        bucket = uid("shr")
        a.create_bucket(Bucket=bucket)
        a.put_object(Bucket=bucket, Key="k", Body=b"shared")
        assert bucket in names(b)
        assert b.get_object(Bucket=bucket, Key="k")["Body"].read() == b"shared"
        b.put_object(Bucket=bucket, Key="k", Body=b"by b")
        assert a.get_object(Bucket=bucket, Key="k")["Body"].read() == b"by b"
        b.delete_object(Bucket=bucket, Key="k")


def test_bucket_created_on_one_worker_is_usable_at_once_on_the_other(seaweed: SeaweedServer, tmp_path: Any) -> None:
    """Two uvicorn workers, each with its own cached owners: a bucket is usable right after its
    CreateBucket whichever worker the next request reaches (fresh connections spread them)."""
    with GatewayProcess(seaweed, tmp_path / "gw2", workers=2) as g:
        tenant = new_tenant(g)
        keys = tenant._request_signer._credentials
        for i in range(12):
            bucket = uid(f"raw{i}")
            g.client(keys.access_key, keys.secret_key).create_bucket(Bucket=bucket)
            for _ in range(3):
                fresh = g.client(keys.access_key, keys.secret_key)
                fresh.put_object(Bucket=bucket, Key="k", Body=b"v")
                assert bucket in names(fresh)


def test_a_missing_bucket_is_no_such_bucket_for_every_tenant(gw: GatewayProcess) -> None:
    """As S3 answers: a bucket nobody has is 404 NoSuchBucket to any signed-in tenant (not a 403
    that would send a client looking for a permission problem); nothing is created by asking."""
    tenant, missing = new_tenant(gw), uid("missing")
    for call in (lambda: tenant.get_object(Bucket=missing, Key="k"), lambda: tenant.list_objects_v2(Bucket=missing),
                 lambda: tenant.put_object(Bucket=missing, Key="k", Body=b"x")):
        with pytest.raises(ClientError) as err:
            call()
        assert err.value.response["Error"]["Code"] == "NoSuchBucket", err.value.response
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    with pytest.raises(ClientError) as err:
        tenant.head_bucket(Bucket=missing)
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert missing not in names(gw.client())


def test_a_new_owner_of_a_deleted_buckets_name_gets_none_of_the_old_owners_rules_or_jobs(
        gw: GatewayProcess) -> None:
    """Tenant A's read-only rule and staging job on its bucket go with the bucket: tenant B,
    creating the same name afterwards, can write to it and sees neither (issue 25)."""
    a, b = new_tenant(gw), new_tenant(gw)
    name = uid("reused")
    a.create_bucket(Bucket=name)
    with admin(gw) as api:
        rule = api.post("/admin/policies", json={"bucket": name, "prefix": "", "mode": "read-only"})
        job = api.post("/admin/staging", json={"bucket": name})
        assert rule.status_code == 201 and job.status_code == 201, (rule.text, job.text)
    denied(lambda: a.put_object(Bucket=name, Key="k", Body=b"A"))  # the rule holds for A
    a.delete_bucket(Bucket=name)
    b.create_bucket(Bucket=name)
    b.put_object(Bucket=name, Key="k", Body=b"B's data")  # not A's read-only rule
    assert b.get_object(Bucket=name, Key="k")["Body"].read() == b"B's data"
    with admin(gw) as api:
        assert [r for r in api.get("/admin/policies").json() if r["bucket"] == name] == []
        assert [j for j in api.get("/admin/staging").json() if j["bucket"] == name] == []
        assert api.get(f"/admin/policies/{rule.json()['id']}").status_code == 404
        assert api.get(f"/admin/staging/{job.json()['id']}").status_code == 404
    b.delete_object(Bucket=name, Key="k")
