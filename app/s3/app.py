"""The S3 data plane as a lean ASGI application.

Kept outside FastAPI on purpose: per-request framework overhead dominates small hits (see
DESIGN.md's measurements), and S3 routing depends on query and headers, not only the path.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any, Protocol

import anyio.to_thread

from app import metrics
from app.domain.errors import S3Error
from app.domain.objects import FileRange, FileSegment
from app.logs import REQUEST_ID, new_request_id
from app.s3 import headers as header_families
from app.s3 import xml
from app.s3.deadlines import DEADLINE_OPERATIONS, Deadline, DeadlineWatch, deadline_error
from app.s3.handlers.common import parse_copy_source
from app.s3.request import BodyRate, ClientDisconnected, S3Request, parse_query, split_target
from app.s3.response import Response
from app.s3.router import Route, resolve
from app.s3.sigv2 import SigV2Verifier
from app.s3.sigv4 import RequestParts, SigV4Verifier
from app.s3.sigv4.credential import read_credential
from app.services.gateway import Gateway
from app.services.writes.budget import CURRENT_TENANT

log = logging.getLogger("ferry.s3")
access_log = logging.getLogger("ferry.access")  # one line per request at DEBUG (FERRY_LOG_LEVEL=debug)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

ZEROCOPY = "http.response.zerocopysend"  # ASGI Zero Copy Send, offered by app/server/zerocopy.py
ZEROCOPY_MIN_BYTES = 64 * 1024  # below this the body iterator's single inline read wins
EAGER_OPEN = 16  # segments (block files) opened before the answer starts; later ones as they come



def _headers(raw: list[tuple[bytes, bytes]]) -> tuple[dict[str, str], dict[bytes, list[bytes]]]:
    """Both views of the headers in one walk: text by lower-case name (repeats joined with ',')
    for the parser, router and handlers, and the raw values by name for SigV4 (ASGI names are
    lower-case already)."""
    out: dict[str, str] = {}
    by_name: dict[bytes, list[bytes]] = {}
    for name_b, value_b in raw:
        name = name_b.decode("latin-1").lower()
        value = value_b.decode("latin-1")
        out[name] = f"{out[name]},{value}" if name in out else value
        values = by_name.get(name_b)
        if values is None:
            by_name[name_b] = [value_b]
        else:
            values.append(value_b)
    return out, by_name


class AccessKeys(Protocol):
    """What the edge needs to authenticate: a key's (secret, tenant id). The composition root
    passes the catalog; the protocol layer knows nothing of where keys are stored."""

    def lookup_key(self, access_key: str) -> tuple[str | None, int | None]: ...

    def cached_key(self, access_key: str) -> tuple[str | None, int | None] | None: ...


class S3App:
    def __init__(self, gateway: Gateway, catalog: AccessKeys, *, domain: str | None = None,
                 max_skew_seconds: int = 900, body_timeout: float | None = None,
                 body_min_rate: BodyRate | None = None, read_deadline: float | None = None) -> None:
        self.gateway = gateway
        self.body_timeout = body_timeout
        self.body_min_rate = body_min_rate if body_min_rate is not None and body_min_rate.enabled else None
        self.deadlines = DeadlineWatch(read_deadline or 0.0)
        self.catalog = catalog
        self.domain = domain.lower() if domain else None
        self.verifier = SigV4Verifier(lambda ak: catalog.lookup_key(ak)[0], max_skew_seconds=max_skew_seconds)
        self.verifier_v2 = SigV2Verifier(lambda ak: catalog.lookup_key(ak)[0], max_skew_seconds=max_skew_seconds)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Times and counts the request (until its last byte is sent) and names it in the logs."""
        request_id = new_request_id()
        stats = metrics.request_started()
        token = REQUEST_ID.set(request_id)
        completed = failed = False
        try:
            await self._handle(scope, stats.wrap_receive(receive), stats.wrap_send(send), request_id)
            completed = True
        except (ClientDisconnected, ConnectionError):
            raise  # the client went away: aborted
        except Exception:
            failed = True  # ours, not the client's: a body cut off by the server is an error (alerts)
            raise
        finally:
            metrics.request_finished(stats, aborted=not completed and not failed, failed=failed)
            if access_log.isEnabledFor(logging.DEBUG):
                log_access(scope, stats)
            REQUEST_ID.reset(token)

    async def _handle(self, scope: Scope, receive: Receive, send: Send, request_id: str) -> None:
        method = scope["method"]
        req: S3Request | None = None
        body_requested = False

        async def tracked_receive() -> MutableMapping[str, Any]:
            nonlocal body_requested
            body_requested = True
            return await receive()

        deadline: Deadline | None = None
        try:
            req = await self._parse(scope, tracked_receive, request_id)
            route = resolve(req)
            metrics.set_operation(route.name)
            await self._authenticate(req, scope)
            await self._authorize(route, req)
            header_families.check(req)  # header families Ferry refuses (app/s3/headers.py)
            metrics.mark_authorized(req.bucket, req.key)
            if self.deadlines.seconds and route.name in DEADLINE_OPERATIONS:
                deadline = self.deadlines.arm(lambda: self._send(
                    send, self._error(deadline_error(self.deadlines.seconds), req, request_id), request_id,
                    head=method == "HEAD", extensions=scope.get("extensions")))
            response = await route.handler(req, self.gateway)
        except ClientDisconnected:
            return
        except S3Error as err:
            response = self._error(err, req, request_id)
        except Exception:
            log.exception("internal error handling %s %s", method, scope.get("path"))
            response = self._error(S3Error("InternalError"), req, request_id)
        finally:
            if deadline is not None:
                self.deadlines.disarm(deadline)
        if deadline is not None and deadline.fired:
            await _close_body(response)  # the client got its 503 at the deadline
            return
        if not body_requested and _expects_continue(req, scope):
            # Answered before asking for the body: the client never got "100 Continue" and will
            # not send it, so the connection cannot carry another request (it would be read as
            # this one's body). Close it.
            response.headers.append(("Connection", "close"))
        await self._send(send, response, request_id, head=method == "HEAD", extensions=scope.get("extensions"))

    async def _parse(self, scope: Scope, receive: Receive, request_id: str) -> S3Request:
        headers, by_name = _headers(scope["headers"])
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
        bucket, key = split_target(raw_path, headers.get("host", ""), self.domain)
        query = parse_query(scope.get("query_string", b""))
        return S3Request(scope["method"], bucket, key, query, headers, raw_path, receive,
                         request_id=request_id, zero_copy=ZEROCOPY in (scope.get("extensions") or {}),
                         body_timeout=self.body_timeout, body_min_rate=self.body_min_rate,
                         header_lists=by_name)

    async def _authenticate(self, req: S3Request, scope: Scope) -> None:
        """One reading of the credential names the key: its tenant and its secret come from one
        lookup, and that secret checks the signature (identity is parsed once: DESIGN.md)."""
        parts = RequestParts(req.method, req.raw_path, scope.get("query_string", b""), scope["headers"],
                             req.header_lists)
        credential = read_credential(parts)
        if credential is None:
            raise S3Error("AccessDenied", "Anonymous access is not allowed.")
        known = self.catalog.cached_key(credential.access_key)
        secret, tenant = known if known is not None else await anyio.to_thread.run_sync(
            self.catalog.lookup_key, credential.access_key)
        if credential.sigv2:
            req.auth = self.verifier_v2.verify_credential(parts, credential, secret, self._virtual_prefix(req))
        else:
            req.auth = self.verifier.verify_credential(parts, credential, secret)
        req.tenant_id = tenant
        CURRENT_TENANT.set(tenant)  # the write budget's per-tenant share (this request's context)

    def _virtual_prefix(self, req: S3Request) -> str:
        """``/bucket`` for a virtual-hosted request: SigV2 signs the bucket in the resource path."""
        host = req.headers.get("host", "")
        hostname = (host.rsplit(":", 1)[0] if host and not host.endswith("]") else host).lower()
        if self.domain and req.bucket and hostname.endswith("." + self.domain):
            return "/" + req.bucket
        return ""

    async def _authorize(self, route: Route, req: S3Request) -> None:
        """Bucket ownership, checked here for every operation before its handler runs: the
        request's bucket, and a copy's source bucket (a tenant must own what it reads too)."""
        tenancy = self.gateway.tenancy
        if tenancy is None or req.bucket is None:
            return
        await tenancy.authorize(req.tenant_id, req.bucket, creating=route.name == "CreateBucket")
        source = req.headers.get("x-amz-copy-source") if route.header == "x-amz-copy-source" else None
        if source is not None:
            src_bucket, _ = parse_copy_source(source)
            if src_bucket != req.bucket:
                await tenancy.authorize(req.tenant_id, src_bucket)

    @staticmethod
    def _error(err: S3Error, req: S3Request | None, request_id: str) -> Response:
        if err.status == 304:
            return Response(304, list(err.headers.items()))
        body = xml.error_document(err.code, err.message, req.resource if req else None, request_id, err.fields)
        response = Response.xml(body, err.status)
        response.headers += list(err.headers.items())
        if err.code in ("SlowDown", "ServiceUnavailable") and not any(k.lower() == "retry-after" for k, _ in err.headers.items()):
            response.headers.append(("Retry-After", "1"))
        return response

    @staticmethod
    async def _send(send: Send, response: Response, request_id: str, *, head: bool,
                    extensions: Mapping[str, Any] | None = None) -> None:
        headers = [(k.encode() if k.isascii() else k.encode("latin-1", "replace"), _encode_value(v))
                   for k, v in response.headers]
        headers.append((b"x-amz-request-id", request_id.encode()))
        headers.append((b"server", b"Ferry"))
        body = response.body
        if isinstance(body, bytes):
            length = response.length if head and response.length is not None else len(body)
            headers.append((b"content-length", str(length).encode()))
            await send({"type": "http.response.start", "status": response.status, "headers": headers})
            await send({"type": "http.response.body", "body": b"" if head else body})
            return
        if response.length is not None:
            headers.append((b"content-length", str(response.length).encode()))
        # Opened before the answer starts: a block evicted since the lookup still gets the body iterator.
        opened = _open_segments(response, extensions) if not head else None
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        if opened is not None:
            await _send_segments(send, response.files or [], opened)
            return
        sent = zero_copied = 0
        async for chunk in body:
            sent += len(chunk)
            if isinstance(chunk, FileRange):
                # Bytes already in a local file (a miss's block as it fills): the kernel sends them.
                await send({"type": ZEROCOPY, "file": chunk.fd, "offset": chunk.offset, "count": chunk.length,
                            "more_body": True})
                zero_copied += chunk.length
            else:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if zero_copied:
            metrics.zerocopy_sent(zero_copied)
        if response.length is not None and sent != response.length:
            # Never let a short body look complete: drop the connection instead.
            raise RuntimeError(f"body ended after {sent} of {response.length} bytes")
        await send({"type": "http.response.body", "body": b""})


