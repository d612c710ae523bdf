"""The order of ``ferry doctor``'s checks: local ones first, then what they talk to."""

from __future__ import annotations

from collections.abc import Iterator

from app.config import Settings
from app.doctor import Finding, fleet, local, remote


def run_checks(settings: Settings, *, serving: bool = False, probe_bucket: str | None = None,
               timeout: float = 5.0) -> Iterator[Finding]:
    """Every finding, in the order a reader fixes them."""
    yield from local.check_settings(settings)
    yield from local.check_data_dir(settings, serving)
    yield from local.check_tls(settings)
    yield from local.check_admin_token(settings)
    yield from remote.check_catalog(settings, timeout)
    yield from remote.check_broker(settings, timeout)
    if serving:
        yield from fleet.check_node_worker(settings, timeout)
    for name, cfg in remote.remote_configs(settings, timeout):
        yield from remote.check_remote(name, cfg, timeout, probe_bucket, settings.max_clock_skew_seconds)
