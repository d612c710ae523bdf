"""A full data disk: the data directory on a 64 MiB tmpfs of its own, the remote down (a proxy
answering 503), write-back PUTs until the disk is full.

Checked: writes past the reserve get ``503 SlowDown`` with Retry-After before their body is read
(a PUT whose body is never sent is answered); reads of acknowledged writes and DELETEs keep
answering (never a 500); a kill -9 on the full disk restarts, and the SQLite
journal passes its integrity check; when the remote returns, the backlog drains and PUTs are
accepted again by themselves; every acknowledged write reaches the remote; cold reads on a
nearly full disk answer the right bytes. The tmpfs is always unmounted.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import BotoCoreError, ClientError

from tests.reliability.fleet import START_TIMEOUT, admin
from tests.reliability.ledger import ABSENT, Ledger, sha
from tests.reliability.record import Record
from tests.support.counting_proxy import CountingProxy
from tests.support.gateway import ACCESS_KEY, SECRET_KEY, GatewayProcess

MiB = 1024 * 1024
ENV = {"FERRY_DISK_RESERVE_BYTES": str(8 * MiB), "FERRY_DISK_RESERVE_RATIO": "0",
       "FERRY_CACHE_BLOCK_BYTES": str(MiB), "FERRY_REMOTE_CIRCUIT_COOLDOWN": "1",
       "FERRY_DESTAGE_BACKOFF_CAP": "1", "FERRY_SWEEP_INTERVAL": "0.5", "FERRY_DESTAGE_LEASE_SECONDS": "3"}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs: a filesystem that really fills up; unmounted whatever happens."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path = tmp_path / "disk"
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def headers_only_put(gw: GatewayProcess, bucket: str, key: str, size: int, timeout: float = 10.0) -> bytes:
    """Send a signed PUT's headers and no body; return what the gateway answers meanwhile."""
    url = f"{gw.endpoint}/{bucket}/{key}"
    req = AWSRequest("PUT", url, headers={"Content-Length": str(size), "x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
    SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(req)
    split = urlsplit(url)
    head = [f"PUT {split.path} HTTP/1.1", f"Host: {split.netloc}"]
    head += [f"{k}: {v}" for k, v in req.headers.items() if k.lower() != "host"]
    with socket.create_connection((split.hostname, split.port), timeout=timeout) as s:
        s.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        answer = b""
        try:
            while b"\r\n\r\n" not in answer:
                chunk = s.recv(65536)
                if not chunk:
                    break
                answer += chunk
        except TimeoutError:
            pass
    return answer


def try_put(client: Any, ledger: Ledger, key: str, body: bytes) -> str:
    """'acked', or the S3 error code; a 500 is recorded as unexpected."""
    op = ledger.begin(key, sha(body), len(body))
    try:
        client.put_object(Bucket=ledger.bucket, Key=key, Body=body)  # type: ignore[attr-defined]
    except ClientError as exc:
        op.outcome = "refused"
        meta = exc.response["ResponseMetadata"]
        code = exc.response["Error"]["Code"]
        if (meta["HTTPStatusCode"], code) != (503, "SlowDown") or not meta["HTTPHeaders"].get("retry-after"):
            ledger.record.odd(f"PUT {key} on a full disk: {meta['HTTPStatusCode']} {code}")
        return str(code)
    except (BotoCoreError, OSError) as exc:
        op.outcome = "unknown"
        ledger.record.odd(f"PUT {key}: connection failed: {exc}")
        return "connection"
    op.outcome = "acked"
    return "acked"


def read_check(client: Any, ledger: Ledger, key: str, what: str) -> None:
    try:
        data = client.get_object(Bucket=ledger.bucket, Key=key)["Body"].read()  # type: ignore[attr-defined]
    except (ClientError, BotoCoreError, OSError) as exc:
        ledger.record.add(operations=1)
        ledger.record.odd(f"{what} {key} on a full disk: {exc}")
        return
    ledger.read(key, sha(data), len(data), where=what)


def test_disk_full(seaweed: Any, small_disk: Path, recorder: Callable[[str, str], Record]) -> None:
    rec = recorder("faults", "disk-full")
    ledger = Ledger(rec)
    bucket = seaweed.create_bucket(f"df-{uuid.uuid4().hex[:10]}")
    ledger.bucket = bucket  # type: ignore[attr-defined]
    remote = seaweed.client()
    cold = {f"cold/{i}": os.urandom(2 * MiB + i) for i in range(3)}
    for key, body in cold.items():
        remote.put_object(Bucket=bucket, Key=key, Body=body)
        ledger.seed(key, body)
    with CountingProxy(seaweed) as proxy, GatewayProcess(proxy, small_disk / "gw", env=ENV).start(timeout=START_TIMEOUT) as gw:
        s3 = gw.client(connect_timeout=5, read_timeout=60)
        s3.head_bucket(Bucket=bucket)
        proxy.fail_with, proxy.fail_code = 503, "ServiceUnavailable"  # the remote is down
        rec.add(faults_injected=1)
        outcomes = [try_put(s3, ledger, f"w/{i}", os.urandom(3 * MiB)) for i in range(30)]
        acked = [f"w/{i}" for i, o in enumerate(outcomes) if o == "acked"]
        print(f"{len(acked)} PUTs acknowledged before the disk was full; then {outcomes[len(acked):][:5]}")
        if "SlowDown" not in outcomes:
            rec.odd("the disk never filled: no SlowDown")
        started = time.monotonic()
        answer = headers_only_put(gw, bucket, "never-sent", 3 * MiB)
        waited = time.monotonic() - started
        rec.add(operations=1)
        if not answer.startswith(b"HTTP/1.1 503") or b"retry-after" not in answer.lower():
            rec.odd(f"a PUT whose body never came was not refused at once: {answer[:200]!r} after {waited:.1f}s")
        for key in acked[:5]:  # read-your-writes from the journal's blobs (the remote is down)
            read_check(s3, ledger, key, "GET")
        op = ledger.begin(acked[0], ABSENT, 0)
        try:
            s3.delete_object(Bucket=bucket, Key=acked[0])
            op.outcome = "acked"
        except ClientError as exc:
            op.outcome = "refused"
            if exc.response["ResponseMetadata"]["HTTPStatusCode"] != 503:
                rec.odd(f"DELETE on a full disk: {exc}")
        wipe = admin(gw, "POST", "/admin/cache/wipe")
        print(f"cache wipe on the full disk: {wipe}")
        gw.kill()  # kill -9 on the full disk, then start again on it
        rec.add(faults_injected=1)
        gw.start(timeout=START_TIMEOUT)
        check = sqlite3.connect(small_disk / "gw" / "ferry.db").execute("PRAGMA integrity_check").fetchone()
        if check != ("ok",):
            rec.odd(f"the journal's SQLite database is damaged: {check}")
        s3 = gw.client(connect_timeout=5, read_timeout=60)
        for key in acked[1:4]:
            read_check(s3, ledger, key, "GET after restart")
        proxy.clear_faults()  # the remote returns: the backlog drains and frees the disk
        deadline = time.monotonic() + 90
        while try_put(s3, ledger, "after/space", os.urandom(3 * MiB)) != "acked":
            if time.monotonic() > deadline:
                rec.odd("PUTs still refused 90 s after the remote returned")
                break
            time.sleep(1)
        recovered = time.monotonic() - (deadline - 90)
        result = gw.flush(bucket, timeout=120)
        if not result.get("durable"):
            rec.odd(f"flush did not complete: {result}")
        for key in ledger.keys:
            for where, client in (("remote", remote), ("gateway", s3)):
                try:
                    data = client.get_object(Bucket=bucket, Key=key)["Body"].read()
                    state, size = sha(data), len(data)
                except ClientError as exc:
                    if exc.response["Error"]["Code"] != "NoSuchKey":
                        rec.odd(f"{where} {key}: {exc}")
                        continue
                    state, size = ABSENT, 0
                ledger.verify_final(key, state, size, where=where)
        st = os.statvfs(small_disk)
        ballast = small_disk / "ballast"
        with open(ballast, "wb") as fh:
            fh.write(b"\0" * max(0, st.f_bavail * st.f_frsize - MiB))
        for key in cold:
            read_check(s3, ledger, key, "cold GET on a nearly full disk")
        ballast.unlink()
        if gw.proc is None or gw.proc.poll() is not None:
            rec.odd(f"the gateway died: {gw.log_tail()}")
    print(f"writes accepted again {recovered:.1f}s after the remote returned; {rec.as_json()}")
    rec.assert_clean()