async def _close_body(response: Response) -> None:
    """A response nobody will send: release its body (an open remote stream, a cache fill reader)."""
    aclose = getattr(response.body, "aclose", None)
    if aclose is not None:
        await aclose()



def _open_segments(response: Response, extensions: Mapping[str, Any] | None) -> list[int] | None:
    """Descriptors of the first segments of a body the server can send zero-copy, or None for the
    body iterator: no such server (TLS, h11, FERRY_ZERO_COPY=false), a small body (the iterator's
    inline read is cheaper), or a block file gone since the lookup."""
    files = response.files
    if (files is None or not extensions or ZEROCOPY not in extensions or response.length is None
            or response.length < ZEROCOPY_MIN_BYTES or sum(s.length for s in files) != response.length):
        return None
    fds: list[int] = []
    try:
        for segment in files[:EAGER_OPEN]:
            fds.append(_open_segment(segment))
    except OSError:
        for fd in fds:
            os.close(fd)
        return None
    return fds


def _open_segment(segment: FileSegment) -> int:
    """A descriptor of the segment's file, by the opener its producer gave (the cache's finds a
    block retired since the lookup: opened late, it is still the same version's bytes)."""
    return segment.opener(segment.path) if segment.opener is not None else os.open(segment.path, os.O_RDONLY)


