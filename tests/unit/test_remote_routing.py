"""Per-bucket remotes, capability profiles and the Celery destage limits, without SeaweedFS:
the router over a real SQLite catalog (remotes, mappings) and in-memory remotes, the write
services on a fake remote of each profile."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import time
from pathlib import Path

import pytest

from app.adapters.catalog.cache.index import CacheIndex
from app.adapters.catalog.control.policies import PolicyRepo
from app.adapters.catalog.control.remotes import RemoteRepo
from app.adapters.catalog.engine import make_engine
from app.adapters.catalog.migrate import upgrade
from app.adapters.local.cachestore import CacheStore
from app.adapters.remote import RemoteConfig
from app.adapters.remote.router import RemoteRouter
from app.config import Settings
from app.domain.errors import S3Error
from app.domain.policy import Policy
from app.domain.profiles import AWS, SEAWEEDFS, RemoteProfile
from app.services.cache import ReadCache
from app.services.cache.fill import RemoteBlockSource
from app.services.control.policies import PolicyBook
from app.services.writes.budget import DiskReserve
from app.taskqueue import destage_limits
from tests.fakes.harness import build
from tests.fakes.remote import InMemoryRemote

BASE = RemoteConfig(endpoint="http://default.invalid", region="us-east-1", access_key="d", secret_key="d")


class Remotes:
    """A factory of in-memory remotes, one per endpoint, recording each client it builds."""

    def __init__(self) -> None:
        self.by_endpoint: dict[str, InMemoryRemote] = {}
        self.built: list[RemoteConfig] = []

    def __call__(self, cfg: RemoteConfig) -> InMemoryRemote:
        self.built.append(cfg)
        return self.by_endpoint.setdefault(str(cfg.endpoint), InMemoryRemote())


def router(tmp_path: Path, refresh: float = 0.05) -> tuple[RemoteRouter, RemoteRepo, InMemoryRemote, Remotes]:
    url = f"sqlite:///{tmp_path / 'ferry.db'}"
    upgrade(url)
    repo = RemoteRepo(make_engine(url))
    default, remotes = InMemoryRemote(), Remotes()
    return RemoteRouter(default, SEAWEEDFS, repo, BASE, refresh_seconds=refresh,  # type: ignore[arg-type]
                        factory=remotes), repo, default, remotes


def put(r: RemoteRouter, bucket: str, key: str, data: bytes, headers: dict[str, str] | None = None,
        metadata: dict[str, str] | None = None) -> str:
    md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
    return r.put_object(bucket, key, io.BytesIO(data), len(data), md5, headers or {}, metadata or {}, {})


def wait_until(predicate: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_mapped_bucket_goes_to_its_remote_under_the_remote_name(tmp_path: Path) -> None:
    r, repo, default, remotes = router(tmp_path)
    far = repo.create(name="far", endpoint="http://far.invalid", region="eu-west-1", access_key="a", secret_key="s",
                      profile="aws")
    repo.put_mapping("mine", far.id, "theirs")
    r.refresh()
    store = remotes.by_endpoint["http://far.invalid"]
    store.create_bucket("theirs", None)
    default.create_bucket("plain", None)
    put(r, "mine", "k", b"far bytes")
    put(r, "plain", "k", b"near")
    assert store.buckets["theirs"]["k"].data == b"far bytes" and "mine" not in default.buckets
    assert default.buckets["plain"]["k"].data == b"near"
    assert r.get_object("mine", "k")[1].read() == b"far bytes"
    assert r.profile("mine") is AWS and r.profile("plain") is SEAWEEDFS
    assert remotes.built[-1].region == "eu-west-1" and remotes.built[-1].read_timeout == BASE.read_timeout
    with pytest.raises(S3Error) as info:
        r.head_object("mine", "missing")
    assert info.value.code == "NoSuchKey"
    store.buckets.pop("theirs")
    with pytest.raises(S3Error) as info:
        r.list_objects("mine", "", None, None, 10)
    assert info.value.code == "NoSuchBucket" and info.value.fields["BucketName"] == "mine"
    assert [b.name for b in r.list_buckets()] == ["plain"]  # its remote bucket is gone
    store.create_bucket("theirs", None)
    assert [b.name for b in r.list_buckets()] == ["mine", "plain"]


def test_copy_between_two_remotes_goes_through_the_gateway(tmp_path: Path) -> None:
    r, repo, default, remotes = router(tmp_path)
    far = repo.create(name="far", endpoint="http://far.invalid")
    repo.put_mapping("mine", far.id, "theirs")
    r.refresh()
    remotes.by_endpoint["http://far.invalid"].create_bucket("theirs", None)
    default.create_bucket("plain", None)
    put(r, "plain", "src", b"copied across", {"content-type": "text/x"}, {"m": "1"})
    r.copy_object("mine", "dst", "plain", "src", False, {}, {})
    copied = remotes.by_endpoint["http://far.invalid"].buckets["theirs"]["dst"]
    assert copied.data == b"copied across" and copied.metadata == {"m": "1"}


def test_rotated_keys_build_a_new_client_within_the_refresh(tmp_path: Path) -> None:
    r, repo, _default, remotes = router(tmp_path)
    far = repo.create(name="far", endpoint="http://far.invalid", access_key="old", secret_key="old-secret")
    repo.put_mapping("mine", far.id, "theirs")
    r.refresh()
    assert remotes.built[-1].access_key == "old"
    time.sleep(0.1)
    r.route("mine")  # an unchanged row keeps its client
    assert len(remotes.built) == 1
    repo.update(far.id, access_key="new", secret_key="new-secret")  # another process's admin API

    def rotated() -> bool:
        r.route("mine")  # requests trigger the refresh
        return len(remotes.built) == 2

    wait_until(rotated)
    assert remotes.built[-1].access_key == "new" and remotes.built[-1].secret_key == "new-secret"
    repo.delete_mapping("mine")
    wait_until(lambda: r.route("mine").remote == "default")


def test_a_remap_applies_to_the_first_call_of_an_idle_router(tmp_path: Path) -> None:
    """Issue 26: another process remaps a bucket while this router is idle; once the admin call
    would have answered (``settle_seconds`` after the commit), the very first call goes to the new
    remote (a background refresh answered it from the old table)."""
    r, repo, _default, _remotes = router(tmp_path, refresh=0.3)
    a = repo.create(name="a", endpoint="http://a.invalid")
    b = repo.create(name="b", endpoint="http://b.invalid")
    repo.put_mapping("moved", a.id, "there")
    r.refresh()
    assert r.route("moved").remote == "a"
    time.sleep(0.4)  # idle past the interval
    repo.put_mapping("moved", b.id, "there")  # another process's admin API
    time.sleep(r.settle_seconds())
    assert r.route("moved").remote == "b"
    repo.delete_mapping("moved")
    time.sleep(r.settle_seconds())
    assert r.route("moved").remote == "default"


class _RemapDuringPut(InMemoryRemote):
    """Region A: while a destage's PutObject is at it, the bucket is moved to region B."""

    def __init__(self) -> None:
        super().__init__()
        self.during_put: list[object] = []

    def put_object(self, *args: object, **kwargs: object) -> str:
        etag = super().put_object(*args, **kwargs)  # type: ignore[arg-type]
        while self.during_put:
            self.during_put.pop()()  # type: ignore[operator]
        return etag


