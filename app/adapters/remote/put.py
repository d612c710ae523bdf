"""UploadPart and PutObject without botocore: a staged body sent to the remote as one raw signed
request (eager part copies, the destage's parts and single PUTs).

botocore's ``upload_part`` over plain HTTP signs the body: it reads the whole part to hash it
with SHA-256 (over HTTPS with a Content-MD5 it sends ``UNSIGNED-PAYLOAD`` instead), then reads it
again in 128 KiB blocks to send it, around some forty event handlers per call. That was about
2.3 CPU s per GiB of a checkpoint's eager part copies (bench/analysis.md). Here the request is
signed ``UNSIGNED-PAYLOAD`` with botocore's own S3 SigV4 signer (the raw-bytes one of
``rawsig``), with ``Content-MD5`` and any ``x-amz-checksum-*`` among the signed headers: the
remote checks the body against them and refuses a corrupt one (``BadDigest``), so integrity is
verified end to end and a changed header fails the signature. The body goes from the staged file
to the socket with ``sendfile`` in slices, asking the lease fence (``fencing.unwrap``) before
each: once a lease is over nothing more is sent and the connection is dropped mid-body, as a
fenced read would under botocore. A body that is no file (an inline row's bytes) is sent by reads.

Same behaviour as botocore's call where it matters: the client's credentials (refreshed as
botocore refreshes them), its connect and read timeouts, ``max_attempts`` attempts with jittered
backoff on network errors, 429/5xx and S3's transient 400s, the circuit breaker, the metrics,
no attempt started after the lease (``fencing.check``), and non-2xx answers raised as botocore's
``ClientError`` for ``translate_errors``. Used only where nothing of the client's transport is
lost: a plain ``http://`` endpoint, no proxy for it, no client certificate, signed requests, an
addressing ``LeanGetter.request_url`` maps, and header values that are latin-1 (``sendable``).
HTTPS endpoints keep botocore's call (which already skips the payload hash there); so does
``raw_writes=False`` (``FERRY_REMOTE_RAW_WRITES``).
"""

from __future__ import annotations

import contextlib
import http.client
import io
import os
import random
import select
import socket
import stat
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO
from urllib.parse import quote, urlsplit

import botocore.exceptions
from botocore.awsrequest import AWSRequest

from app import metrics
from app.adapters.remote.circuit import CircuitBreaker
from app.adapters.remote.get import _NETWORK_ERRORS, ERROR_BODY_LIMIT, RETRYABLE_STATUS, LeanGetter
from app.adapters.remote.rawsig import RawHeaderS3SigV4Auth
from app.domain import fencing
from app.domain.errors import S3Error

SLICE = 4 * 1024 * 1024  # most bytes handed to one sendfile: the lease is asked between slices
# 400s that botocore's standard retry mode retries (transient), besides 429 and 5xx.
TRANSIENT_CODES = frozenset({"RequestTimeout", "RequestTimeoutException", "PriorRequestNotComplete",
                             "SlowDown", "Throttling", "ThrottlingException", "RequestThrottled"})


class _StaleConnection(botocore.exceptions.ConnectionClosedError):
    """A reused keep-alive connection the remote had closed: retried once on a new one, free."""


class UnsignedPayloadAuth(RawHeaderS3SigV4Auth):
    """S3 SigV4 over the raw header bytes, with ``x-amz-content-sha256: UNSIGNED-PAYLOAD``."""

    def _should_sha256_sign_payload(self, request: Any) -> bool:
        return False


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes

    def error_code(self) -> str | None:
        if not self.body:
            return None
        try:
            return ET.fromstring(self.body).findtext("Code")
        except ET.ParseError:
            return None

    def client_error(self, operation: str) -> botocore.exceptions.ClientError:
        """A non-2xx answer as botocore would have raised it (so the usual error mapping applies)."""
        code, message = str(self.status), ""
        if self.body:
            try:
                root = ET.fromstring(self.body)
                code = root.findtext("Code") or code
                message = root.findtext("Message") or ""
            except ET.ParseError:
                pass
        parsed = {"Error": {"Code": code, "Message": message},
                  "ResponseMetadata": {"HTTPStatusCode": self.status, "HTTPHeaders": dict(self.headers)}}
        return botocore.exceptions.ClientError(parsed, operation)


