"""``ferry mount`` (issue 30) mounted for real (FUSE) in front of a real gateway and SeaweedFS,
used with the real tools: ls, find, grep -r, cat, cp -r, rsync, tar, dd, du, Python mmap, the
write-tmp + fsync + os.replace checkpoint pattern, renames racing S3 readers, kill -9 of the
mount and of the gateway mid-write, both views agreeing, and the refusals with their errno."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import mmap
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.support.gateway import GatewayProcess, remote_client
from tests.support.mount import MountProcess, require_fuse
from tests.support.seaweed import SeaweedServer

MiB = 1024 * 1024


@pytest.fixture(scope="module", autouse=True)
def _fuse() -> None:
    require_fuse()


@pytest.fixture(scope="module")
def gw(seaweed: SeaweedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(seaweed, tmp_path_factory.mktemp("mount-gw")) as g:
        yield g


@pytest.fixture(scope="module")
def mnt(gw: GatewayProcess) -> Iterator[MountProcess]:
    with MountProcess(gw) as m:
        yield m


@pytest.fixture
def bucket(gw: GatewayProcess) -> str:
    name = f"mnt-{uuid.uuid4().hex[:12]}"
    gw.client().create_bucket(Bucket=name)
    return name


def sh(command: str, cwd: Path) -> str:
    done = subprocess.run(command, shell=True, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{command}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def keys(s3: Any, bucket: str) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


def body(s3: Any, bucket: str, key: str) -> bytes:
    return bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def test_ls_find_grep_cat_du_see_the_buckets_objects(gw: GatewayProcess, mnt: MountProcess, bucket: str) -> None:
    s3 = gw.client()
    for i in range(30):
        s3.put_object(Bucket=bucket, Key=f"logs/2026/{i:02d}.log", Body=f"line {i}\n{'needle' if i % 7 == 0 else ''}\n")
    s3.put_object(Bucket=bucket, Key="README", Body=b"top level\n")
    root = mnt.path / bucket
    assert sorted(os.listdir(root)) == ["README", "logs"]
    listing = sh("ls -l logs/2026", root)
    assert listing.count(".log") == 30 and " 8 " in listing  # sizes from the objects' metadata
    assert sh("cat README", root) == "top level\n"
    found = sh("find . -type f | sort", root).split()
    assert found == ["./README"] + [f"./logs/2026/{i:02d}.log" for i in range(30)]
    hits = sh("grep -rl needle . | sort", root).split()
    assert hits == [f"./logs/2026/{i:02d}.log" for i in range(0, 30, 7)]
    assert int(sh("du -sb logs", root).split()[0]) >= sum(len(f"line {i}\n\n") for i in range(30))
    mtime = os.stat(root / "README").st_mtime
    assert abs(mtime - time.time()) < 300


def test_a_file_written_through_the_mount_is_one_object_at_close(gw: GatewayProcess, mnt: MountProcess,
                                                                  bucket: str) -> None:
    s3 = gw.client()
    root = mnt.path / bucket
    data = os.urandom(3 * MiB + 5)
    with open(root / "blob.bin", "wb") as fh:
        fh.write(data[:MiB])
        fh.flush()
        assert "blob.bin" not in keys(s3, bucket)  # nothing partial through S3 before fsync or close
        fh.write(data[MiB:])
    assert body(s3, bucket, "blob.bin") == data  # the other view, at once
    assert (root / "blob.bin").read_bytes() == data
    with open(root / "blob.bin", "wb") as fh:  # O_TRUNC rewrites
        fh.write(b"short")
    assert body(s3, bucket, "blob.bin") == b"short"
    sh("dd if=/dev/urandom of=dd.bin bs=1M count=80 status=none", root)  # large: a multipart upload
    assert s3.head_object(Bucket=bucket, Key="dd.bin")["ContentLength"] == 80 * MiB
    assert hashlib.md5((root / "dd.bin").read_bytes()).hexdigest() == hashlib.md5(body(s3, bucket, "dd.bin")).hexdigest()
    os.unlink(root / "dd.bin")
    assert "dd.bin" not in keys(s3, bucket)


def test_a_large_file_sent_while_written_is_published_as_the_file_holds(gw: GatewayProcess, mnt: MountProcess,
                                                                         bucket: str) -> None:
    """Parts go to the gateway while the file grows; a write back into a part already sent, or an
    unlink before close, must still end as the file says (and leave no upload open)."""
    s3 = gw.client()
    root = mnt.path / bucket
    data = bytearray(os.urandom(100 * MiB))
    with open(root / "streamed.bin", "wb") as fh:
        fh.write(data)
        assert "streamed.bin" not in keys(s3, bucket)
    assert hashlib.md5(body(s3, bucket, "streamed.bin")).digest() == hashlib.md5(data).digest()
    with open(root / "rewritten.bin", "wb") as fh:
        fh.write(data)
        fh.seek(3 * MiB)
        fh.write(b"changed after its part was sent")
    data[3 * MiB:3 * MiB + 31] = b"changed after its part was sent"
    assert hashlib.md5(body(s3, bucket, "rewritten.bin")).digest() == hashlib.md5(data).digest()
    with open(root / "dropped.bin", "wb") as fh:
        fh.write(data)
        os.unlink(root / "dropped.bin")
    assert "dropped.bin" not in keys(s3, bucket)
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_a_change_through_s3_shows_in_the_mount_within_a_second(gw: GatewayProcess, mnt: MountProcess,
                                                               bucket: str) -> None:
    s3 = gw.client()
    root = mnt.path / bucket
    assert os.listdir(root) == []
    s3.put_object(Bucket=bucket, Key="fresh", Body=b"v1")
    deadline = time.monotonic() + 1.5
    while "fresh" not in os.listdir(root):
        assert time.monotonic() < deadline, "a PUT through S3 did not show in the mount within 1.5 s"
        time.sleep(0.05)
    assert (root / "fresh").read_bytes() == b"v1"
    s3.put_object(Bucket=bucket, Key="fresh", Body=b"version two")
    deadline = time.monotonic() + 1.5
    while (root / "fresh").read_bytes() != b"version two":
        assert time.monotonic() < deadline, "an overwrite through S3 did not show within 1.5 s"
        time.sleep(0.05)
    same = os.urandom(64 * 1024)
    s3.put_object(Bucket=bucket, Key="same-size", Body=same)
    time.sleep(1.1)
    assert (root / "same-size").read_bytes() == same  # now in the kernel's page cache
    other = os.urandom(64 * 1024)
    s3.put_object(Bucket=bucket, Key="same-size", Body=other)  # same size, likely the same second
    time.sleep(1.1)
    assert (root / "same-size").read_bytes() == other, "the page cache kept an older version's bytes"
    s3.delete_object(Bucket=bucket, Key="fresh")
    deadline = time.monotonic() + 1.5
    while (root / "fresh").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.parametrize("socket", ["local", "missing"])
def test_reads_take_the_gateways_local_socket_or_fall_back_to_http(gw: GatewayProcess, bucket: str,
                                                                   socket: str) -> None:
    """On the serving node the mount reads cached bytes through the gateway's local read socket
    (cache-block descriptors, app/server/local_reads.py); a socket that does not answer leaves it
    on HTTP with the same bytes."""
    data = os.urandom(20 * MiB)
    gw.client().put_object(Bucket=bucket, Key="blocks.bin", Body=data)
    assert gw.client().get_object(Bucket=bucket, Key="blocks.bin")["Body"].read() == data  # cached
    env = {"FERRY_LOCAL_SOCKET": "/nonexistent/ferry.sock"} if socket == "missing" else {}
    with MountProcess(gw, env=env) as m:
        with open(m.path / bucket / "blocks.bin", "rb") as fh:
            assert hashlib.md5(fh.read()).digest() == hashlib.md5(data).digest()
        log = m.log_path.read_text()
    assert "reading through the gateway's local read socket" in log
    assert ("the local read socket failed" in log) == (socket == "missing")


def test_cp_rsync_tar_round_trip(gw: GatewayProcess, mnt: MountProcess, bucket: str, tmp_path: Path) -> None:
    src = tmp_path / "tree"
    for d in ("a", "a/b", "c"):
        (src / d).mkdir(parents=True)
    files = {"a/one.txt": b"1" * 10, "a/b/two.bin": os.urandom(300_000), "c/three": b"", "top": b"top\n"}
    for name, data in files.items():
        (src / name).write_bytes(data)
    root = mnt.path / bucket
    sh(f"cp -r {src} {root}/copied", tmp_path)
    sh(f"rsync -a {src}/ {root}/synced/", tmp_path)
    sh(f"tar -cf {tmp_path}/t.tar -C {src} . && mkdir {root}/untarred && tar -xf {tmp_path}/t.tar -C {root}/untarred",
       tmp_path)
    s3 = gw.client()
    for where in ("copied", "synced", "untarred"):
        for name, data in files.items():
            assert body(s3, bucket, f"{where}/{name}") == data, (where, name)
            assert (root / where / name).read_bytes() == data
    sh(f"tar -cf {tmp_path}/back.tar -C {root}/copied . && mkdir {tmp_path}/back && tar -xf {tmp_path}/back.tar "
       f"-C {tmp_path}/back && diff -r {src} {tmp_path}/back", tmp_path)


def test_mmap_reads_the_objects_bytes(gw: GatewayProcess, mnt: MountProcess, bucket: str) -> None:
    data = os.urandom(20 * MiB + 123)
    gw.client().put_object(Bucket=bucket, Key="weights.bin", Body=data)
    with open(mnt.path / bucket / "weights.bin", "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert len(m) == len(data)
        assert m[:4096] == data[:4096]
        assert m[15 * MiB:15 * MiB + 100] == data[15 * MiB:15 * MiB + 100]
        assert hashlib.sha256(m).digest() == hashlib.sha256(data).digest()


def test_a_large_file_reads_whole_in_any_piece_size(gw: GatewayProcess, mnt: MountProcess, bucket: str) -> None:
    """A file of 8 MiB or more is read with direct I/O (each read one request, answered from the
    gateway's cache block): every piece size, positioned reads across the mount's 8 MiB chunks and
    a shared map of the same open file all see the object's bytes."""
    data = os.urandom(3 * 8 * MiB + 4097)
    gw.client().put_object(Bucket=bucket, Key="large.bin", Body=data)
    path = mnt.path / bucket / "large.bin"
    for piece in (MiB, 3 * MiB + 5, 3 * 4096 + 1):
        got = bytearray()
        with open(path, "rb", buffering=0) as fh:
            while chunk := fh.read(piece):
                got += chunk
        assert got == data, piece
    with open(path, "rb", buffering=0) as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        for offset in (8 * MiB - 7, 16 * MiB - 1, len(data) - 10, 0):
            assert os.pread(fh.fileno(), 100, offset) == data[offset:offset + 100]
            assert m[offset:offset + 100] == data[offset:offset + 100]
        assert os.pread(fh.fileno(), 10, len(data)) == b""  # at the end: nothing, no error
    cat = subprocess.run(["cat", str(path)], capture_output=True, check=True).stdout
    assert hashlib.sha256(cat).digest() == hashlib.sha256(data).digest()


def test_the_checkpoint_pattern_renames_into_place(gw: GatewayProcess, mnt: MountProcess, bucket: str) -> None:
    """Write a temp name, fsync, os.replace over the last good one: S3 sees the whole new
    checkpoint under the final name, and no temp name is left."""
    root = mnt.path / bucket
    s3 = gw.client()
    (root / "ckpt").mkdir()
    for step in range(3):
        state = os.urandom(2 * MiB + step)
        tmp = root / "ckpt" / f".model.pt.tmp-{step}"
        with open(tmp, "wb") as fh:
            fh.write(state)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, root / "ckpt" / "model.pt")
        assert body(s3, bucket, "ckpt/model.pt") == state
        assert (root / "ckpt" / "model.pt").read_bytes() == state
        assert sorted(os.listdir(root / "ckpt")) == ["model.pt"]
    assert keys(s3, bucket) == ["ckpt/", "ckpt/model.pt"]


