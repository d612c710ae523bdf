"""Buffered writes across nodes, the asking side (``services.ports.PeerVersions``).

- ``open``: a read of another node's newest buffered write streams it from that node's internal
  endpoint (``GET /_ferry/v1/journal``). A node that is gone (not live, suspected, refusing the
  connection) answers ``ServiceUnavailable``: the services never fall back to an older version.
- ``replicate``: ``write_replicas: 2`` sends each piece of a write to one other live node
  (rendezvous order over the first piece's id, so replicas spread over the fleet), which fsyncs
  it before answering; a node that fails is suspected and the next one tried. None left: 503
  ``SlowDown`` before anything is committed.
Blocking urllib3 calls run in threads, one connection pool per process.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio.to_thread
import urllib3

from app.domain.errors import S3Error
from app.domain.uploads import PartSource
from app.domain.versions import BlobRef, Replica, VersionRow
from app.fleet import auth
from app.fleet.journal_server import JOURNAL_PATH, REPLICA_PATH, UNSIGNED
from app.fleet.membership import Membership
from app.fleet.part_server import MAX_DROP, PART_PATH

log = logging.getLogger("ferry.fleet")
CHUNK = 1024 * 1024


class PeerFailed(Exception):
    """A peer could not take a replica (connection, timeout, refusal)."""

    def __init__(self, message: str, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused  # it answered (a full buffer or disk): alive, not to be routed around


class HeldBody:
    """A peer's 206 answer, read in threads."""

    def __init__(self, resp: Any, journal: PeerJournal, node_id: str) -> None:
        self.resp = resp
        self.journal = journal
        self.node_id = node_id

    async def chunks(self) -> AsyncIterator[bytes]:
        while True:
            try:
                chunk = await anyio.to_thread.run_sync(self.resp.read1, CHUNK)
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                self.journal.membership.suspect(self.node_id)
                raise S3Error("ServiceUnavailable", f"The node holding this write failed: {exc}") from exc
            if not chunk:
                return
            yield bytes(chunk)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.resp.close()