class _Connections:
    """Idle keep-alive connections to one ``host:port`` (LIFO, at most ``limit`` kept)."""

    def __init__(self, host: str, port: int, connect_timeout: float, read_timeout: float, limit: int) -> None:
        self.host, self.port = host, port
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self.limit = limit
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def get(self) -> tuple[http.client.HTTPConnection, bool]:
        """(connection, reused): an idle one the remote has not closed, or a new one."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                break
            if conn.sock is not None and not _dropped(conn.sock):
                return conn, True
            conn.close()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.connect_timeout)
        try:
            conn.connect()
        except TimeoutError as exc:
            conn.close()
            raise botocore.exceptions.ConnectTimeoutError(endpoint_url=f"http://{self.host}:{self.port}") from exc
        except OSError as exc:
            conn.close()
            raise botocore.exceptions.EndpointConnectionError(endpoint_url=f"http://{self.host}:{self.port}") from exc
        assert conn.sock is not None
        conn.sock.settimeout(self.read_timeout)
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        return conn, False

    def put(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self.limit:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _dropped(sock: socket.socket) -> bool:
    """An idle connection the remote closed (or sent something on) is not reused."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


class LeanPutter:
    """Raw signed PUTs (UploadPart, PutObject) of a staged body (thread-safe)."""

    def __init__(self, client: Any, lean: LeanGetter, *, enabled: bool = True, connect_timeout: float = 5.0,
                 read_timeout: float = 10.0, max_connections: int = 64,
                 circuit: CircuitBreaker | None = None) -> None:
        self.lean = lean
        self.max_attempts = lean.max_attempts
        self.circuit = circuit
        self.enabled = enabled and _plain_transport(client, lean)
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self.max_connections = max_connections
        self._pools: dict[str, _Connections] = {}  # by host:port (one per bucket with virtual addressing)
        self._lock = threading.Lock()

    def _connections(self, netloc: str) -> _Connections:
        with self._lock:
            pool = self._pools.get(netloc)
            if pool is None:
                where = urlsplit(f"http://{netloc}/")
                pool = _Connections(where.hostname or netloc, where.port or 80, self.connect_timeout,
                                    self.read_timeout, self.max_connections)
                self._pools[netloc] = pool
            return pool

    def close(self) -> None:
        with self._lock:
            pools = list(self._pools.values())
        for pool in pools:
            pool.close()

    def part_url(self, bucket: str, key: str, upload_id: str, number: int) -> str | None:
        """UploadPart's URL, or None where the raw request does not apply (botocore's call then)."""
        if not self.enabled:
            return None
        url = self.lean.request_url(bucket, key)
        if url is None:
            return None
        return f"{url}?partNumber={number}&uploadId={quote(upload_id, safe='-_.~')}"

    def object_url(self, bucket: str, key: str) -> str | None:
        """PutObject's URL, or None where the raw request does not apply."""
        return self.lean.request_url(bucket, key) if self.enabled else None

    def put(self, operation: str, url: str, headers: dict[str, str], body: BinaryIO, size: int) -> Answer:
        """PUT ``size`` bytes of ``body`` (from its position) to ``url``; the remote's answer,
        whatever its status (the caller raises ``Answer.client_error`` for a non-2xx one)."""
        if self.circuit is None:
            return self._put(operation, url, headers, body, size)
        self.circuit.before()
        try:
            answer = self._put(operation, url, headers, body, size)
        except _NETWORK_ERRORS:
            self.circuit.record(False)  # no answer: the remote may be down
            raise
        except BaseException:
            self.circuit.release()  # not the remote's fault (the lease, the disk): says nothing
            raise
        self.circuit.record(True)  # any HTTP answer proves the remote alive
        return answer

    def _put(self, operation: str, url: str, headers: dict[str, str], body: BinaryIO, size: int) -> Answer:
        started = time.perf_counter()
        raw, fence = fencing.unwrap(body)
        start = raw.tell()
        attempt = 0
        fresh_retry = True  # one free retry when a reused keep-alive connection turns out dead
        while True:
            attempt += 1
            fencing.check()  # no attempt starts once the sender's lease is over
            try:
                answer = self._attempt(url, headers, body, raw, start, size, fence)
            except _NETWORK_ERRORS as exc:
                if isinstance(exc, _StaleConnection) and fresh_retry:
                    fresh_retry, attempt = False, attempt - 1
                    continue
                if attempt >= self.max_attempts:
                    metrics.remote_call_done(operation, "network", started, attempt - 1)
                    raise
            else:
                retryable = answer.status in RETRYABLE_STATUS or (
                    answer.status == 400 and answer.error_code() in TRANSIENT_CODES)
                if not retryable or attempt >= self.max_attempts:
                    status = answer.status
                    outcome = "ok" if status < 400 else ("client_error" if status < 500 else "server_error")
                    metrics.remote_call_done(operation, outcome, started, attempt - 1)
                    return answer
            time.sleep(random.random() * min(20.0, 2.0 ** (attempt - 1)))

    def _attempt(self, url: str, headers: dict[str, str], body: BinaryIO, raw: BinaryIO, start: int, size: int,
                 fence: Callable[[], None]) -> Answer:
        parts = urlsplit(url)
        connections = self._connections(parts.netloc)
        conn, reused = connections.get()
        keep = False
        try:
            signed = self._signed(url, parts.netloc, headers, size)
            conn.putrequest("PUT", f"{parts.path}?{parts.query}" if parts.query else parts.path,
                            skip_host=True, skip_accept_encoding=True)
            for name, value in signed.items():
                conn.putheader(name, value)
            conn.endheaders()
            assert conn.sock is not None
            # The remote may have answered early (a refusal) and closed: read it below, or fail there.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                _send_body(conn.sock, body, raw, start, size, fence)
            response = conn.getresponse()
            data = response.read(ERROR_BODY_LIMIT)
            answer = Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, data)
            keep = not response.will_close and response.isclosed()
            return answer
        except TimeoutError as exc:
            raise botocore.exceptions.ReadTimeoutError(endpoint_url=url) from exc
        except (OSError, http.client.HTTPException) as exc:
            if reused and isinstance(exc, ConnectionResetError | BrokenPipeError | http.client.RemoteDisconnected):
                raise _StaleConnection(endpoint_url=url) from exc
            raise botocore.exceptions.ConnectionClosedError(endpoint_url=url) from exc
        finally:
            if keep:
                connections.put(conn)
            else:
                conn.close()  # mid-body (the lease, an error): the remote discards the request

    def _signed(self, url: str, host: str, headers: dict[str, str], size: int) -> dict[str, str]:
        """The request's headers, signed (``UNSIGNED-PAYLOAD``): Host is sent as signed."""
        request = AWSRequest(method="PUT", url=url, headers={"Host": host, **headers})
        frozen = self.lean.credentials.get_frozen_credentials()
        UnsignedPayloadAuth(frozen, "s3", self.lean.region).add_auth(request)
        out = {name: (value.decode("latin-1") if isinstance(value, bytes) else value)
               for name, value in request.headers.items()}
        out["Content-Length"] = str(size)
        return out


