"""A fault-injecting remote: wraps ``InMemoryRemote`` and fails the way real remotes do.

Faults are queued per operation name (``get_object``, ``put_object``, ``upload_part``...) and
each is used once, so a test says exactly which request fails and how."""

from __future__ import annotations

import io
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, BinaryIO

from botocore.response import StreamingBody

from app.domain.errors import S3Error
from app.domain.objects import ObjectMeta
from tests.fakes.remote import InMemoryRemote


@dataclass(frozen=True)
class Fault:
    """One injected failure: ``kind`` is slow, 5xx, reset, truncate or etag."""

    kind: str
    seconds: float = 0.0  # slow: the delay before answering
    keep: int = 0  # reset/truncate: bytes of the body delivered before the fault


class ResetMidBody(io.RawIOBase):
    """A response body whose connection drops after ``keep`` bytes."""

    def __init__(self, data: bytes, keep: int) -> None:
        self._inner = io.BytesIO(data[:keep])

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        chunk = self._inner.read(size)
        if not chunk:
            raise ConnectionResetError("connection reset by peer (injected)")
        return chunk


class FaultyRemote(InMemoryRemote):
    """The in-memory remote with queued faults."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.faults: dict[str, list[Fault]] = defaultdict(list)

    def inject(self, operation: str, *faults: Fault) -> None:
        self.faults[operation].extend(faults)

    def _take(self, operation: str) -> Fault | None:
        queue = self.faults.get(operation)
        fault = queue.pop(0) if queue else None
        if fault is not None and fault.kind == "slow":
            time.sleep(fault.seconds)
        elif fault is not None and fault.kind == "5xx":
            raise S3Error("ServiceUnavailable", "injected 503")
        return fault

    def get_object(self, bucket: str, key: str, byte_range: str | None = None,
                   if_match: str | None = None) -> tuple[ObjectMeta, BinaryIO]:
        fault = self._take("get_object")
        meta, body = super().get_object(bucket, key, byte_range, if_match)
        if fault is None or fault.kind == "slow":
            return meta, body
        data = body.read()
        if fault.kind == "reset":
            return meta, io.BufferedReader(ResetMidBody(data, fault.keep))
        if fault.kind == "truncate":  # the connection closes cleanly, short of Content-Length
            return meta, StreamingBody(io.BytesIO(data[: fault.keep]), len(data))  # type: ignore[return-value]
        if fault.kind == "etag":  # the object changed between the HEAD and this GET
            meta.etag = "0" * 32
            return meta, io.BytesIO(data)
        raise AssertionError(f"unknown fault {fault.kind}")

    def head_object(self, bucket: str, key: str, if_none_match: str | None = None) -> ObjectMeta:
        fault = self._take("head_object")
        meta = super().head_object(bucket, key, if_none_match)
        if fault is not None and fault.kind == "etag":
            meta.etag = "f" * 32
        return meta

    def put_object(self, bucket: str, key: str, body: BinaryIO, size: int, content_md5: str,
                   content_headers: dict[str, str], metadata: dict[str, str], checksums: dict[str, str], *,
                   if_match: str | None = None, if_none_match: str | None = None) -> str:
        fault = self._take("put_object")
        if fault is not None and fault.kind in ("reset", "truncate"):
            body.read(fault.keep)  # part of the request body went out, then the connection died
            raise ConnectionResetError("connection reset by peer (injected)")
        return super().put_object(bucket, key, body, size, content_md5, content_headers, metadata, checksums,
                                  if_match=if_match, if_none_match=if_none_match)

    def upload_part(self, bucket: str, key: str, upload_id: str, number: int, body: BinaryIO, size: int,
                    content_md5: str, checksums: dict[str, str]) -> str:
        fault = self._take("upload_part")
        if fault is not None and fault.kind in ("reset", "truncate"):
            body.read(fault.keep)
            raise ConnectionResetError("connection reset by peer (injected)")
        return super().upload_part(bucket, key, upload_id, number, body, size, content_md5, checksums)



