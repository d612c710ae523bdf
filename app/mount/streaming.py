"""Sending a large file's parts while it is still being written, so that the publish at fsync or
close has only the tail left to send (the write and the upload overlap).

A file written in order past MULTIPART_THRESHOLD opens a multipart upload on the gateway; each
PART_SIZE region is sent in the background once the writer has moved past it. Nothing is visible
through S3 until ``complete`` (the publish): an upload never completed is aborted, or, after a
kill -9 of the mount, expired by the gateway like any abandoned upload. A write into a region
already sent (the file is not written in order after all) spoils the stream: the publish then
sends the whole file as before, so what is published is always what the file holds.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from app.mount.objects import MULTIPART_THRESHOLD, PART_SIZE, FileStat, GatewayObjects

log = logging.getLogger("ferry.mount")


class PartStream:
    def __init__(self, objects: GatewayObjects, pool: ThreadPoolExecutor, bucket: str, key: str, fd: int) -> None:
        self.objects = objects
        self.pool = pool
        self.bucket, self.key, self.fd = bucket, key, fd
        self.upload_id: str | None = None
        self.sent_upto = 0  # bytes of whole parts handed to the pool
        self.spoiled = False
        self._parts: dict[int, Future[dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def wrote(self, offset: int, end: int) -> None:
        """After a write of [offset, end): hand every part now complete to the pool."""
        if self.spoiled:
            return
        if offset < self.sent_upto:
            self.spoil("a write into a part already sent")
            return
        if self.upload_id is None and end < MULTIPART_THRESHOLD:
            return
        while end >= self.sent_upto + PART_SIZE:
            if self.upload_id is None:
                try:
                    self.upload_id = self.objects.open_upload(self.bucket, self.key)
                except Exception as exc:  # the publish then sends the file whole (and reports)
                    self.spoil(f"no upload opened: {exc}")
                    return
            number = self.sent_upto // PART_SIZE + 1
            self._parts[number] = self.pool.submit(self.objects.send_part, self.bucket, self.key, self.upload_id,
                                                   number, self.fd, self.sent_upto, PART_SIZE)
            self.sent_upto += PART_SIZE

    def spoil(self, why: str) -> None:
        if not self.spoiled:
            log.debug("%s/%s: parts sent ahead are dropped (%s)", self.bucket, self.key, why)
        self.spoiled = True

    @property
    def usable(self) -> bool:
        return self.upload_id is not None and not self.spoiled

    def complete(self, size: int) -> None:
        """Send the tail, wait for every part, complete: the file becomes the object."""
        assert self.upload_id is not None
        tail = self.sent_upto
        number = tail // PART_SIZE + 1
        if size > tail:
            self._parts[number] = self.pool.submit(self.objects.send_part, self.bucket, self.key, self.upload_id,
                                                   number, self.fd, tail, size - tail)
        parts = [self._parts[n].result() for n in sorted(self._parts)]
        self.objects.complete_upload(self.bucket, self.key, self.upload_id, parts)
        self.upload_id = None
        self._parts.clear()
        self.spoil("published")  # a later publish holds the whole file again: it sends it whole

    def abort(self) -> None:
        """Drop what was sent (waiting for parts in flight first, so none lands after the abort)."""
        upload, self.upload_id = self.upload_id, None
        for part in self._parts.values():
            with contextlib.suppress(Exception):
                part.result()
        self._parts.clear()
        if upload is not None:
            with contextlib.suppress(Exception):
                self.objects.abort_upload(self.bucket, self.key, upload)


def publish(objects: GatewayObjects, bucket: str, key: str, path: Path, stream: PartStream | None) -> FileStat:
    """The file as the object: by completing the parts sent while it was written (the tail sent
    now) when they still match it, else whole (``GatewayObjects.publish``)."""
    if stream is not None and stream.spoiled:
        stream.abort()  # parts of an upload that no longer matches the file
    if stream is None or not stream.usable:
        return objects.publish(bucket, key, path)
    try:
        stream.complete(path.stat().st_size)
    except BaseException:
        stream.abort()
        raise
    return objects.published(bucket, key)