async def _send_segments(send: Send, files: list[FileSegment], opened: list[int]) -> None:
    """The body as zerocopysend messages. Segments past the eagerly opened ones are opened as they
    come, by their opener (the cache's finds a block deleted since the lookup, for a grace); one
    gone even so fails the response, which drops the connection (never a short body)."""
    pending = list(opened)
    try:
        for index, segment in enumerate(files):
            fd = pending[index] if index < len(pending) else _open_segment(segment)
            try:
                await send({"type": ZEROCOPY, "file": fd, "offset": segment.offset, "count": segment.length,
                            "more_body": True})
            finally:
                os.close(fd)
                if index < len(pending):
                    pending[index] = -1
    finally:
        for fd in pending:
            if fd >= 0:
                os.close(fd)
    await send({"type": "http.response.body", "body": b""})
    metrics.zerocopy_sent(sum(segment.length for segment in files))


def log_access(scope: Scope, stats: metrics.RequestStats) -> None:
    fields = {"method": scope.get("method"), "path": str(scope.get("path", ""))[:512], "operation": stats.operation,
              "status": stats.status, "outcome": stats.outcome, "bytes_in": stats.bytes_in,
              "bytes_out": stats.bytes_out, "ms": round(stats.elapsed * 1000, 3)}
    access_log.debug("%s %s %s %s %s in=%s out=%s %.1fms", fields["method"], fields["path"], stats.operation,
                     stats.status, stats.outcome, stats.bytes_in, stats.bytes_out, stats.elapsed * 1000,
                     extra={"fields": fields})


def _expects_continue(req: S3Request | None, scope: Scope) -> bool:
    if req is not None:  # the parsed headers (repeats joined), no second walk of the raw ones
        return "100-continue" in req.headers.get("expect", "").lower()
    return any(name == b"expect" and b"100-continue" in value.lower() for name, value in scope["headers"])


def _encode_value(value: str) -> bytes:
    """Latin-1 when it can be (HTTP's own), else UTF-8 (user metadata S3 stored as such)."""
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return value.encode("utf-8")
