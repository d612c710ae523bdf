"""docker-compose.yml describes the fleet; validate it with `docker compose config` when present."""

from __future__ import annotations

import importlib
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"


def _compose_v2() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0


def test_compose_file_structure() -> None:
    doc = yaml.safe_load(COMPOSE.read_text())
    services = doc["services"]
    assert {"gateway", "worker", "beat", "redis", "postgres", "remote", "migrate"} <= set(services)
    for name, svc in services.items():
        for dep in svc.get("depends_on", {}):
            assert dep in services, f"{name} depends on unknown service {dep}"
    env = services["gateway"]["environment"]
    for key in ("FERRY_DATABASE_URL", "FERRY_BROKER_URL", "FERRY_REMOTE_ENDPOINT", "FERRY_ACCESS_KEY"):
        assert key in env
    assert services["gateway"]["command"][:2] == ["ferry", "serve"]
    # The Celery app the worker and beat run exists and imports.
    assert services["worker"]["command"][:3] == ["celery", "-A", "workers.celery_app"]
    assert importlib.import_module("workers.celery_app").app.main == "ferry"
    assert (ROOT / "Dockerfile").exists()


@pytest.mark.skipif(not _compose_v2(), reason="docker compose v2 is not installed on this machine")
def test_docker_compose_config_validates() -> None:
    out = subprocess.run(["docker", "compose", "-f", str(COMPOSE), "config", "-q"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
