"""The Grafana dashboard and the example alerts only use metrics (and labels) Ferry exposes.

The names come from the code itself: every prometheus_client metric of app/metrics/ and the
families the catalog collector emits (described without a database). A renamed metric breaks here,
not silently in an operator's dashboard.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import Counter, Gauge, Histogram

from app import metrics

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "docs" / "grafana" / "ferry.json"
ALERTS = ROOT / "docs" / "prometheus" / "alerts.yml"

TARGET_LABELS = {"instance", "job"}  # added by Prometheus at scrape time
_NAME = re.compile(r"\bferry_[a-zA-Z0-9_]+")
_SELECTOR = re.compile(r"\b(ferry_[a-zA-Z0-9_]+)\{([^}]*)\}")
_MATCHER = re.compile(r"\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")


class _NoCatalog:
    def node_stats(self) -> metrics.NodeStats:
        raise AssertionError("describe() must not query the catalog")


def exposed() -> dict[str, set[str]]:
    """Sample name -> label names, for everything /metrics can show."""
    out: dict[str, set[str]] = {}
    for obj in vars(metrics).values():
        if isinstance(obj, Counter | Gauge | Histogram):
            name, labels = obj._name, set(obj._labelnames)  # no public accessor
            if isinstance(obj, Counter):
                out[f"{name}_total"] = labels
            elif isinstance(obj, Histogram):
                out[f"{name}_bucket"] = labels | {"le"}
                out[f"{name}_count"] = labels
                out[f"{name}_sum"] = labels
            else:
                out[name] = labels
    collector = metrics.CatalogCollector(_NoCatalog(), write_buffer_bytes=1, cache_budget_bytes=1)
    for family in collector.describe():
        out[family.name] = set(getattr(family, "_labelnames", ()))
    return out


def dashboard_exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    exprs: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                exprs.append(node["expr"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc.get("panels", []))
    return exprs


def alert_exprs() -> list[str]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [rule["expr"] for group in doc["groups"] for rule in group["rules"]]


def check(expr: str, names: dict[str, set[str]]) -> list[str]:
    """Problems of one PromQL expression: unknown metrics, unknown labels in selectors or grouping."""
    problems = []
    used = set(_NAME.findall(expr))
    for name in used - names.keys():
        problems.append(f"unknown metric {name}")
    for name, matchers in _SELECTOR.findall(expr):
        for label, _op in _MATCHER.findall(",".join(m for m in matchers.split(",") if m.strip())):
            if name in names and label not in names[name] | TARGET_LABELS:
                problems.append(f"{name} has no label {label!r}")
    allowed = set().union(*(names.get(n, set()) for n in used)) | TARGET_LABELS
    for group in _GROUPING.findall(expr):
        for label in filter(None, (x.strip() for x in group.split(","))):
            if label not in allowed:
                problems.append(f"grouping by {label!r}, which none of {sorted(used)} has")
    return problems


def test_dashboard_is_valid_grafana_json() -> None:
    doc = json.loads(DASHBOARD.read_text())
    assert doc["title"] and doc["uid"]
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in doc["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]


@pytest.mark.parametrize("source", ["dashboard", "alerts"])
def test_queries_use_only_exposed_metrics_and_labels(source: str) -> None:
    names = exposed()
    exprs = dashboard_exprs() if source == "dashboard" else alert_exprs()
    assert exprs
    problems = {expr: found for expr in exprs if (found := check(expr, names))}
    assert not problems, json.dumps(problems, indent=2)


def test_dashboard_covers_what_operators_watch() -> None:
    used = set().union(*(set(_NAME.findall(e)) for e in dashboard_exprs()))
    for name in ("ferry_cache_requests_total", "ferry_http_requests_total", "ferry_http_request_duration_seconds_bucket",
                 "ferry_http_request_bytes_total", "ferry_http_response_bytes_total", "ferry_cache_bytes",
                 "ferry_cache_pinned_bytes", "ferry_dirty_bytes", "ferry_destage_queue_depth",
                 "ferry_destage_lag_seconds", "ferry_destage_failures_total", "ferry_destage_failed_versions",
                 "ferry_remote_request_duration_seconds_bucket", "ferry_remote_requests_total",
                 "ferry_cache_evictions_total", "ferry_cache_singleflight_wait_seconds_count",
                 "ferry_write_buffer_bytes", "ferry_cache_budget_bytes"):
        assert name in used, f"the dashboard does not show {name}"


def test_alert_rules_are_complete() -> None:
    doc = yaml.safe_load(ALERTS.read_text())
    names = set()
    for group in doc["groups"]:
        for rule in group["rules"]:
            assert {"alert", "expr", "labels", "annotations"} <= rule.keys(), rule
            assert rule["labels"]["severity"] in {"info", "warning", "critical"}
            assert rule["annotations"]["summary"]
            names.add(rule["alert"])
    assert {"FerryLowCacheHitRatio", "FerryDestageLagHigh", "FerryWriteBufferNearlyFull", "FerryRemoteErrors"} <= names


def test_the_checker_catches_mistakes() -> None:
    names = exposed()
    assert check('sum(rate(ferry_http_requests_total{instance=~"$instance"}[5m]))', names) == []
    assert check("rate(ferry_no_such_thing_total[5m])", names) == ["unknown metric ferry_no_such_thing_total"]
    assert check('ferry_http_requests_total{bucket="b"}', names) == ["ferry_http_requests_total has no label 'bucket'"]
    assert check("sum by (le, bucket) (rate(ferry_http_request_duration_seconds_bucket[5m]))", names)
