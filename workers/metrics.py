"""A Celery worker's own ``/metrics``: its destage counters and remote calls, which the
gateway's ``/metrics`` cannot see (another process, often another container).

With FERRY_WORKER_METRICS_PORT set, ``prepare()`` (called before anything imports
prometheus_client) puts the worker in prometheus_client's multiprocess mode in
``<data dir>/metrics-worker-<port>``, so prefork children's samples add up like the gateway's
uvicorn workers'; ``worker_init`` then serves them on that port. Files of dead processes are
removed at start (their counters restart at zero, as a restarted process's would).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from pathlib import Path
from typing import Any

from celery import signals

from app.config import get_settings

log = logging.getLogger("ferry.worker")
_PID_FILE = re.compile(r"_(\d+)\.db$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def prepare() -> Path | None:
    """Multiprocess mode for this worker, before prometheus_client is imported; None when off
    (no port) or when the operator set PROMETHEUS_MULTIPROC_DIR (theirs is used)."""
    settings = get_settings()
    if not settings.worker_metrics_port:
        return None
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    path = settings.data_dir / f"metrics-worker-{settings.worker_metrics_port}"
    path.mkdir(parents=True, exist_ok=True)
    for file in path.glob("*.db"):
        found = _PID_FILE.search(file.name)
        if found and not _alive(int(found.group(1))):
            with contextlib.suppress(OSError):
                file.unlink()
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path)
    return path


@signals.worker_init.connect
def serve_metrics(**_: Any) -> None:
    """The worker's main process serves every process's samples (the pool's included)."""
    settings = get_settings()
    if not settings.worker_metrics_port:
        return
    from prometheus_client import start_http_server

    from app import metrics

    try:
        start_http_server(settings.worker_metrics_port, addr=settings.worker_metrics_host,
                          registry=metrics.process_registry())
    except OSError as exc:  # the port is taken: destage matters more than its counters
        log.error("worker metrics not served on %s:%s: %s", settings.worker_metrics_host,
                  settings.worker_metrics_port, exc)


@signals.worker_process_shutdown.connect
def process_done(**_: Any) -> None:
    """A pool process exits: its live gauges stop counting."""
    from app import metrics

    metrics.process_exit()
