"""Client construction: one boto3 client per remote (thread-safe), its connection pool sized for
parallel transfers, and its event hooks (header values sent and signed as their raw bytes, a raw ``Expires`` string, the
destage lease fence)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import boto3
from botocore.config import Config
from botocore.handlers import validate_ascii_metadata
from botocore.utils import parse_timestamp

from app.adapters.remote import rawsig
from app.domain import fencing


@dataclass(frozen=True)
class RemoteConfig:
    endpoint: str | None
    region: str
    access_key: str | None
    secret_key: str | None
    addressing_style: str = "path"
    max_connections: int = 64
    connect_timeout: float = 5.0
    read_timeout: float = 10.0
    verify_tls: bool = True
    max_attempts: int = 2
    deadline: float = 15.0
    circuit_failures: int = 1
    circuit_cooldown: float = 5.0
    raw_writes: bool = True  # UploadPart as a raw signed UNSIGNED-PAYLOAD request where it applies (put.py)


def make_client(cfg: RemoteConfig) -> Any:
    """The boto3 S3 client of a remote, with Ferry's header hooks registered."""
    config = Config(
        region_name=cfg.region,
        signature_version="s3v4",
        s3={"addressing_style": cfg.addressing_style},
        max_pool_connections=cfg.max_connections,
        connect_timeout=cfg.connect_timeout,
        read_timeout=cfg.read_timeout,
        retries={"total_max_attempts": cfg.max_attempts, "mode": "standard"},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        tcp_keepalive=True,
    )
    session = boto3.session.Session()
    session._session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=fast_timestamp)
    client = session.client(
        "s3",
        endpoint_url=cfg.endpoint,
        aws_access_key_id=cfg.access_key,
        aws_secret_access_key=cfg.secret_key,
        config=config,
        verify=cfg.verify_tls,
    )
    _register_expires_passthrough(client)
    rawsig.install(client)
    # A destage's write (or botocore's retry of it) never starts once its lease is over.
    client.meta.events.register("before-send.s3.*", _lease_fence, unique_id="ferry-lease-fence")
    return client


def fast_timestamp(value: Any) -> datetime:
    """S3's two timestamp forms (ISO 8601 in listings, RFC 1123 in headers) parsed by the
    standard library; anything else by botocore's parser. botocore's default (dateutil) was 35%
    of the gateway's CPU while it listed 10,000 keys (py-spy, issue 30)."""
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value) if "T" in value else parsedate_to_datetime(value)
        except (ValueError, TypeError, IndexError):
            return parse_timestamp(value)
        return when if when.tzinfo else when.replace(tzinfo=UTC)
    return parse_timestamp(value)


def _lease_fence(**_: Any) -> None:
    fencing.check()


def _register_expires_passthrough(client: Any) -> None:
    """Let callers set a raw ``Expires`` header string (boto3 only accepts datetimes)."""

    def pop_extra(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        extra = params.pop("FerryExtraHeaders", None)
        if extra:
            context["ferry_extra_headers"] = extra

    def add_headers(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        extra = context.get("ferry_extra_headers")
        if extra:
            params["headers"].update(extra)

    events = client.meta.events
    # Metadata arrives as latin-1 strings of the client's raw bytes (UTF-8 included): they
    # must reach the remote unchanged, so boto3's ASCII-only check is lifted.
    for op in ("PutObject", "CopyObject", "CreateMultipartUpload"):
        events.unregister(f"before-parameter-build.s3.{op}", validate_ascii_metadata)
    events.register("provide-client-params.s3.*", pop_extra)
    events.register("before-call.s3.*", add_headers)
