"""Bucket ownership over a real migrated catalog (SQLite, and PostgreSQL when available): the
authorizer's hit path reads no SQL, changes made by another process are seen in bounded time,
and tenants racing to claim one bucket agree on one owner."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from sqlalchemy import Engine

from app.adapters.catalog.control.owners import OwnerRepo
from app.adapters.catalog.control.tenants import TenantRepo
from app.adapters.catalog.repo import Catalog
from app.domain.errors import S3Error
from app.domain.owners import OwnerMap
from app.services.control.tenancy import Tenancy
from tests.fakes.remote import InMemoryRemote


class CountingRepo(OwnerRepo):
    """The real repository, counting how often the mapping is read."""

    snapshots = 0

    def snapshot(self) -> OwnerMap:
        self.snapshots += 1
        return super().snapshot()




def remote_with(*buckets: str) -> InMemoryRemote:
    remote = InMemoryRemote()
    for name in buckets:
        remote.create_bucket(name, None)
    return remote


EVERY = remote_with("bkt-a", "unowned", "moved", "created-elsewhere", "warm", "new-bkt", "unowned-existing")


def tenants(engine: Engine) -> tuple[int, int, int]:
    """The bootstrap tenant and two others."""
    operator = Catalog(engine).ensure_tenant_key("default", "AKBOOTSTRAP000000000", "s")
    repo = TenantRepo(engine)
    return operator, repo.create("a", None).id, repo.create("b", None).id


def code(fn: object) -> str:
    with pytest.raises(S3Error) as err:
        asyncio.run(fn)  # type: ignore[arg-type]
    return err.value.code


def test_hit_path_reads_the_mapping_once(engine: Engine) -> None:
    operator, a, b = tenants(engine)
    OwnerRepo(engine).claim("bkt-a", a)
    repo = CountingRepo(engine)
    auth = Tenancy(repo, EVERY, refresh_seconds=60)

    async def many() -> None:
        for _ in range(2000):
            await auth.authorize(a, "bkt-a")
            await auth.authorize(operator, "unowned")

    asyncio.run(many())
    assert repo.snapshots == 1
    assert code(auth.authorize(b, "bkt-a")) == "AccessDenied"
    assert code(auth.authorize(a, "unowned")) == "AccessDenied"
    assert code(auth.authorize(operator, "bkt-a")) == "AccessDenied"
    assert code(auth.authorize(None, "unowned")) == "AccessDenied"
    assert code(auth.authorize(b, "bkt-a", creating=True)) == "BucketAlreadyExists"
    asyncio.run(auth.authorize(b, "new-bucket", creating=True))
    assert asyncio.run(auth.visible(a, ["bkt-a", "unowned"])) == {"bkt-a"}
    assert asyncio.run(auth.visible(operator, ["bkt-a", "unowned"])) == {"unowned"}
    shared = Tenancy(CountingRepo(engine), EVERY, shared=True)
    asyncio.run(shared.authorize(b, "bkt-a"))


def test_another_process_change_is_seen_in_bounded_time(engine: Engine) -> None:
    """A grant made elsewhere works at once (a refusal is confirmed against the catalog); a
    revocation made elsewhere takes effect within refresh_seconds."""
    operator, a, _ = tenants(engine)
    here = Tenancy(OwnerRepo(engine), EVERY, refresh_seconds=0.5)
    elsewhere = OwnerRepo(engine)  # the admin API or a CreateBucket on another process
    asyncio.run(here.authorize(operator, "moved"))  # the mapping is loaded, and fresh
    elsewhere.assign("moved", "a")
    asyncio.run(here.authorize(a, "moved"))
    elsewhere.claim("created-elsewhere", a)
    asyncio.run(here.authorize(a, "created-elsewhere"))
    time.sleep(0.55)
    assert code(here.authorize(operator, "moved")) == "AccessDenied"
    elsewhere.delete("moved")
    asyncio.run(here.authorize(operator, "moved"))


def test_racing_claims_agree_on_one_owner(engine: Engine) -> None:
    _, a, b = tenants(engine)
    repo = OwnerRepo(engine)
    barrier = threading.Barrier(8)
    results: list[int] = []

    def claim(tenant: int) -> None:
        barrier.wait()
        results.append(repo.claim("contested", tenant))

    threads = [threading.Thread(target=claim, args=(a if i % 2 else b,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1 and results[0] == repo.get("contested").tenant_id


def test_retried_create_bucket_on_another_process_succeeds(engine: Engine) -> None:
    """A CreateBucket retried after its success, landing on a process whose mapping predates the
    claim, is still the owner's no-op (a retry never turns a success into a failure)."""
    operator, a, b = tenants(engine)
    first, second = Tenancy(OwnerRepo(engine), EVERY), Tenancy(OwnerRepo(engine), EVERY)
    asyncio.run(second.authorize(operator, "warm"))  # second's mapping is loaded, and fresh
    asyncio.run(first.authorize(a, "new-bkt", creating=True))
    asyncio.run(first.created(a, "new-bkt", fresh=True))
    asyncio.run(second.authorize(a, "new-bkt", creating=True))  # a refusal would re-read; not needed
    asyncio.run(second.created(a, "new-bkt", fresh=False))  # the remote says: exists already
    assert code(second.created(b, "new-bkt", fresh=False)) == "BucketAlreadyExists"
    assert code(second.created(b, "unowned-existing", fresh=False)) == "BucketAlreadyExists"
    asyncio.run(second.created(operator, "unowned-existing", fresh=False))


def test_a_name_nobody_owns_that_the_remote_lacks_is_no_such_bucket(engine: Engine) -> None:
    """As S3 answers: a missing bucket is NoSuchBucket for any signed-in tenant; a bucket that
    exists (owned, or unowned and on the remote) is AccessDenied to the others."""
    operator, a, b = tenants(engine)
    OwnerRepo(engine).claim("owned-by-a", a)
    auth = Tenancy(OwnerRepo(engine), remote_with("unowned"))
    assert code(auth.authorize(b, "missing")) == "NoSuchBucket"
    assert code(auth.authorize(b, "unowned")) == "AccessDenied"
    assert code(auth.authorize(b, "owned-by-a")) == "AccessDenied"  # owned: the remote is not asked
    assert code(auth.authorize(None, "missing")) == "AccessDenied"
    asyncio.run(auth.authorize(operator, "missing"))  # the bootstrap tenant reaches unowned names
