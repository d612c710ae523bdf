"""``RemoteStore``: the remote durable bucket, its operations in three mixins (buckets and
listings, objects, multipart) over one client."""

from __future__ import annotations

from app import metrics
from app.adapters.circuit import CircuitBreaker
from app.adapters.remote.buckets import BucketOps
from app.adapters.remote.client import RemoteConfig, make_client
from app.adapters.remote.multipart import MultipartOps
from app.adapters.remote.objects import ObjectOps
from app.adapters.remote_get import LeanGetter


class RemoteStore(BucketOps, ObjectOps, MultipartOps):
    """One boto3 client (thread-safe) per remote; connection pool sized for parallel transfers."""

    def __init__(self, cfg: RemoteConfig) -> None:
        self.cfg = cfg
        self.client = make_client(cfg)
        metrics.instrument_boto_client(self.client)  # latency and errors by operation
        self.circuit = CircuitBreaker(cfg.endpoint or "aws", cfg.circuit_failures, cfg.circuit_cooldown)
        self.circuit.instrument(self.client)
        self.lean = LeanGetter(self.client, cfg.addressing_style, cfg.max_attempts, cfg.deadline, self.circuit)
        self._conditional: dict[str, bool] = {}  # bucket -> conditional writes honoured
