"""The test support servers themselves: a real SeaweedFS, TLS files, the fleet-service check."""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from botocore.config import Config
from botocore.exceptions import ConnectTimeoutError, ReadTimeoutError

from tests.support.seaweed import SeaweedServer
from tests.support.tls import TLSFiles


def test_put_get_and_restart_keeps_data(seaweed: SeaweedServer, seaweed_bucket: str) -> None:
    s3 = seaweed.client()
    body = b"ferry" * 1000
    put = s3.put_object(Bucket=seaweed_bucket, Key="dir/obj.bin", Body=body, Metadata={"k": "v"})
    got = s3.get_object(Bucket=seaweed_bucket, Key="dir/obj.bin")
    assert got["Body"].read() == body
    assert got["ETag"] == put["ETag"]
    assert got["Metadata"] == {"k": "v"}
    assert seaweed.startup_seconds is not None and seaweed.startup_seconds < 30

    endpoint = seaweed.endpoint
    seaweed.stop()
    assert not seaweed.is_running()
    seaweed.start()
    assert seaweed.endpoint == endpoint  # same ports: clients made before the restart still work
    got = s3.get_object(Bucket=seaweed_bucket, Key="dir/obj.bin")
    assert got["Body"].read() == body
    assert got["Metadata"] == {"k": "v"}
    assert seaweed_bucket in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def test_kill_and_restart_keeps_acknowledged_data(seaweed: SeaweedServer, seaweed_bucket: str) -> None:
    s3 = seaweed.client()
    s3.put_object(Bucket=seaweed_bucket, Key="k", Body=b"durable")
    seaweed.kill()
    seaweed.start()
    assert s3.get_object(Bucket=seaweed_bucket, Key="k")["Body"].read() == b"durable"


def test_pause_makes_the_remote_hang(seaweed: SeaweedServer, seaweed_bucket: str) -> None:
    impatient = seaweed.client(connect_timeout=0.5, read_timeout=0.5)
    with seaweed.paused_for():
        t0 = time.monotonic()
        with pytest.raises((ReadTimeoutError, ConnectTimeoutError)):
            impatient.head_bucket(Bucket=seaweed_bucket)
        assert time.monotonic() - t0 < 10
    impatient.head_bucket(Bucket=seaweed_bucket)


def test_aws_like_bucket_behaviour(seaweed: SeaweedServer, seaweed_bucket: str) -> None:
    s3 = seaweed.client()
    s3.put_object(Bucket=seaweed_bucket, Key="k", Body=b"x")
    with pytest.raises(s3.exceptions.ClientError) as e:
        s3.delete_bucket(Bucket=seaweed_bucket)
    assert e.value.response["Error"]["Code"] == "BucketNotEmpty"
    with pytest.raises(s3.exceptions.NoSuchBucket):
        s3.put_object(Bucket=f"{seaweed_bucket}-missing", Key="k", Body=b"x")


def test_two_servers_at_once_get_distinct_ports() -> None:
    with SeaweedServer() as a, SeaweedServer() as b:
        assert a.endpoint != b.endpoint
        a.client().create_bucket(Bucket="only-on-a")
        names = [x["Name"] for x in b.client().list_buckets()["Buckets"]]
        assert "only-on-a" not in names


def test_tls_files_serve_https(tls_files: TLSFiles) -> None:
    class Hello(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    server.socket = tls_files.server_context().wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        for host in ("127.0.0.1", "localhost"):
            with urllib.request.urlopen(f"https://{host}:{port}/", context=tls_files.client_context(), timeout=5) as r:
                assert r.read() == b"ok"
        with pytest.raises(urllib.error.URLError) as e:
            urllib.request.urlopen(f"https://127.0.0.1:{port}/", context=ssl.create_default_context(), timeout=5)
        assert "CERTIFICATE_VERIFY_FAILED" in str(e.value)
    finally:
        server.shutdown()
        server.server_close()


def test_client_config(seaweed: SeaweedServer) -> None:
    s3 = seaweed.client()
    assert s3.meta.config.retries["total_max_attempts"] == 1  # no hidden retries by default
    assert s3.meta.config.s3["addressing_style"] == "path"
    assert s3.meta.region_name == seaweed.region == "us-east-1"
    assert s3.meta.endpoint_url == seaweed.endpoint
    s3 = seaweed.client(retries={"total_max_attempts": 3, "mode": "standard"})  # Config passthrough
    assert isinstance(s3.meta.config, Config)
    assert s3.meta.config.retries["total_max_attempts"] == 3


@pytest.mark.fleet
def test_fleet_services_answer(postgres_url: str, redis_url: str) -> None:
    import redis
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    engine = create_engine(postgres_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT current_database()")).scalar() == make_url(postgres_url).database
    finally:
        engine.dispose()
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    try:
        assert client.ping()
    finally:
        client.close()


@pytest.mark.slow
def test_more_buckets_than_weed_minis_default_volume_cap() -> None:
    # weed mini's own cap (free disk / volume size; 78 here) made the first PUT into the 79th
    # bucket fail with InternalError; SeaweedServer lifts it with -volume.max.
    with SeaweedServer() as server:
        s3 = server.client()
        for i in range(100):
            s3.create_bucket(Bucket=f"many-{i:03d}")
            s3.put_object(Bucket=f"many-{i:03d}", Key="k", Body=b"x")


@pytest.mark.slow
def test_no_orphan_weed_when_the_test_process_is_killed() -> None:
    script = (
        "import json, sys, time\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})\n"
        "from tests.support.seaweed import SeaweedServer\n"
        "s = SeaweedServer().start()\n"
        "print(json.dumps({'pid': s.pid, 'dir': str(s.base_dir)}), flush=True)\n"
        "time.sleep(120)\n"
    )
    runner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(runner.stdout.readline())
    finally:
        runner.send_signal(signal.SIGKILL)
        runner.wait()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                state = Path(f"/proc/{info['pid']}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                break  # gone
            if state == "Z":
                break
            time.sleep(0.2)
        else:
            os.kill(info["pid"], signal.SIGKILL)
            pytest.fail("weed outlived the killed test process by 30 s")
    finally:
        shutil.rmtree(info["dir"], ignore_errors=True)
