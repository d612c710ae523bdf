"""docker-compose.yml runs a fleet of three nodes with Prometheus and Grafana watching it.

Structure only (no engine here): each node's gateway, worker and beat share one node id, a
gateway and its worker share the node's data volume, the nodes differ, and the Prometheus the
file mounts scrapes every gateway and every worker on the ports they serve.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
NODES = {"node-1": ("gateway", "worker", "beat"), "node-2": ("gateway-2", "worker-2", "beat-2"),
         "node-3": ("gateway-3", "worker-3", "beat-3")}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    yaml = pytest.importorskip("yaml")
    return dict(yaml.safe_load((ROOT / "docker-compose.yml").read_text()))


def _default(value: str) -> str:
    """A ``${NAME:-default}`` value as compose resolves it with NAME unset."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def _data_volume(service: dict[str, Any]) -> str:
    found = [str(v).split(":", 1)[0] for v in service.get("volumes", []) if str(v).endswith(":/data")]
    assert len(found) == 1, service.get("volumes")
    return found[0]


def test_three_nodes_each_with_gateway_worker_and_beat(compose: dict[str, Any]) -> None:
    services = compose["services"]
    volumes = set()
    for node_id, (gateway, worker, beat) in NODES.items():
        for name in (gateway, worker, beat):
            env = services[name]["environment"]
            assert _default(env["FERRY_NODE_ID"]) == node_id, (name, env["FERRY_NODE_ID"])
        assert services[gateway]["command"][:2] == ["ferry", "serve"]
        assert services[worker]["command"][:4] == ["celery", "-A", "workers.celery_app", "worker"]
        assert services[beat]["command"][:4] == ["celery", "-A", "workers.celery_app", "beat"]
        assert _data_volume(services[gateway]) == _data_volume(services[worker])
        volumes.add(_data_volume(services[gateway]))
    assert len(volumes) == 3, "each node has its own data directory"
    published = [p for name in ("gateway", "gateway-2", "gateway-3") for p in services[name]["ports"]]
    assert len(set(published)) == 3, published


def test_gateways_form_one_shared_cache(compose: dict[str, Any]) -> None:
    """Fleet mode on every gateway (docs/fleet.md): the internal port, the shared secret with no
    default, and an address the other containers resolve (the service name on that port). The
    port stays on the compose network, and workers and beats have no internal endpoint."""
    services = compose["services"]
    advertised = set()
    for gateway, worker, beat in NODES.values():
        env = services[gateway]["environment"]
        port = str(env["FERRY_FLEET_PORT"])
        assert int(port) > 0 and port != str(env["FERRY_PORT"]), (gateway, port)
        assert env["FERRY_FLEET_SECRET"] == "${FERRY_FLEET_SECRET:?set FERRY_FLEET_SECRET}", gateway
        assert env["FERRY_FLEET_ADVERTISE"] == f"{gateway}:{port}", gateway
        advertised.add(env["FERRY_FLEET_ADVERTISE"])
        assert not any(str(p).endswith(f":{port}") for p in services[gateway].get("ports", [])), (
            f"{gateway} publishes its internal port: it is for fleet members only")
        for name in (worker, beat):
            assert "FERRY_FLEET_PORT" not in (services[name].get("environment") or {}), name
    assert len(advertised) == 3, advertised


def test_prometheus_scrapes_gateways_and_workers(compose: dict[str, Any]) -> None:
    yaml = pytest.importorskip("yaml")
    services = compose["services"]
    prometheus = services["prometheus"]
    mounts = {str(v).split(":")[1]: ROOT / str(v).split(":")[0] for v in prometheus["volumes"]
              if str(v).startswith("./")}
    config = yaml.safe_load(mounts["/etc/prometheus/prometheus.yml"].read_text())
    targets = {t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    for gateway, worker, _ in NODES.values():
        assert f"{gateway}:{services[gateway]['environment']['FERRY_PORT']}" in targets
        port = services[worker]["environment"]["FERRY_WORKER_METRICS_PORT"]
        assert f"{worker}:{port}" in targets, "a worker's destage counters are scraped from the worker"
    assert mounts["/etc/prometheus/alerts.yml"].exists()


def test_grafana_provisions_the_dashboard(compose: dict[str, Any]) -> None:
    grafana = compose["services"]["grafana"]
    sources = [ROOT / str(v).split(":")[0] for v in grafana["volumes"] if str(v).startswith("./")]
    assert ROOT / "docs" / "grafana" / "ferry.json" in sources
    assert all(path.exists() for path in sources), sources
