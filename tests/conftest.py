"""Shared fixtures. Servers and certificates live in tests/support; this file only wires them.

Markers (declared in pyproject.toml): ``fleet`` tests need PostgreSQL and Redis; they are skipped
when either is unreachable, or fail instead when FERRY_REQUIRE_SERVICES=1 (CI sets it).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `import tests.support...` also under a bare `pytest`
    sys.path.insert(0, str(ROOT))

from tests.support.counting_proxy import CountingProxy  # noqa: E402
from tests.support.databases import throwaway_database  # noqa: E402
from tests.support.seaweed import SeaweedServer  # noqa: E402
from tests.support.tls import TLSFiles, make_tls_files  # noqa: E402

# ------------------------------------------------------------------ fleet services

POSTGRES_HOST, POSTGRES_PORT = "127.0.0.1", 5432
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379

# Under pytest-xdist (scripts/test.sh runs the quick profile with -n), each worker process has its
# own database and Redis database, so one worker's fleet tests never see another's rows or queues.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def _per_worker(postgres_url: str, redis_url: str, worker: str) -> tuple[str, str]:
    """``gw0`` keeps the given names; ``gwN`` gets database ``<name>_gwN`` and Redis db 7 + N
    (8, 9, ...; db 15 is gw0's default, 11-14 are left to developers' parallel checkouts)."""
    if not worker.startswith("gw") or not worker[2:].isdigit() or worker == "gw0":
        return postgres_url, redis_url
    from sqlalchemy.engine import make_url

    index = int(worker[2:])
    pg = make_url(postgres_url)
    pg = pg.set(database=f"{pg.database}_{worker}").render_as_string(hide_password=False)
    head, _, _db = redis_url.rpartition("/")
    return pg, f"{head}/{(7 + index) % 16}"


TEST_DATABASE = "ferry_test"
POSTGRES_URL, REDIS_URL = _per_worker(
    os.environ.get("FERRY_TEST_DATABASE_URL",
                   f"postgresql+psycopg://postgres@{POSTGRES_HOST}:{POSTGRES_PORT}/{TEST_DATABASE}"),
    os.environ.get("FERRY_TEST_BROKER_URL", f"redis://{REDIS_HOST}:{REDIS_PORT}/15"),
    XDIST_WORKER,
)


def services_required() -> bool:
    return os.environ.get("FERRY_REQUIRE_SERVICES", "") not in ("", "0", "false", "no")


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


_fleet_problem: list[str | None] = []  # memo: [None] = fine, [reason] = unavailable


def fleet_unavailable() -> str | None:
    """Why PostgreSQL/Redis cannot be used, or None. Checked once per session."""
    if not _fleet_problem:
        missing = [
            f"{name} ({host}:{port})"
            for name, host, port in (
                ("PostgreSQL", POSTGRES_HOST, POSTGRES_PORT),
                ("Redis", REDIS_HOST, REDIS_PORT),
            )
            if not _reachable(host, port)
        ]
        _fleet_problem.append(f"not reachable: {', '.join(missing)}" if missing else None)
    return _fleet_problem[0]


def require_fleet() -> None:
    """Skip the calling test (or fail it, with FERRY_REQUIRE_SERVICES=1) without the services."""
    problem = fleet_unavailable()
    if problem is None:
        return
    if services_required():
        pytest.fail(f"fleet services required (FERRY_REQUIRE_SERVICES=1) but {problem}", pytrace=False)
    pytest.skip(f"fleet test skipped: {problem} (set FERRY_REQUIRE_SERVICES=1 to fail instead)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("fleet") is not None:
        require_fleet()


@dataclass(frozen=True)
class FleetServices:
    postgres_url: str
    redis_url: str


@pytest.fixture(scope="session")
def fleet_services() -> FleetServices:
    """PostgreSQL (database ``ferry_test``, created if missing) and Redis; skip/fail without them."""
    require_fleet()
    _ensure_database(POSTGRES_URL)
    return FleetServices(postgres_url=POSTGRES_URL, redis_url=REDIS_URL)


@pytest.fixture(scope="session")
def postgres_url(fleet_services: FleetServices) -> str:
    """``postgresql+psycopg://postgres@127.0.0.1:5432/ferry_test`` (FERRY_TEST_DATABASE_URL overrides)."""
    return fleet_services.postgres_url


@pytest.fixture(scope="session")
def redis_url(fleet_services: FleetServices) -> str:
    """``redis://127.0.0.1:6379/15`` (FERRY_TEST_BROKER_URL overrides)."""
    return fleet_services.redis_url


def _ensure_database(url: str) -> None:
    import psycopg
    from sqlalchemy.engine import make_url

    u = make_url(url)
    if not u.drivername.startswith("postgresql") or not u.database:
        return
    admin = psycopg.connect(
        host=u.host or POSTGRES_HOST,
        port=u.port or POSTGRES_PORT,
        user=u.username or "postgres",
        password=u.password,
        dbname="postgres",
        autocommit=True,
        connect_timeout=5,
    )
    with admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (u.database,)).fetchone()
        if not exists:
            with contextlib.suppress(psycopg.errors.DuplicateDatabase):  # created concurrently
                admin.execute(f'CREATE DATABASE "{u.database}"')


