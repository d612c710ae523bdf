"""Resource bounds: slow bodies time out, one tenant cannot hold the whole write buffer, the
journal's history is compacted, and a small disk answers SlowDown instead of failing."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from tests.support.gateway import ACCESS_KEY, ADMIN_TOKEN, SECRET_KEY, GatewayProcess
from tests.support.journal_rows import append_put

MiB = 1024 * 1024


def _signed_head(gw: GatewayProcess, bucket: str, key: str, size: int) -> bytes:
    """The request line and headers of a signed PUT declaring ``size`` bytes (body unsigned)."""
    url = f"{gw.endpoint}/{bucket}/{key}"
    req = AWSRequest("PUT", url, headers={"Content-Length": str(size), "x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
    SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(req)
    lines = [f"PUT /{bucket}/{key} HTTP/1.1", f"Host: {urllib.parse.urlsplit(url).netloc}"]
    lines += [f"{k}: {v}" for k, v in req.headers.items() if k.lower() != "host"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _read_answer(sock: socket.socket, closing: bool = True) -> tuple[int, bytes, bool]:
    """(status, body, closed): the answer, and whether the server closed the connection after it."""
    sock.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"connection closed without an answer: {data!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in header_lines)}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    if not closing:
        return int(status_line.split()[1]), rest, False
    sock.settimeout(5)
    try:
        closed = sock.recv(1) == b""
    except TimeoutError:
        closed = False
    return int(status_line.split()[1]), rest, closed


def _has_answer(sock: socket.socket, wait: float) -> bool:
    sock.settimeout(wait)
    try:
        return bool(sock.recv(1, socket.MSG_PEEK))
    except TimeoutError:
        return False


def _second_tenant(gw: GatewayProcess) -> tuple[str, str]:
    api = httpx.Client(base_url=gw.endpoint, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    name = f"other-{uuid.uuid4().hex[:8]}"
    assert api.post("/admin/tenants", json={"name": name}).status_code == 201
    created = api.post(f"/admin/tenants/{name}/keys").json()
    return created["access_key"], created["secret_key"]


def _tmp_files(gw: GatewayProcess) -> list[str]:
    return sorted(p.name for p in (gw.data_dir / "tmp").iterdir())


def test_slow_bodies_neither_starve_other_tenants_nor_stay_open(seaweed: Any, tmp_path: Path) -> None:
    """The issue's attack at a small scale: 13 PUTs declaring 5 MiB each (65 MiB, more than the
    60 MiB buffer) send one byte each and stall. The attacker's own PUTs past its share get
    SlowDown at once, another tenant's small PUT succeeds, and every stalled body is answered
    RequestTimeout and closed within the timeout, its reservation and staging file freed."""
    timeout = 4.0
    env = {"FERRY_WRITE_BUFFER_BYTES": str(60 * MiB), "FERRY_BODY_READ_TIMEOUT": str(timeout),
           "FERRY_TENANT_BUFFER_SHARE": "0.25"}
    with GatewayProcess(seaweed, tmp_path / "gw", env=env) as gw:
        s3 = gw.client()
        bucket = f"slow-{uuid.uuid4().hex[:8]}"
        s3.create_bucket(Bucket=bucket)
        other = gw.client(*_second_tenant(gw))
        other_bucket = f"other-{uuid.uuid4().hex[:8]}"
        other.create_bucket(Bucket=other_bucket)  # tenants are isolated: the other one writes its own

        socks = [socket.create_connection(("127.0.0.1", gw.port), timeout=10) for _ in range(13)]
        try:
            started = time.monotonic()
            for i, sock in enumerate(socks):
                sock.sendall(_signed_head(gw, bucket, f"slow/{i}", 5 * MiB) + b"x")
            time.sleep(1)
            refused = [s for s in socks if _has_answer(s, 0.05)]
            stalled = [s for s in socks if s not in refused]
            for sock in refused:
                status, body, _ = _read_answer(sock, closing=False)
                assert status == 503 and b"<Code>SlowDown</Code>" in body, body
            # The attacker holds at most its share (15 MiB: three bodies of 5 MiB).
            assert len(stalled) == 3, f"{len(stalled)} bodies admitted"

            other.put_object(Bucket=other_bucket, Key="small", Body=b"k" * 1024)  # another tenant goes on
            assert other.get_object(Bucket=other_bucket, Key="small")["Body"].read() == b"k" * 1024

            for sock in stalled:
                status, body, closed = _read_answer(sock)
                assert status == 400 and b"<Code>RequestTimeout</Code>" in body, body
                assert b"not read from or written to within the timeout period" in body
                assert closed, "the connection of a timed-out body must be closed"
            assert time.monotonic() - started < timeout + 4
        finally:
            for sock in socks:
                sock.close()
        # The reservations are free again: the attacker's tenant writes a full share.
        s3.put_object(Bucket=bucket, Key="after", Body=b"a" * (10 * MiB))
        assert _tmp_files(gw) == []


def test_body_that_stops_mid_way_times_out(seaweed: Any, tmp_path: Path) -> None:
    """A body that sends most of its bytes, then nothing: RequestTimeout, no staging file left,
    and its reservation freed (a write of the whole buffer's size is accepted right after)."""
    env = {"FERRY_WRITE_BUFFER_BYTES": str(8 * MiB), "FERRY_BODY_READ_TIMEOUT": "2",
           "FERRY_TENANT_BUFFER_SHARE": "1"}
    with GatewayProcess(seaweed, tmp_path / "gw", env=env) as gw:
        s3 = gw.client()
        bucket = f"stall-{uuid.uuid4().hex[:8]}"
        s3.create_bucket(Bucket=bucket)
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
            sock.sendall(_signed_head(gw, bucket, "half", 8 * MiB) + b"h" * (5 * MiB))
            started = time.monotonic()
            status, body, closed = _read_answer(sock)
            assert status == 400 and b"<Code>RequestTimeout</Code>" in body, body
            assert closed and time.monotonic() - started < 8
        assert _tmp_files(gw) == []
        s3.put_object(Bucket=bucket, Key="full", Body=b"f" * (8 * MiB))
        with pytest.raises(ClientError):
            s3.get_object(Bucket=bucket, Key="half")


# ------------------------------------------------------------------------ journal compaction


@pytest.fixture(params=["sqlite", "postgresql"])
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    from app.adapters.catalog.engine import make_engine
    from app.adapters.catalog.journal.journal import Journal
    from app.adapters.catalog.migrate import upgrade

    sqlite = f"sqlite:///{tmp_path / 'ferry.db'}"
    url = sqlite if request.param == "sqlite" else request.getfixturevalue("fresh_postgres_url")
    upgrade(url)
    engine = make_engine(url)
    yield Journal(engine, "node-a")
    engine.dispose()


def _put(journal: Any, bucket: str, key: str, state: str, age_days: float) -> int:
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import update

    from app.adapters.catalog.tables import ObjectVersion
    from app.domain.versions import VersionDraft

    row = append_put(journal, VersionDraft(bucket, key, 1, "e" * 32, [], {}, {}, {}, None))
    when = datetime.now(UTC) - timedelta(days=age_days)
    with journal.sessions.begin() as s:
        s.execute(update(ObjectVersion).where(ObjectVersion.seq == row.seq).values(
            state=state, created_at=when, durable_at=when if state == "durable" else None))
    return int(row.seq)


def test_compaction_keeps_what_reads_and_destages_rely_on(journal: Any) -> None:
    """Durable and superseded rows past the retention go; dirty rows, recent rows, a row whose
    key still has an older dirty row (its destage must see it as newer) and the bucket's newest
    row (writes during an outage trust it) stay; read-your-writes and listings answer the same."""
    old = {"k1-a": _put(journal, "b", "k1", "durable", 9), "k1-b": _put(journal, "b", "k1", "durable", 8),
           "k3-a": _put(journal, "b", "k3", "superseded", 9)}
    kept = {"k2-dirty": _put(journal, "b", "k2", "failed", 9), "k2-newer": _put(journal, "b", "k2", "durable", 8),
            "k3-recent": _put(journal, "b", "k3", "durable", 0.5), "k5-dirty": _put(journal, "b", "k5", "buffered", 9),
            "k4-newest": _put(journal, "b", "k4", "durable", 8)}
    before = ([journal.latest_dirty("b", k) for k in ("k1", "k2", "k3", "k4", "k5")],
              journal.dirty_under("b", "", None, 100))

    assert journal.compact(7 * 24 * 3600, batch=2) == len(old)

    seqs = {r.seq for r in journal.versions("b")}
    assert seqs == set(kept.values())
    assert journal.has_bucket("b")
    after = ([journal.latest_dirty("b", k) for k in ("k1", "k2", "k3", "k4", "k5")],
             journal.dirty_under("b", "", None, 100))
    assert after == before
    assert journal.compact(7 * 24 * 3600) == 0


def test_sweeper_compacts_history_through_the_gateway(seaweed: Any, tmp_path: Path) -> None:
    """With a short retention the embedded sweeper deletes destaged history; a write still
    buffered during an outage stays in the journal, and reads and listings are unchanged."""
    env = {"FERRY_JOURNAL_RETENTION_SECONDS": "1"}
    with GatewayProcess(seaweed, tmp_path / "gw", env=env) as gw:
        s3 = gw.client()
        bucket = f"compact-{uuid.uuid4().hex[:8]}"
        s3.create_bucket(Bucket=bucket)
        for i in range(3):
            s3.put_object(Bucket=bucket, Key="k", Body=f"v{i}".encode())
        s3.put_object(Bucket=bucket, Key="other", Body=b"o")
        gw.flush(bucket)
        api = httpx.Client(base_url=gw.endpoint, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})

        def versions() -> list[dict[str, Any]]:
            rows: list[dict[str, Any]] = api.get("/admin/objects", params={"bucket": bucket}).json()["versions"]
            return rows

        seaweed.pause()
        try:
            s3.put_object(Bucket=bucket, Key="dirty", Body=b"d")
            deadline = time.monotonic() + 20
            while len(versions()) > 1 and time.monotonic() < deadline:
                time.sleep(0.5)
            rows = versions()
            assert [(r["key"], r["state"] in ("buffered", "destaging")) for r in rows] == [("dirty", True)], rows
            assert s3.get_object(Bucket=bucket, Key="dirty")["Body"].read() == b"d"
        finally:
            seaweed.resume()
        assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v2"
        listed = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
        assert listed == ["dirty", "k", "other"]
        gw.flush(bucket)
        assert s3.get_object(Bucket=bucket, Key="dirty")["Body"].read() == b"d"