def test_a_rename_racing_s3_readers_is_never_missing_nor_partial(gw: GatewayProcess, mnt: MountProcess,
                                                                 bucket: str) -> None:
    root = mnt.path / bucket
    known: set[str] = set()
    first = os.urandom(MiB)
    known.add(hashlib.md5(first).hexdigest())
    (root / "latest").write_bytes(first)
    stop = threading.Event()
    problems: list[str] = []
    reads = [0]

    def reader() -> None:
        client = gw.client()
        while not stop.is_set():
            try:
                data = body(client, bucket, "latest")
            except ClientError as exc:
                problems.append(str(exc.response["Error"]["Code"]))
                continue
            reads[0] += 1
            if hashlib.md5(data).hexdigest() not in known:
                problems.append(f"a body of {len(data)} bytes that no checkpoint had")

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for step in range(10):
            data = os.urandom(MiB + step)
            known.add(hashlib.md5(data).hexdigest())
            with open(root / f"tmp-{step}", "wb") as fh:
                fh.write(data)
                os.fsync(fh.fileno())
            os.replace(root / f"tmp-{step}", root / "latest")
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert problems == [] and reads[0] > 10
    assert sorted(os.listdir(root)) == ["latest"]


def test_refusals_answer_their_errno(gw: GatewayProcess, mnt: MountProcess, bucket: str) -> None:
    root = mnt.path / bucket
    (root / "file").write_bytes(b"bytes")
    (root / "dir").mkdir()
    (root / "dir" / "inner").write_bytes(b"x")

    def errno_of(fn: Any, *args: Any) -> int | None:
        try:
            fn(*args)
        except OSError as exc:
            return exc.errno
        return None

    assert errno_of(open, root / "file", "ab") == errno.EOPNOTSUPP  # no appends to an existing object
    assert errno_of(open, root / "file", "r+b") == errno.EOPNOTSUPP  # nor writes into its bytes
    assert errno_of(os.link, root / "file", root / "hard") == errno.EPERM
    assert errno_of(os.symlink, "file", root / "soft") == errno.EPERM
    assert errno_of(os.rename, root / "dir", root / "dir2") == errno.EXDEV  # mv copies a directory
    assert errno_of(os.rmdir, root / "dir") == errno.ENOTEMPTY
    assert errno_of(os.mkdir, mnt.path / "new-bucket") == errno.EPERM
    assert errno_of(os.rename, root / "file", mnt.path / "elsewhere" / "file") in (errno.EXDEV, errno.ENOENT)
    assert errno_of(open, root / "absent", "rb") == errno.ENOENT
    sh("mv dir dir2", root)  # the EXDEV fallback of mv: copy and delete, per file
    assert (root / "dir2" / "inner").read_bytes() == b"x" and not (root / "dir").exists()