def _send_body(sock: socket.socket, body: BinaryIO, raw: BinaryIO, start: int, size: int,
               fence: Callable[[], None]) -> None:
    """``size`` bytes from ``start``: with sendfile from a regular file, else in 1 MiB reads of
    ``body`` (whose fenced reads ask the lease themselves)."""
    regular = False
    if isinstance(raw, io.BufferedReader | io.FileIO):  # a file opened for reading (not a spool: its
        try:                                             # fileno() would write it out to disk first)
            fd = raw.fileno()
            regular = stat.S_ISREG(os.fstat(fd).st_mode)
        except (OSError, ValueError):
            regular = False
    if not regular:
        body.seek(start)
        left = size
        while left > 0:
            chunk = body.read(min(left, 1024 * 1024))
            if not chunk:
                raise _short(left)
            sock.sendall(chunk)
            left -= len(chunk)
        return
    timeout = sock.gettimeout()
    poller = select.poll()
    poller.register(sock, select.POLLOUT)
    wait_ms = None if timeout is None else int(timeout * 1000)
    offset, left = start, size
    while left > 0:
        fence()  # nothing more is sent once a lease is over
        try:
            sent = os.sendfile(sock.fileno(), fd, offset, min(left, SLICE))
        except BlockingIOError:
            if not poller.poll(wait_ms):
                raise TimeoutError("timed out sending the body") from None
            continue
        if sent == 0:  # the file is shorter than its recorded size: never complete the body
            raise _short(left)
        offset += sent
        left -= sent


def sendable(headers: dict[str, str]) -> bool:
    """True when every value goes out as the single bytes it stands for (latin-1, one line): a
    value that would not is left to botocore, which sends and signs it as UTF-8 (``rawsig``)."""
    for value in headers.values():
        if "\r" in value or "\n" in value:
            return False
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            return False
    return True


def _short(left: int) -> S3Error:
    """A staged body shorter than its recorded size (a damaged data directory): the request is
    dropped unfinished, so the remote stores nothing; not a network failure (the circuit stays)."""
    return S3Error("InternalError", f"The staged body ended {left} bytes before its recorded size.")


def _plain_transport(client: Any, lean: LeanGetter) -> bool:
    """True when a raw socket reaches the remote the way botocore's session would: plain HTTP,
    no proxy for it, no client certificate, signed requests."""
    try:
        session = client._endpoint.http_session
        proxy = session._proxy_config.proxy_url_for(f"{lean.scheme}://{lean.netloc}/")
        cert = session._cert_file
    except AttributeError:  # another botocore: keep its call
        return False
    return lean.scheme == "http" and not proxy and cert is None and lean.credentials is not None