# ------------------------------------------------------------------------ a small real disk


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs: a filesystem that really fills up."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path = tmp_path / "disk"
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(path: Path, leave: int) -> None:
    """A ballast file that leaves ``leave`` bytes free on ``path``'s filesystem."""
    st = os.statvfs(path)
    size = st.f_bavail * st.f_frsize - leave
    with open(path / "ballast", "ab") as f:
        f.write(b"\0" * max(0, size))


def test_a_full_disk_answers_slowdown_and_loses_nothing(seaweed: Any, small_disk: Path) -> None:
    """Write-back PUTs during an outage fill a 64 MiB disk: past the reserve they get 503
    SlowDown with Retry-After (never a 500), every acknowledged one reaches the remote once it
    returns; then, with the disk nearly full, cold reads answer 200 with the right bytes."""
    env = {"FERRY_DISK_RESERVE_BYTES": str(8 * MiB), "FERRY_DISK_RESERVE_RATIO": "0",
           "FERRY_CACHE_BLOCK_BYTES": str(MiB)}
    with GatewayProcess(seaweed, small_disk / "gw", env=env) as gw:
        s3 = gw.client()
        bucket = f"disk-{uuid.uuid4().hex[:8]}"
        s3.create_bucket(Bucket=bucket)
        s3.put_object(Bucket=bucket, Key="confirm", Body=b"c")
        acknowledged: dict[str, bytes] = {}
        refused: list[dict[str, Any]] = []
        seaweed.pause()
        try:
            for i in range(40):
                body = os.urandom(3 * MiB)
                try:
                    s3.put_object(Bucket=bucket, Key=f"w/{i}", Body=body)
                    acknowledged[f"w/{i}"] = body
                except ClientError as err:
                    refused.append(err.response)
        finally:
            seaweed.resume()
        assert refused, "the disk never filled"
        for response in refused:
            assert response["Error"]["Code"] == "SlowDown", response
            assert response["ResponseMetadata"]["HTTPStatusCode"] == 503
            assert response["ResponseMetadata"]["HTTPHeaders"].get("retry-after")
        assert len(acknowledged) >= 8
        gw.flush(bucket)
        remote = seaweed.client()
        for key, body in acknowledged.items():
            assert remote.get_object(Bucket=bucket, Key=key)["Body"].read() == body

        cold = {f"cold/{i}": os.urandom(3 * MiB) for i in range(3)}
        for key, body in cold.items():
            remote.put_object(Bucket=bucket, Key=key, Body=body)
        _fill(small_disk, MiB)
        for key, body in cold.items():
            assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body
            assert s3.get_object(Bucket=bucket, Key=key, Range="bytes=5-99")["Body"].read() == body[5:100]
        assert gw.proc is not None and gw.proc.poll() is None
        (small_disk / "ballast").unlink()


