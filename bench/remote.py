"""The remote region the benchmark talks to, and a byte-counting relay in front of it.

Three kinds, one interface (``up()``, ``shape(link)``, ``down()``, ``.remote``):
  - ``netsim``: bench/netsim (root): SeaweedFS behind an emulated long-haul link, re-shaped in place
    between link profiles, so the objects uploaded once serve every profile;
  - ``loopback``: a SeaweedFS on 127.0.0.1 (tests/support/seaweed.py), unshaped: the smoke profile;
  - ``endpoint``: any S3 endpoint given on the command line; its link is whatever it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
from botocore.config import Config

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import netsim  # noqa: E402


@dataclass(frozen=True)
class Link:
    """A link profile of the issue: RTT and rate per direction (netsim re-shapes to it)."""

    name: str
    rtt_ms: int
    rate_mbit: int

    def describe(self) -> str:
        return f"{self.rtt_ms} ms RTT, {self.rate_mbit} Mbit/s per direction"


LINKS = {name: Link(name, int(shape.rtt_ms), int(shape.rate_mbit)) for name, shape in netsim.PROFILES.items()}


@dataclass(frozen=True)
class Remote:
    """Where an S3 remote answers and with which keys (what GatewayProcess and the clients need)."""

    endpoint: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"

    def client(self, **config: Any) -> Any:
        config.setdefault("s3", {"addressing_style": "path"})
        config.setdefault("signature_version", "s3v4")  # also for presigned URLs (boto3 presigns SigV2 otherwise)
        config.setdefault("max_pool_connections", 32)
        config.setdefault("read_timeout", 600)
        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key, region_name=self.region, config=Config(**config))

    @property
    def hostport(self) -> str:
        return urlsplit(self.endpoint).netloc

    def via(self, endpoint: str) -> Remote:
        """The same remote reached through another endpoint (the counting relay)."""
        return Remote(endpoint, self.access_key, self.secret_key, self.region)


def netsim_remote(link: Link | None = None) -> Remote:
    """Bring the netsim link up (or re-shape it in place to ``link``) and check its address is routed locally.

    The server's TCP buffers are the host's (netsim copies them), also on long-fat: the issue's link
    is 80 ms x 2000 Mbit/s as a stock server sees it, where one stream cannot fill the pipe.
    """
    shape = netsim.Shape(link.rtt_ms, link.rate_mbit) if link is not None else None
    current = netsim.load_state()
    state = netsim.up(shape or (current.shape if current else netsim.PROFILES["regional"]))
    netsim.guard(state.endpoint)
    env = state.env()
    return Remote(env["NETSIM_S3_ENDPOINT"], env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"],
                  env["AWS_DEFAULT_REGION"])


def delete_prefixes(s3: Any, bucket: str, prefixes: list[str]) -> int:
    """Delete every object under ``prefixes`` (the bench's own keys, once no run reads them again)."""
    deleted = 0
    for prefix in prefixes:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
                deleted += len(keys)
    return deleted


class RemoteRegion:
    """Brings up (and always tears down) the remote for a run; ``shape()`` switches link profiles."""

    def __init__(self, kind: str, endpoint: str | None = None, access_key: str | None = None,
                 secret_key: str | None = None, region: str = "us-east-1") -> None:
        self.kind = kind
        self._given = Remote(endpoint, access_key or "", secret_key or "", region) if endpoint else None
        self._seaweed: Any = None
        self._found_netsim: netsim.Shape | None = None  # a link someone else had up: restored, not torn down
        self.remote: Remote | None = None
        self.link: Link | None = None

    def up(self) -> Remote:
        if self.kind == "endpoint":
            assert self._given is not None, "--remote-endpoint needs an endpoint"
            self.remote = self._given
        elif self.kind == "loopback":
            from tests.support.seaweed import SeaweedServer

            self._seaweed = SeaweedServer().start()
            self.remote = Remote(self._seaweed.endpoint, self._seaweed.access_key, self._seaweed.secret_key)
        elif self.kind == "netsim":
            if os.geteuid() != 0:
                raise SystemExit("the netsim remote needs root (or use --profile smoke / --remote-endpoint)")
            found = netsim.load_state()
            self._found_netsim = found.shape if found else None
            self.remote = netsim_remote()
        else:
            raise ValueError(self.kind)
        return self.remote

    def shape(self, link: Link) -> str:
        """Re-shape the link in place (netsim); a description of the link the next numbers see."""
        self.link = link
        if self.kind == "netsim":
            self.remote = netsim_remote(link)
            return f"netsim `{link.name}`: {link.describe()} (SeaweedFS in its own network namespace)"
        if self.kind == "loopback":
            return "loopback SeaweedFS, no shaping (a fast remote: only per-stage and ratio figures mean anything)"
        return f"the given endpoint {self.remote.endpoint if self.remote else '?'}, link as it is"

    def reclaim(self) -> None:
        """Compact the netsim remote's volumes, so objects the bench deleted give their space back."""
        if self.kind == "netsim":
            netsim.vacuum()

    def down(self) -> None:
        if self._seaweed is not None:
            self._seaweed.close()
            self._seaweed = None
        if self.kind == "netsim":
            with contextlib.suppress(Exception):
                if self._found_netsim is None:  # ours: down removes the namespaces, processes and stored objects
                    netsim.down()
                else:
                    netsim.up(self._found_netsim)


class CountingRelay:
    """A TCP relay that counts the bytes the remote sends: how much a contender fetched (the herd).

    It copies bytes unchanged, so SigV4 still verifies: clients sign for the relay's host:port and the
    remote checks the Host header it receives, which is the same.
    """

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https" else 80))
        self.scheme = parts.scheme
        self.down_bytes = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="counting-relay", daemon=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])

    @property
    def endpoint(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, count: bool) -> None:
        try:
            while data := await reader.read(256 * 1024):
                if count:
                    self.down_bytes += len(data)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _handle(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        try:
            u_reader, u_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            c_writer.close()
            return
        await asyncio.gather(self._pipe(c_reader, u_writer, False), self._pipe(u_reader, c_writer, True))

    def start(self) -> CountingRelay:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._handle, "127.0.0.1", self.port), self._loop)
        self._server = fut.result(10)
        return self

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()
