"""A multipart upload completed on another node than the ones that took its parts (fleet).

Behind a load balancer an SDK sends its parallel UploadParts to any node: each part is stored
on the node that took it (and copied to a second node with ``write_replicas: 2``). The node
that takes the Complete gathers the parts it lists that its own disk does not hold: it reads
each from the node that took it over the internal endpoint (then from its replica's node),
checks the size and MD5 against the part's row while it receives it, and fsyncs it, all before
the object's row commits. The row's blobs are then all on the completing node, which destages
it like any write of its own. A part that no holder can serve fails the Complete with
``503 ServiceUnavailable``: nothing is committed, the upload stays open, a retry may succeed.
Once the upload is done (completed or aborted), the other holders are asked to drop their
copies; each drops only blobs no catalog row references any more.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from app.domain.errors import S3Error
from app.domain.objects import PartInfo
from app.domain.uploads import PartSource
from app.services.bodies import ExpectedDigests, StreamBody

if TYPE_CHECKING:
    from app.services.core import GatewayCore

log = logging.getLogger("ferry.gateway")
PULLS_AT_ONCE = 4  # parts read from other nodes in parallel by one Complete


@dataclass
class Gathered:
    """The parts a Complete commits, every blob on this node's disk."""

    parts: list[tuple[PartInfo, str]]
    pulled: list[str] = field(default_factory=list)  # blobs made here: the Complete's to keep or drop
    here: set[str] = field(default_factory=set)  # every part blob of the upload on this disk
    elsewhere: dict[str, set[str]] = field(default_factory=dict)  # node -> its part blobs, dropped when done


def _is_here(source: PartSource, here: str | None) -> bool:
    return source.node_id is None or source.node_id == here


async def holders(core: GatewayCore, upload_id: str, known: dict[int, list[PartSource]] | None = None
                  ) -> Gathered:
    """Where the upload's parts are: the blobs on this disk and those on each other node."""
    here = core.catalog.node_id
    found = Gathered([])
    if known is None:
        known = await core.run(core.catalog.part_sources, upload_id)
    for sources in known.values():
        for source in sources:
            if _is_here(source, here):
                found.here.add(source.blob)
            else:
                found.elsewhere.setdefault(str(source.node_id), set()).add(source.blob)
    return found


async def gather(core: GatewayCore, upload_id: str, chosen: list[tuple[PartInfo, str]]) -> Gathered:
    """The chosen parts as blobs of this node, pulled from their holders where needed. Without
    an internal endpoint (no fleet port) a part held elsewhere cannot be read: InvalidRequest."""
    here = core.catalog.node_id
    sources = await core.run(core.catalog.part_sources, upload_id)
    found = await holders(core, upload_id, sources)
    limit = asyncio.Semaphore(PULLS_AT_ONCE)

    async def local_blob(part: PartInfo, blob: str) -> str:
        kept = sources.get(part.part_number) or [PartSource(here, blob)]
        mine = [s.blob for s in kept if _is_here(s, here)]
        if mine:
            return mine[0]
        if core.peers is None:
            raise S3Error("InvalidRequest", f"Part {part.part_number} of this upload is held by node "
                          f"{kept[0].node_id!r}; send CompleteMultipartUpload to that node")
        async with limit:
            pulled = await _pull(core, upload_id, part, kept)
        found.pulled.append(pulled)
        return pulled

    results = await asyncio.gather(*(local_blob(p, b) for p, b in chosen), return_exceptions=True)
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        await drop_pulled(core, found)
        raise failed[0]
    found.parts = [(part, str(blob)) for (part, _), blob in zip(chosen, results, strict=True)]
    return found


async def _pull(core: GatewayCore, upload_id: str, part: PartInfo, sources: list[PartSource]) -> str:
    """One part from the first holder that serves it whole and intact, fsynced here."""
    assert core.peers is not None
    md5_b64 = base64.b64encode(bytes.fromhex(part.etag)).decode()
    failures: list[str] = []
    for source in sources:
        try:
            body = await core.peers.open_part(upload_id, part.part_number, source)
        except S3Error as err:
            failures.append(err.message)
            continue
        try:
            reserved = await core.admission.reserve(part.size)  # the write buffer holds it from now on
            try:
                received = await core.receive(StreamBody(body.chunks()),
                                              ExpectedDigests(content_md5=md5_b64, declared_size=part.size),
                                              part.size)
            finally:
                core.admission.release(reserved)
        except S3Error as err:
            if err.code == "SlowDown":
                raise
            failures.append(f"node {source.node_id!r}: {err.code} {err.message}")
            continue
        finally:
            body.close()
        return await core.run(core.blobs.commit, received.staging)
    log.warning("complete: part %s of upload %s could not be gathered: %s", part.part_number, upload_id,
                "; ".join(failures))
    raise S3Error("ServiceUnavailable", f"Part {part.part_number} of this upload is held by "
                  f"{', '.join(repr(s.node_id) for s in sources)}, which cannot serve it now; the upload is "
                  "still open: retry the CompleteMultipartUpload once that node is back.")


async def drop_pulled(core: GatewayCore, found: Gathered) -> None:
    """A Complete that failed after its gather: the copies it made here are garbage."""
    for blob in found.pulled:
        await core.run(core.blobs.delete, blob)
    found.pulled.clear()


def settle_pulled(core: GatewayCore, found: Gathered) -> None:
    """The object's row now references the pulled blobs: no longer crash garbage."""
    for blob in found.pulled:
        core.blobs.settle(blob)


def drop_elsewhere(core: GatewayCore, found: Gathered) -> None:
    """In the background, once the upload is done: the other holders drop their part blobs."""
    peers = core.peers
    if peers is None or not found.elsewhere:
        return
    for node_id, blobs in found.elsewhere.items():
        core.parts_ahead.spawn(peers.drop_parts(node_id, sorted(blobs)))


def _open_binary(path: Path) -> BinaryIO:
    return open(path, "rb")


async def open_held_part(core: GatewayCore, upload_id: str, number: int, blob: str
                         ) -> tuple[int, AsyncIterator[bytes]] | None:
    """The internal endpoint's side of ``_pull``: the part's bytes if this node holds them."""
    if not await core.run(core.catalog.holds_part, upload_id, number, blob):
        return None
    try:
        fh = await core.run(_open_binary, core.blobs.path(blob))
    except FileNotFoundError:
        return None
    size = os.fstat(fh.fileno()).st_size

    async def chunks() -> AsyncIterator[bytes]:
        try:
            while True:
                chunk = await core.run(fh.read, 1024 * 1024)
                if not chunk:
                    return
                yield chunk
        finally:
            fh.close()

    return size, chunks()


async def drop_held_parts(core: GatewayCore, blobs: list[str]) -> int:
    """The internal endpoint's side of ``drop_elsewhere``: blobs no row references any more."""
    keep = await core.run(core.journal.blobs_referenced, blobs)
    dropped = [b for b in blobs if b not in keep]
    for blob in dropped:
        await core.run(core.blobs.delete, blob)
    return len(dropped)
