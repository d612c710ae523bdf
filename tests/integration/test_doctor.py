"""``ferry doctor`` against real components: SeaweedFS as the remote, a real data dir, the
machine's PostgreSQL and Redis; each bad case is made for real (wrong keys, a held lock, a closed
broker port, a catalog one migration behind) and must give a FAIL line and exit 1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.adapters.catalog.migrate import upgrade
from app.adapters.local.datadir import DataDirLock
from tests.support.seaweed import SeaweedServer

FERRY = str(Path(sys.executable).with_name("ferry"))
TOKEN = "doctor-test-admin-token-0123456789"


def _head() -> str:
    """The newest migration (the doctor's "at <head>"), read from the migrations themselves."""
    from alembic.script import ScriptDirectory

    from app.adapters.catalog.migrate import alembic_config

    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None
    return head


HEAD = _head()


def _env(seaweed: SeaweedServer, data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FERRY_", "AWS_"))}
    env.update(FERRY_DATA_DIR=str(data_dir), FERRY_REMOTE_ENDPOINT=seaweed.endpoint,
               FERRY_REMOTE_ACCESS_KEY=seaweed.access_key, FERRY_REMOTE_SECRET_KEY=seaweed.secret_key,
               FERRY_REMOTE_REGION=seaweed.region, FERRY_ACCESS_KEY="doctorkey", FERRY_SECRET_KEY="doctorsecret0123",
               FERRY_ADMIN_TOKEN=TOKEN)
    env.update(extra)
    return env


def doctor(env: dict[str, str], *args: str) -> tuple[int, list[str]]:
    proc = subprocess.run([FERRY, "doctor", "--timeout", "3", *args], env=env, capture_output=True,
                          text=True, timeout=90)
    return proc.returncode, (proc.stdout + proc.stderr).splitlines()


def fails(lines: list[str], area: str) -> list[str]:
    return [line for line in lines if line.startswith(f"FAIL {area}:")]


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data dir whose SQLite catalog is at head, as ``ferry serve`` leaves it."""
    path = tmp_path / "data"
    path.mkdir()
    upgrade(f"sqlite:///{path / 'ferry.db'}")
    return path


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port nobody listens on (bound without listen while the test runs)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_healthy_node_passes_with_bandwidth_probe(seaweed: SeaweedServer, seaweed_bucket: str,
                                                  data_dir: Path) -> None:
    code, lines = doctor(_env(seaweed, data_dir), "--probe-bucket", seaweed_bucket)
    assert code == 0, lines
    assert not [line for line in lines if line.startswith("FAIL")], lines
    assert any(line.startswith(f"OK   catalog schema: up to date (migration {HEAD})") for line in lines), lines
    assert any(line.startswith("OK   remote default:") and "credentials accepted" in line for line in lines)
    assert any("clock skew" in line for line in lines), lines
    assert any("MiB/s" in line and seaweed_bucket in line for line in lines), lines
    assert any(line.startswith(("OK   filesystem:", "WARN filesystem:")) and "fsync" in line for line in lines)
    assert not list(seaweed.client().list_objects_v2(Bucket=seaweed_bucket).get("Contents", [])), \
        "the bandwidth probe left its scratch object behind"


def test_s3_keys_the_catalog_holds_count_without_ferry_access_key(seaweed: SeaweedServer, data_dir: Path) -> None:
    """Issue 31: with the quickstart's ferry.env sourced (no FERRY_ACCESS_KEY: that is the gateway's
    own variable), the doctor warned "no bootstrap S3 key" although the catalog held the key that
    works. It asks the catalog now; the warning stays for a catalog with no enabled key."""
    from app.adapters.catalog.control.tenants import TenantRepo
    from app.adapters.catalog.engine import make_engine

    env = _env(seaweed, data_dir)
    del env["FERRY_ACCESS_KEY"], env["FERRY_SECRET_KEY"]
    code, lines = doctor(env)
    assert code == 0 and any(line.startswith("WARN s3 keys: no S3 key") for line in lines), lines
    engine = make_engine(f"sqlite:///{data_dir / 'ferry.db'}", pool_size=1)
    try:
        repo = TenantRepo(engine)
        repo.create("default", None)
        repo.create_key("default")
    finally:
        engine.dispose()
    code, lines = doctor(env)
    assert code == 0, lines
    assert "OK   s3 keys: 1 enabled key(s) in the catalog" in lines, lines
    assert not [line for line in lines if "FERRY_ACCESS_KEY" in line or line.startswith("WARN s3 keys")], lines


def test_wrong_remote_keys_fail(seaweed: SeaweedServer, data_dir: Path) -> None:
    env = _env(seaweed, data_dir, FERRY_REMOTE_SECRET_KEY="not-the-secret-key-at-all")
    code, lines = doctor(env)
    assert code == 1, lines
    assert fails(lines, "remote default"), lines
    assert any("SignatureDoesNotMatch" in line or "AccessDenied" in line or "InvalidAccessKeyId" in line
               for line in fails(lines, "remote default")), lines


def test_locked_data_dir_fails_unless_serving(seaweed: SeaweedServer, data_dir: Path) -> None:
    env = _env(seaweed, data_dir)
    with DataDirLock(data_dir):
        code, lines = doctor(env)
        assert code == 1, lines
        assert any(f"pid {os.getpid()}" in line for line in fails(lines, "data dir lock")), lines
        code, lines = doctor(env, "--serving")  # a gateway is meant to hold it
        assert code == 0, lines
    code, lines = doctor(env, "--serving")  # ... and none does
    assert code == 1 and fails(lines, "data dir lock"), lines


def test_unreachable_broker_fails(seaweed: SeaweedServer, data_dir: Path, closed_port: int) -> None:
    env = _env(seaweed, data_dir, FERRY_BROKER_URL=f"redis://127.0.0.1:{closed_port}/0", FERRY_NODE_ID="doc1")
    code, lines = doctor(env)
    assert code == 1, lines
    assert fails(lines, "broker"), lines


@pytest.mark.fleet
def test_fleet_broker_and_postgres_pass(seaweed: SeaweedServer, tmp_path: Path, fresh_postgres_url: str,
                                        redis_url: str) -> None:
    upgrade(fresh_postgres_url)
    env = _env(seaweed, tmp_path, FERRY_DATABASE_URL=fresh_postgres_url, FERRY_BROKER_URL=redis_url,
               FERRY_NODE_ID="doc1")
    code, lines = doctor(env)
    assert code == 0, lines
    assert any(line.startswith("OK   broker:") and "PING" in line for line in lines), lines
    assert any(line.startswith("OK   catalog: postgresql") for line in lines), lines


def test_missing_migration_level_fails(seaweed: SeaweedServer, tmp_path: Path) -> None:
    upgrade(f"sqlite:///{tmp_path / 'ferry.db'}", "0005c")
    code, lines = doctor(_env(seaweed, tmp_path))
    assert code == 1, lines
    assert any("at 0005c" in line and HEAD in line and "ferry db upgrade" in line
               for line in fails(lines, "catalog schema")), lines


def test_missing_admin_token_and_bad_tls_fail(seaweed: SeaweedServer, data_dir: Path, tmp_path: Path) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("not a certificate")
    env = _env(seaweed, data_dir, FERRY_TLS_CERT=str(cert), FERRY_TLS_KEY=str(cert))
    del env["FERRY_ADMIN_TOKEN"]
    code, lines = doctor(env)
    assert code == 1, lines
    assert fails(lines, "admin token") and fails(lines, "tls"), lines