def test_a_remap_during_a_destage_sends_the_write_to_the_new_remote(tmp_path: Path) -> None:
    """The upload went to A, the bucket was remapped to B before the durable commit: the commit
    refuses it and the destage sends the write to B, then marks it durable (issue 26)."""
    r, repo, _default, remotes = router(tmp_path, refresh=0.05)
    region_a = remotes.by_endpoint["http://a.invalid"] = _RemapDuringPut()
    a = repo.create(name="a", endpoint="http://a.invalid")
    b = repo.create(name="b", endpoint="http://b.invalid")
    repo.put_mapping("moved", a.id, "there")
    r.refresh()
    region_a.create_bucket("there", None)
    region_b = remotes.by_endpoint.setdefault("http://b.invalid", InMemoryRemote())
    region_b.create_bucket("there", None)
    svc = build(tmp_path, r)  # type: ignore[arg-type]
    asyncio.run(svc.put("moved", "k", b"acknowledged before the move"))
    region_a.during_put.append(lambda: repo.put_mapping("moved", b.id, "there"))
    assert svc.destage_all() == ["durable"]
    assert region_b.buckets["there"]["k"].data == b"acknowledged before the move"
    newest = svc.journal.newest("moved", "k")
    assert newest is not None and newest.state.value == "durable"


def test_a_write_acknowledged_after_a_move_is_destaged_to_the_new_remote_only(tmp_path: Path) -> None:
    r, repo, _default, remotes = router(tmp_path, refresh=0.3)
    a = repo.create(name="a", endpoint="http://a.invalid")
    b = repo.create(name="b", endpoint="http://b.invalid")
    repo.put_mapping("moved", a.id, "there")
    r.refresh()
    region_a, region_b = (remotes.by_endpoint.setdefault(e, InMemoryRemote()) for e in ("http://a.invalid",
                                                                                       "http://b.invalid"))
    region_a.create_bucket("there", None)
    region_b.create_bucket("there", None)
    svc = build(tmp_path, r)  # type: ignore[arg-type]
    time.sleep(0.4)  # the router idle past its interval
    repo.put_mapping("moved", b.id, "there")  # another node's admin API
    time.sleep(r.settle_seconds())
    asyncio.run(svc.put("moved", "k", b"after the move"))
    assert svc.destage_all() == ["durable"]
    assert region_b.buckets["there"]["k"].data == b"after the move" and "k" not in region_a.buckets["there"]


