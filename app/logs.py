"""Logging set-up: plain text by default, one JSON object per line with FERRY_LOG_JSON=1.

Every line logged while a request is served carries its request id (the S3 ``x-amz-request-id``,
or the control API's ``x-request-id``): the entry points set ``REQUEST_ID`` and a filter on the
handlers copies it into each record, so a client's error report leads to the lines of its request.
"""

from __future__ import annotations

import contextvars
import json
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("ferry_request_id", default=None)

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"


class RequestIdFilter(logging.Filter):
    """Adds ``record.request_id`` (the current request's, or "-" outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", None):
            record.request_id = REQUEST_ID.get() or "-"
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None) or REQUEST_ID.get()
        if request_id and request_id != "-":
            entry["request_id"] = request_id
        fields = getattr(record, "fields", None)  # logger.x(..., extra={"fields": {...}}): machine-readable
        if isinstance(fields, dict):
            for name, value in fields.items():
                entry.setdefault(name, value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure_logging(level: str = "info", as_json: bool = False) -> None:
    handler = logging.StreamHandler()
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter() if as_json else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger("ferry")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def uvicorn_log_config(level: str = "info", as_json: bool = False) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for uvicorn's ``log_config``: uvicorn applies it in every
    worker process, so Ferry's and uvicorn's own lines share one format there too."""
    formatter: dict[str, Any] = {"()": f"{__name__}.JsonFormatter"} if as_json else {"format": TEXT_FORMAT}
    handler = {"class": "logging.StreamHandler", "formatter": "ferry", "filters": ["request_id"],
               "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": f"{__name__}.RequestIdFilter"}},
        "formatters": {"ferry": formatter},
        "handlers": {"ferry": handler},
        "loggers": {
            "ferry": {"handlers": ["ferry"], "level": level.upper(), "propagate": False},
            "uvicorn": {"handlers": ["ferry"], "level": level.upper(), "propagate": False},
            "uvicorn.error": {"level": level.upper()},
            "uvicorn.access": {"handlers": ["ferry"], "level": level.upper(), "propagate": False},
        },
    }


access_log = logging.getLogger("ferry.access")
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]


class RequestIdMiddleware:
    """Pure ASGI middleware for the control API: a request id for its log lines and its answer.

    A caller's ``X-Request-Id`` is kept when it looks like an id (so a proxy's id carries through);
    otherwise one is made. The answer carries it back as ``x-request-id``.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"x-request-id"), "")
        if not _SAFE_ID.match(request_id):
            request_id = new_request_id()
        encoded = request_id.encode()
        token = REQUEST_ID.set(request_id)
        started = time.perf_counter()
        status = 0

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                message["headers"] = [*message.get("headers", []), (b"x-request-id", encoded)]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            if access_log.isEnabledFor(logging.DEBUG):
                ms = (time.perf_counter() - started) * 1000
                access_log.debug("%s %s %s %.1fms", scope.get("method"), scope.get("path"), status, ms,
                                 extra={"fields": {"method": scope.get("method"), "path": scope.get("path"),
                                                   "status": status, "ms": round(ms, 3)}})
            REQUEST_ID.reset(token)


def new_request_id() -> str:
    """The S3 style: 16 upper-case hex digits. Unique, not secret: ``random`` (reseeded in every
    forked worker), not ``secrets``, whose ``os.urandom`` is a system call per request."""
    return f"{random.getrandbits(64):016X}"
