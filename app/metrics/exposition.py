"""The /metrics body: this process's or every worker's samples (multiprocess mode), plus extra
collectors."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import REGISTRY, generate_latest
from prometheus_client.core import Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from app.metrics.http_requests import flush_requests


def multiprocess_dir() -> str | None:
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    return path if path and os.path.isdir(path) else None


class _Chain:
    """A registry-like object: what ``generate_latest`` needs is only ``collect()``."""

    def __init__(self, *sources: Any) -> None:
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        for source in self.sources:
            yield from source.collect()


def process_metrics() -> Any:
    """The counters and histograms of every worker (multiprocess mode) or of this process."""
    path = multiprocess_dir()
    return MultiProcessCollector(None, path) if path else REGISTRY


def process_registry() -> Any:
    """What a process without the admin app serves (a Celery worker's own /metrics)."""
    return _Chain(process_metrics())


def exposition(*extra: Any) -> tuple[bytes, str]:
    """The /metrics body and its content type: all workers' samples plus ``extra`` collectors."""
    return generate_latest(_Chain(process_metrics(), *extra)), CONTENT_TYPE_LATEST


def samples(names: Iterable[str]) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Current values of some metrics (sample names, e.g. ``ferry_http_requests_total``), all workers."""
    wanted = set(names)
    out: dict[str, list[tuple[dict[str, str], float]]] = {name: [] for name in wanted}
    for family in process_metrics().collect():
        for sample in family.samples:
            if sample.name in wanted:
                out[sample.name].append((dict(sample.labels), float(sample.value)))
    return out


def process_exit() -> None:
    """On a worker's shutdown: write what is pending; its live gauges (requests in flight) stop counting."""
    flush_requests()
    path = multiprocess_dir()
    if path:
        mark_process_dead(os.getpid(), path)