class PeerJournal:
    def __init__(self, membership: Membership, secret: str, *, timeout: float = 5.0,
                 replica_timeout: float = 120.0, max_connections: int = 32) -> None:
        self.membership = membership
        self.node_id = membership.node_id
        self.secret = secret
        self.http = urllib3.PoolManager(num_pools=64, maxsize=max_connections, retries=False, blocksize=CHUNK,
                                        timeout=urllib3.Timeout(connect=timeout, read=timeout))
        self.replica_timeout = urllib3.Timeout(connect=timeout, read=max(timeout, replica_timeout))

    # ---- reads ---------------------------------------------------------------------------------
    async def open(self, row: VersionRow, first: int, last: int) -> HeldBody | None:
        address = self.membership.address_of(row.node_id)
        if address is None:
            raise S3Error("ServiceUnavailable", f"Node {row.node_id}, which holds this object's latest write, "
                          "is not live; retry once it is back or another node has taken its writes over.")
        resp = await anyio.to_thread.run_sync(self._get, address, row, first, last)
        if resp.status == 206:
            return HeldBody(resp, self, row.node_id)
        resp.drain_conn()
        resp.release_conn()
        if resp.status == 404:
            return None  # not held there any more: the caller looks at the journal again
        raise S3Error("ServiceUnavailable", f"Node {row.node_id} could not serve this write (HTTP {resp.status}).")

    def _get(self, address: str, row: VersionRow, first: int, last: int) -> Any:
        query = f"seq={row.seq}"
        headers = auth.sign(self.secret, "GET", JOURNAL_PATH, query)
        headers[auth.NODE] = self.node_id
        headers["Range"] = f"bytes={first}-{last}"
        try:
            return self.http.request("GET", f"http://{address}{JOURNAL_PATH}?{query}", headers=headers,
                                     preload_content=False, redirect=False)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self.membership.suspect(row.node_id)
            raise S3Error("ServiceUnavailable", f"Node {row.node_id} cannot be reached: {exc}") from exc

    # ---- parts of an upload completed here -------------------------------------------------------
    async def open_part(self, upload_id: str, number: int, source: PartSource) -> HeldBody:
        node = source.node_id or ""
        address = self.membership.address_of(node)
        if address is None:
            raise S3Error("ServiceUnavailable", f"Part {number} of this upload is held by node {node!r}, which is "
                          "not live; retry once it is back.")
        query = f"upload={upload_id}&part={number}&blob={source.blob}"
        resp = await anyio.to_thread.run_sync(self._request, "GET", address, node, PART_PATH, query)
        if resp.status == 200:
            return HeldBody(resp, self, node)
        resp.drain_conn()
        resp.release_conn()
        raise S3Error("ServiceUnavailable", f"Node {node!r} could not serve part {number} (HTTP {resp.status}).")

    async def drop_parts(self, node_id: str, blobs: list[str]) -> None:
        address = self.membership.address_of(node_id)
        if not address:
            return
        for i in range(0, len(blobs), MAX_DROP):
            query = "blobs=" + ",".join(blobs[i:i + MAX_DROP])
            try:
                resp = await anyio.to_thread.run_sync(self._request, "DELETE", address, node_id, PART_PATH, query)
                resp.drain_conn()
                resp.release_conn()
            except S3Error as exc:  # its blobs stay until a restart or an operator drops them
                log.warning("fleet: node %s did not drop %d part blobs: %s", node_id, len(blobs), exc)
                return

    def _request(self, method: str, address: str, node_id: str, path: str, query: str) -> Any:
        headers = auth.sign(self.secret, method, path, query)
        headers[auth.NODE] = self.node_id
        try:
            return self.http.request(method, f"http://{address}{path}?{query}", headers=headers,
                                     preload_content=False, redirect=False, timeout=self.replica_timeout)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self.membership.suspect(node_id)
            raise S3Error("ServiceUnavailable", f"Node {node_id!r} cannot be reached: {exc}") from exc

    # ---- replicas ------------------------------------------------------------------------------
    async def replicate(self, pieces: list[BlobRef], path: Callable[[str], Path]) -> Replica:
        seed = pieces[0].blob.encode() if pieces else b""
        for node in self.membership.others(seed):
            try:
                copies = [await anyio.to_thread.run_sync(self._put, node.address, piece, path(piece.blob))
                          for piece in pieces]
            except PeerFailed as exc:
                log.warning("fleet: node %s could not hold a replica (%s); trying the next", node.node_id, exc)
                if not exc.refused:
                    self.membership.suspect(node.node_id)
                continue
            return Replica(node.node_id, copies)
        raise S3Error("SlowDown", "write_replicas is 2 and no second live node could hold this write; retry later.")

    def _put(self, address: str, piece: BlobRef, file: Path) -> BlobRef:
        """One piece to ``address``; returns the same piece under its blob id there."""
        query = f"md5={piece.etag}&size={piece.size}"
        headers = auth.sign(self.secret, "PUT", REPLICA_PATH, query, body_sha256=UNSIGNED)
        headers[auth.NODE] = self.node_id
        headers["Content-Length"] = str(piece.size)
        try:
            with open(file, "rb") as fh:
                body: Any = fh if piece.size else b""
                resp = self.http.request("PUT", f"http://{address}{REPLICA_PATH}?{query}", body=body,
                                         headers=headers, redirect=False, timeout=self.replica_timeout,
                                         chunked=False)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise PeerFailed(str(exc)) from exc
        if resp.status != 200:
            raise PeerFailed(f"HTTP {resp.status}: {resp.data[:200]!r}", refused=resp.status in (400, 503))
        blob = json.loads(resp.data)["blob"]
        return BlobRef(blob, piece.size, piece.etag, dict(piece.checksums), piece.number)