def test_flock_works_within_the_node(mnt: MountProcess, bucket: str) -> None:
    path = mnt.path / bucket / "lockfile"
    path.write_bytes(b"")
    with open(path, "rb") as first:
        fcntl.flock(first, fcntl.LOCK_EX)
        other = subprocess.run(["python3", "-c", "import fcntl,sys; f=open(sys.argv[1],'rb');\n"
                                "try: fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
                                "except BlockingIOError: sys.exit(3)\n", str(path)], timeout=30)
        assert other.returncode == 3
        fcntl.flock(first, fcntl.LOCK_UN)
    with open(path, "rb") as held:  # fcntl (POSIX) record locks too
        fcntl.lockf(held, fcntl.LOCK_SH)
        other = subprocess.run(["python3", "-c", "import fcntl,sys; f=open(sys.argv[1],'wb');\n"
                                "try: fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
                                "except OSError: sys.exit(3)\n", str(path)], timeout=30)
        assert other.returncode == 3


def test_a_read_only_mount_refuses_changes(gw: GatewayProcess, bucket: str) -> None:
    gw.client().put_object(Bucket=bucket, Key="k", Body=b"v")
    with MountProcess(gw, "--read-only", "--bucket", bucket) as ro:
        assert os.listdir(ro.path) == [bucket]
        assert (ro.path / bucket / "k").read_bytes() == b"v"
        with pytest.raises(OSError) as refused:
            (ro.path / bucket / "new").write_bytes(b"x")
        assert refused.value.errno == errno.EROFS


