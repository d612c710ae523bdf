"""``ferry mount``'s listings (issue 30) counted at the gateway: ``ls -l`` of a large directory is
its listing pages and nothing per file; ``find`` + ``grep -r`` over a tree of small directories is
one listing of the tree; a change made through S3 still shows within the cache time, in a
directory whose listing came from its parent's tree."""

from __future__ import annotations

import math
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.gateway import ADMIN_TOKEN, GatewayProcess
from tests.support.mount import MountProcess, require_fuse
from tests.support.seaweed import SeaweedServer

CACHE_SECONDS = 2.0  # longer than the default 1 s: a slow runner still finishes find before it ends
KEYS = 1200  # two pages


@pytest.fixture(scope="module", autouse=True)
def _fuse() -> None:
    require_fuse()


@pytest.fixture(scope="module")
def gw(seaweed: SeaweedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(seaweed, tmp_path_factory.mktemp("mount-listing-gw")) as g:
        yield g


@pytest.fixture(scope="module")
def mnt(gw: GatewayProcess) -> Iterator[MountProcess]:
    with MountProcess(gw, "--cache-seconds", str(CACHE_SECONDS)) as m:
        yield m


@pytest.fixture
def bucket(gw: GatewayProcess) -> str:
    name = f"mls-{uuid.uuid4().hex[:12]}"
    gw.client().create_bucket(Bucket=name)
    return name


def requests(gw: GatewayProcess) -> dict[str, float]:
    """The gateway's S3 requests so far, by operation."""
    req = urllib.request.Request(f"{gw.endpoint}/metrics", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read().decode()
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "ferry_http_requests_total":
                counts[s.labels["operation"]] = counts.get(s.labels["operation"], 0) + s.value
    return counts


def sent(before: dict[str, float], after: dict[str, float], operation: str) -> float:
    return after.get(operation, 0) - before.get(operation, 0)


def put_all(gw: GatewayProcess, bucket: str, bodies: dict[str, bytes]) -> None:
    s3 = gw.client(max_pool_connections=16)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: s3.put_object(Bucket=bucket, Key=k, Body=bodies[k]), bodies))


def run(command: str, cwd: Path) -> str:
    done = subprocess.run(command, shell=True, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{command}: {done.returncode}\n{done.stderr}"
    return done.stdout


def expire() -> None:
    time.sleep(CACHE_SECONDS + 0.2)


def test_ls_l_of_a_large_directory_is_its_pages_and_no_request_per_file(gw: GatewayProcess, mnt: MountProcess,
                                                                        bucket: str) -> None:
    put_all(gw, bucket, {f"many/{i:05d}": b"x" * (i % 7) for i in range(KEYS)})
    root = mnt.path / bucket
    run("ls -l many", root)  # the first listing learns the directory is larger than a page
    expire()
    before = requests(gw)
    lines = run("ls -l many", root).splitlines()[1:]
    after = requests(gw)
    assert len(lines) == KEYS
    assert lines[8].split()[4] == str(8 % 7) and lines[8].split()[-1] == "00008"
    # The directory's pages, and the lookup of the name ``many`` in the bucket (one short listing).
    assert sent(before, after, "ListObjectsV2") <= math.ceil(KEYS / 1000) + 1
    assert sent(before, after, "HeadObject") == 0
    assert sent(before, after, "GetObject") == 0


def test_concurrent_listings_of_one_directory_share_one(gw: GatewayProcess, mnt: MountProcess, bucket: str,
                                                        tmp_path: Path) -> None:
    put_all(gw, bucket, {f"d/{i:03d}": b"y" for i in range(50)})
    root = mnt.path / bucket
    run("ls d", root)
    expire()
    before = requests(gw)
    began = time.monotonic()
    # Six processes started by one shell at once (threads of this process each starting a shell
    # were spread over seconds on a loaded runner).
    outputs = run(f"for i in 1 2 3 4 5 6; do ls -l d > {tmp_path}/ls.$i 2>&1 & done; wait; cat {tmp_path}/ls.*",
                  root)
    elapsed = time.monotonic() - began
    after = requests(gw)
    assert len(outputs.splitlines()) == 6 * 51, outputs
    # Six processes: the directory listed once, the lookup of ``d`` shared by those asking at the
    # same moment (one arriving just after the answer may ask again): never one each. A runner
    # so loaded that the six outlast the cache time may list both once more per cache time.
    allowed = 3 + 2 * int(elapsed // CACHE_SECONDS)
    assert sent(before, after, "ListObjectsV2") <= allowed, (elapsed, before, after)
    assert sent(before, after, "ListBuckets") <= 2
    assert sent(before, after, "HeadObject") == 0


def test_find_and_grep_over_a_tree_list_it_once(gw: GatewayProcess, mnt: MountProcess, bucket: str) -> None:
    put_all(gw, bucket, {f"small/{i // 20:02d}/{i:03d}.txt": f"file {i}\n{'needle' if i % 25 == 0 else ''}\n".encode()
                         for i in range(200)})
    root = mnt.path / bucket
    run("find small -type f > /dev/null; grep -r needle small", root)
    expire()
    before = requests(gw)
    started = time.monotonic()
    assert len(run("find small -type f", root).splitlines()) == 200
    hits = run("grep -rl needle small", root).split()
    took = time.monotonic() - started
    after = requests(gw)
    assert sorted(hits) == [f"small/{i // 20:02d}/{i:03d}.txt" for i in range(0, 200, 25)]
    # find: the lookup of ``small`` and the tree's one page; grep, within the cache time: nothing more.
    # A loaded runner that takes longer than the cache time lists the tree again once per period
    # (the lookup and the page again), never per directory (10) or per file (200).
    periods = max(1, math.ceil(took / CACHE_SECONDS))
    assert sent(before, after, "ListObjectsV2") <= 2 * periods, f"find and grep took {took:.1f} s"
    assert sent(before, after, "HeadObject") == 0


def test_a_change_through_s3_shows_in_a_directory_listed_with_its_tree(gw: GatewayProcess, mnt: MountProcess,
                                                                       bucket: str) -> None:
    s3 = gw.client()
    put_all(gw, bucket, {"t/a/one": b"1", "t/a/two": b"2", "t/b/three": b"3"})
    root = mnt.path / bucket
    assert sorted(run("find t -type f", root).split()) == ["t/a/one", "t/a/two", "t/b/three"]
    s3.put_object(Bucket=bucket, Key="t/a/new", Body=b"fresh")
    s3.delete_object(Bucket=bucket, Key="t/b/three")
    deadline = time.monotonic() + CACHE_SECONDS + 0.5
    while sorted(run("ls t/a", root).split()) != ["new", "one", "two"] or "b" in run("ls t", root).split():
        assert time.monotonic() < deadline, "a change through S3 did not show within the cache time"
        time.sleep(0.05)
    assert (root / "t/a/new").read_bytes() == b"fresh"


def test_files_opened_after_their_listing_expired_relist_the_directory_not_head_each(
        gw: GatewayProcess, mnt: MountProcess, bucket: str) -> None:
    put_all(gw, bucket, {f"r/{i:02d}": f"body {i}".encode() for i in range(30)})
    root = mnt.path / bucket
    run("ls r", root)
    expire()
    before = requests(gw)
    assert [(root / f"r/{i:02d}").read_bytes() for i in range(30)] == [f"body {i}".encode() for i in range(30)]
    after = requests(gw)
    # The lookup of ``r`` (a short listing), then ``r`` listed again once: every name answered from it.
    assert sent(before, after, "ListObjectsV2") <= 3, (before, after)
    assert sent(before, after, "HeadObject") == 0