# ------------------------------------------------------------------ remote region (SeaweedFS)


@pytest.fixture(scope="session")
def seaweed() -> Iterator[SeaweedServer]:
    """One real SeaweedFS S3 server (``weed mini``) for the whole session.

    Tests that stop, pause or kill the server must leave it running again (``start()`` /
    ``resume()``); tests that need their own server should start one: ``with SeaweedServer() as s``.
    """
    server = SeaweedServer().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def proxy(seaweed: SeaweedServer) -> Iterator[CountingProxy]:
    """A counting HTTP proxy in front of the session's SeaweedFS: a remote whose requests a
    test can count, and which can play an outage (``proxy.fail_with = 503``)."""
    with CountingProxy(seaweed) as p:
        yield p


@pytest.fixture
def seaweed_bucket(seaweed: SeaweedServer) -> str:
    """A fresh, empty bucket on the session's SeaweedFS server."""
    return seaweed.create_bucket(f"t-{uuid.uuid4().hex[:16]}")


@pytest.fixture(scope="module")
def module_seaweed_bucket(seaweed: SeaweedServer) -> str:
    """A fresh bucket on the session's SeaweedFS server, shared by one module's tests."""
    return seaweed.create_bucket(f"m-{uuid.uuid4().hex[:16]}")


@pytest.fixture
def healthy_proxy(proxy: CountingProxy) -> Iterator[CountingProxy]:
    """The module's counting proxy with no outage and nothing counted yet, and no outage left
    behind (``pytestmark = pytest.mark.usefixtures("healthy_proxy")``)."""
    proxy.fail_with = None
    proxy.reset()
    yield proxy
    proxy.fail_with = None


# ------------------------------------------------------------------ TLS


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    """CA + server certificate for 127.0.0.1/localhost/::1: .cert_chain, .key, .ca_bundle."""
    return make_tls_files(tmp_path_factory.mktemp("tls"))


# ------------------------------------------------------------------ gateway fixtures


from botocore.exceptions import ClientError  # noqa: E402

from tests.support.gateway import GatewayProcess, remote_client  # noqa: E402


@pytest.fixture(scope="session")
def gateway(seaweed: SeaweedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """One ``ferry serve`` (embedded default) over HTTP in front of the session's SeaweedFS."""
    with GatewayProcess(seaweed, tmp_path_factory.mktemp("gw")) as gw:
        yield gw


@pytest.fixture(scope="session")
def gateway_tls(seaweed: SeaweedServer, tls_files: TLSFiles,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """The same over HTTPS (self-signed CA): boto3 then sends aws-chunked bodies with trailers."""
    with GatewayProcess(seaweed, tmp_path_factory.mktemp("gwtls"), tls=tls_files) as gw:
        yield gw


@pytest.fixture(params=["http", "https"])
def s3(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A boto3 client against the gateway, over HTTP and over HTTPS.

    Closed after the test: a live idle TLS connection would hold up the gateway's shutdown.
    """
    gw = request.getfixturevalue("gateway" if request.param == "http" else "gateway_tls")
    client = gw.client()
    yield client
    client.close()


def empty_bucket(gateway: GatewayProcess, seaweed: SeaweedServer, name: str) -> None:
    """Abort the bucket's uploads, destage what the gateways buffered, delete every object."""
    client = gateway.client()
    for upload in client.list_multipart_uploads(Bucket=name).get("Uploads", []):
        client.abort_multipart_upload(Bucket=name, Key=upload["Key"], UploadId=upload["UploadId"])
    remote = remote_client(seaweed)
    for page in remote.get_paginator("list_objects_v2").paginate(Bucket=name):
        for item in page.get("Contents", []):
            remote.delete_object(Bucket=name, Key=item["Key"])


@pytest.fixture(scope="module")
def module_bucket(gateway: GatewayProcess, seaweed: SeaweedServer) -> Iterator[str]:
    """One bucket per test module: a SeaweedFS bucket costs a volume (~0.2 s, and a session has
    only as many volumes as GiB of free disk)."""
    name = f"b-{uuid.uuid4().hex[:16]}"
    gateway.client().create_bucket(Bucket=name)
    yield name
    empty_bucket(gateway, seaweed, name)
    with contextlib.suppress(ClientError):
        remote_client(seaweed).delete_bucket(Bucket=name)


@pytest.fixture
def bucket(module_bucket: str, gateway: GatewayProcess, seaweed: SeaweedServer) -> Iterator[str]:
    """The module's bucket, emptied after each test."""
    yield module_bucket
    empty_bucket(gateway, seaweed, module_bucket)


# ------------------------------------------------------------------ write-back fault tests (fleet)
# (used by tests/integration/test_writeback_faults.py; owned there)


@pytest.fixture
def fresh_postgres_url(postgres_url: str) -> Iterator[str]:
    """A new, empty PostgreSQL database for one test (``ferry serve`` migrates it), dropped after."""
    with throwaway_database(postgres_url, "ferry_wb") as url:
        yield url


# ------------------------------------------------------------------ end of write-back fault tests section