def test_cold_reads_on_a_nearly_full_disk(seaweed: Any, small_disk: Path) -> None:
    """Misses with no room for their blocks are read through (200, right bytes), and a block
    already cached is still served."""
    env = {"FERRY_DISK_RESERVE_BYTES": str(8 * MiB), "FERRY_DISK_RESERVE_RATIO": "0",
           "FERRY_CACHE_BLOCK_BYTES": str(MiB)}
    with GatewayProcess(seaweed, small_disk / "gw", env=env) as gw:
        s3 = gw.client()
        bucket = f"cold-{uuid.uuid4().hex[:8]}"
        s3.create_bucket(Bucket=bucket)
        remote = seaweed.client()
        warm = os.urandom(MiB // 2)
        remote.put_object(Bucket=bucket, Key="warm", Body=warm)
        assert s3.get_object(Bucket=bucket, Key="warm")["Body"].read() == warm  # cached now
        cold = {f"cold/{i}": os.urandom(3 * MiB) for i in range(3)}
        for key, body in cold.items():
            remote.put_object(Bucket=bucket, Key=key, Body=body)
        _fill(small_disk, MiB)
        for _ in range(2):
            for key, body in cold.items():
                assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body
                assert s3.get_object(Bucket=bucket, Key=key, Range="bytes=5-99")["Body"].read() == body[5:100]
        assert s3.get_object(Bucket=bucket, Key="warm")["Body"].read() == warm
        assert gw.proc is not None and gw.proc.poll() is None
        (small_disk / "ballast").unlink()


def test_metrics_files_never_sigbus_on_a_full_disk(small_disk: Path) -> None:
    """prometheus_client grows its multiprocess files sparsely; on a full disk a new sample then
    hits an unbacked page (SIGBUS). The files are allocated first: at worst an OSError."""
    metrics_dir = small_disk / "metrics"
    metrics_dir.mkdir()
    script = ("import sys\n"
              "import app.metrics as m\n"
              "m.cache_outcome('hit', 'first', 1)\n"
              "print('ready', flush=True)\n"
              "sys.stdin.readline()\n"
              "try:\n"
              "    for i in range(20000):\n"
              "        m.cache_outcome('hit', f'bucket-{i:05d}-' + 'x' * 40, 1)\n"
              "except OSError as exc:\n"
              "    print('refused', exc.errno)\n")
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(metrics_dir))
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    _fill(small_disk, 0)  # the disk fills while the process runs, as it would under a worker
    out, err = proc.communicate("go\n", timeout=120)
    assert proc.returncode == 0, (proc.returncode, err[-2000:])
    assert "refused 28" in out  # the library grew its file; the space was asked for first


def test_headers_that_never_finish_are_cut_off(seaweed: Any, tmp_path: Path) -> None:
    """Slowloris: a request line and a header byte now and then. The connection is closed once
    the headers took longer than FERRY_HTTP_HEADER_TIMEOUT, and the server keeps answering."""
    with GatewayProcess(seaweed, tmp_path / "gw", env={"FERRY_HTTP_HEADER_TIMEOUT": "2"}) as gw:
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as idle, \
                socket.create_connection(("127.0.0.1", gw.port), timeout=10) as slow:
            slow.sendall(b"PUT /bucket/key HTTP/1.1\r\nHost: x\r\n")
            started = time.monotonic()
            closed = False
            while time.monotonic() - started < 8 and not closed:
                try:
                    slow.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    closed = True
                    break
                slow.settimeout(0.5)
                try:
                    closed = slow.recv(1024) == b""
                except TimeoutError:
                    pass
                except OSError:
                    closed = True
            assert closed and time.monotonic() - started < 5, "the slow headers' connection is still open"
            idle.settimeout(5)
            assert idle.recv(1) == b"", "a connection that never sent a request is still open"
        assert gw.client().list_buckets()["ResponseMetadata"]["HTTPStatusCode"] == 200
