"""Shared pieces of the admin API: validated field types, JSON error handlers, a thread helper.

Every free-text field is checked to be storable (no NUL, valid UTF-8) and every integer to fit a
64-bit column, so bad input is a 422 with a ``detail`` and never a 500 from the database.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints
from sqlalchemy.exc import IntegrityError

from app.adapters.catalog.errors import Conflict, NotFound
from app.domain.errors import S3Error

T = TypeVar("T")

MAX_INT = 2**63 - 1
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
BUCKET_PATTERN = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
ACCESS_KEY_PATTERN = r"^[A-Za-z0-9]{16,128}$"


def _storable(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("must be valid UTF-8 text") from exc
    return value


Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
BucketName = Annotated[str, StringConstraints(pattern=BUCKET_PATTERN)]
AccessKey = Annotated[str, StringConstraints(pattern=ACCESS_KEY_PATTERN)]
Prefix = Annotated[str, StringConstraints(max_length=1024), AfterValidator(_storable)]
Text = Annotated[str, StringConstraints(max_length=256), AfterValidator(_storable)]
ByteCount = Annotated[int, Field(ge=0, le=MAX_INT)]
RowId = Annotated[int, Field(ge=1, le=MAX_INT)]


class Model(BaseModel):
    """Request bodies reject unknown fields (a typo must not be silently ignored)."""

    model_config = ConfigDict(extra="forbid")


class Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class Counted(Out):
    entries: int
    bytes: int


async def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Catalog calls block: run them in a worker thread."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))


def install_error_handlers(api: FastAPI) -> None:
    """Domain outcomes become JSON errors with a ``detail``, like FastAPI's own."""

    async def not_found(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc.args[0]) if exc.args else "not found"}, status_code=404)

    async def conflict(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc.args[0]) if exc.args else "conflict"}, status_code=409)

    async def integrity(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": "the change conflicts with existing data"}, status_code=409)

    async def s3_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, S3Error)
        status = exc.status if 400 <= exc.status < 600 else 502
        if status >= 500:
            status = 502 if exc.code != "ServiceUnavailable" else 503  # the remote failed, not us
        return JSONResponse({"detail": f"{exc.code}: {exc.message}"}, status_code=status)

    async def invalid(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return JSONResponse({"detail": [_redacted(e) for e in exc.errors()]}, status_code=422)

    api.add_exception_handler(RequestValidationError, invalid)
    api.add_exception_handler(NotFound, not_found)
    api.add_exception_handler(Conflict, conflict)
    api.add_exception_handler(IntegrityError, integrity)
    api.add_exception_handler(S3Error, s3_error)


_SECRET_FIELDS = ("secret", "token", "password", "key")


def _redacted(error: Any) -> Any:
    """FastAPI's validation error without the rejected value when it sits in a field that holds a
    secret (``secret_key``, ``token``...): an invalid secret is still a secret, and error bodies
    end up in logs and tickets."""
    error = dict(error)
    where = [str(part).lower() for part in error.get("loc", ())]
    if any(word in part for part in where for word in _SECRET_FIELDS) or ("body" in where and len(where) == 1):
        error.pop("input", None)
        error.pop("ctx", None)
    return jsonable_encoder(error)