def test_kill9_of_the_mount_keeps_fsynced_files_and_shows_nothing_partial(gw: GatewayProcess, bucket: str) -> None:
    s3 = gw.client()
    with MountProcess(gw) as m:
        root = m.path / bucket
        done = os.urandom(2 * MiB)
        synced = open(root / "done.bin", "wb")  # noqa: SIM115 - both left open: the mount dies under them
        synced.write(done)
        synced.flush()
        os.fsync(synced.fileno())
        half = open(root / "half.bin", "wb")  # noqa: SIM115
        half.write(os.urandom(MiB))
        half.flush()
        m.kill()  # done.bin is fsynced and still open; half.bin never was
        for fh in (synced, half):
            with contextlib.suppress(OSError):
                fh.close()
    assert body(s3, bucket, "done.bin") == done
    assert "half.bin" not in keys(s3, bucket)


def test_kill9_of_the_gateway_mid_write_keeps_fsynced_bytes(seaweed: SeaweedServer,
                                                           tmp_path_factory: pytest.TempPathFactory) -> None:
    """The gateway is killed after one file's fsync and during another's upload; restarted on its
    data dir, it has the fsynced file whole and the other whole or not at all."""
    with GatewayProcess(seaweed, tmp_path_factory.mktemp("mount-kill")) as g:
        s3 = g.client()
        name = f"mnt-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(Bucket=name)
        with MountProcess(g) as m:
            root = m.path / name
            synced = os.urandom(4 * MiB)
            with open(root / "synced.bin", "wb") as fh:
                fh.write(synced)
                os.fsync(fh.fileno())
            big = os.urandom(96 * MiB)
            writer_error: list[BaseException] = []

            def write_big() -> None:
                try:
                    with open(root / "big.bin", "wb") as fh:
                        fh.write(big)
                except OSError as exc:
                    writer_error.append(exc)

            t = threading.Thread(target=write_big)
            t.start()
            time.sleep(0.3)
            g.kill()
            g.start()
            t.join(180)
            assert not t.is_alive()
            assert body(s3, name, "synced.bin") == synced
            if "big.bin" in keys(s3, name):
                assert hashlib.md5(body(s3, name, "big.bin")).digest() == hashlib.md5(big).digest()
            try:
                assert (root / "synced.bin").read_bytes() == synced  # the mount goes on with the new gateway
            except OSError:
                print(m.log_tail(20000))
                raise
        g.flush(name)
        assert body(remote_client(seaweed), name, "synced.bin") == synced