def test_a_remap_invalidates_the_cached_entries_of_the_old_remote(tmp_path: Path) -> None:
    """A key read (and cached) from A is read from B after the bucket moves there: the remap's
    commit invalidates the bucket's entries, which came from the old remote."""
    r, repo, _default, remotes = router(tmp_path, refresh=0.3)
    a = repo.create(name="a", endpoint="http://a.invalid")
    b = repo.create(name="b", endpoint="http://b.invalid")
    repo.put_mapping("moved", a.id, "there")
    r.refresh()
    for endpoint, data in (("http://a.invalid", b"old region"), ("http://b.invalid", b"new region")):
        store = remotes.by_endpoint.setdefault(endpoint, InMemoryRemote())
        store.create_bucket("there", None)
        store.put_object("there", "k", io.BytesIO(data), len(data),
                         base64.b64encode(hashlib.md5(data).digest()).decode(), {}, {}, {})
    svc = build(tmp_path, r)  # type: ignore[arg-type]
    assert asyncio.run(svc.get("moved", "k")) == b"old region"
    assert asyncio.run(svc.get("moved", "k")) == b"old region"  # a hit now
    repo.put_mapping("moved", b.id, "there")  # another node's admin API
    time.sleep(r.settle_seconds())
    assert asyncio.run(svc.get("moved", "k")) == b"new region"


def test_profiles_decide_which_keys_a_bucket_accepts(tmp_path: Path) -> None:
    """AWS holds every key S3 accepts; a filesystem-backed remote only those it stores 1:1."""
    for profile, accepted in ((AWS, True), (SEAWEEDFS, False)):
        remote = InMemoryRemote(profile=profile)
        remote.create_bucket("b", None)
        (tmp_path / profile.name).mkdir()
        svc = build(tmp_path / profile.name, remote)

        async def scenario(svc: object = svc, accepted: bool = accepted, remote: InMemoryRemote = remote) -> None:
            for key, data in (("a//b", b"x"), ("/lead", b"y"), ("dir/", b"bytes in a folder key"),
                              ("s" * 300, b"z"), ("a/../b", b"w")):
                if accepted:
                    await svc.put("b", key, data)  # type: ignore[attr-defined]
                    assert await svc.get("b", key) == data  # type: ignore[attr-defined]
                else:
                    with pytest.raises(S3Error) as info:
                        await svc.put("b", key, data)  # type: ignore[attr-defined]
                    assert info.value.code in ("InvalidArgument", "KeyTooLongError")
            if accepted:
                assert sorted(svc.destage_all()) == ["durable"] * 5  # type: ignore[attr-defined]
                assert remote.buckets["b"]["dir/"].data == b"bytes in a folder key"

        asyncio.run(scenario())


def test_destage_limits_order_the_celery_timeouts() -> None:
    settings = Settings(destage_lease_seconds=30, destage_time_limit=600)
    soft, hard, visibility = destage_limits(settings)
    assert soft == 600 and hard == 660 and visibility == 720
    assert visibility > hard + settings.destage_lease_seconds  # never redelivered while running


@pytest.mark.parametrize("profile", [AWS, SEAWEEDFS], ids=lambda p: p.name)
def test_bulk_revalidation_asks_a_head_only_where_listings_may_be_out_of_order(tmp_path: Path,
                                                                              profile: RemoteProfile) -> None:
    """A key gone from the remote: an ordered LIST (aws) proves it; a filesystem-backed one
    (seaweedfs lists directory by directory) gets a HEAD before the entry is dropped."""
    url = f"sqlite:///{tmp_path / 'ferry.db'}"
    upgrade(url)
    engine = make_engine(url)
    remote = InMemoryRemote(profile=profile)
    remote.create_bucket("bkt", None)
    cache = ReadCache(CacheIndex(engine, "node-a"), CacheStore(tmp_path), remote,
                      PolicyBook(PolicyRepo(engine), Policy()), source=RemoteBlockSource(remote),
                      disk=DiskReserve(tmp_path, 0, 0.0), dirty_bytes=lambda: 0, block_size=1000)
    for key in ("a/1", "a/2", "b/3"):
        data = key.encode() * 10
        md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
        remote.put_object("bkt", key, io.BytesIO(data), len(data), md5, {}, {}, {})
        assert cache.index.put_ready(remote.head_object("bkt", key), "bkt", 1000, None, False, time.time() - 1)
    remote.delete_object("bkt", "a/2")
    stats = cache.revalidate_bucket("bkt")
    assert (stats["unchanged"], stats["deleted"]) == (2, 1)
    assert stats.get("heads", 0) == (0 if profile.ordered_listing else 1)
    assert [e.key for e in cache.index.under("bkt", "", None, 10)] == ["a/1", "b/3"]


def test_the_router_has_every_operation_of_the_remote_with_the_same_parameters() -> None:
    """The router stands in for RemoteStore everywhere: an operation added to one and not the
    other fails at run time only on the path that calls it (an eager part copy did)."""
    import inspect

    from app.adapters.remote import RemoteStore

    for name, fn in inspect.getmembers(RemoteStore, inspect.isfunction):
        if name.startswith("_"):
            continue
        routed = inspect.getattr_static(RemoteRouter, name, None)
        assert routed is not None, f"RemoteRouter has no {name}"
        if isinstance(routed, property):
            continue
        assert list(inspect.signature(fn).parameters) == list(inspect.signature(routed).parameters), name
