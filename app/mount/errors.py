"""How the mount answers failures: always an errno, never an exception that ends the mount.

An exception that is not a ``FUSEError`` would answer EIO with a logged traceback, so every
operation is wrapped (``guard``) and every call into the gateway maps its error (``answer``).
"""

from __future__ import annotations

import errno
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from app.mount import protocol as fuse
from app.mount.objects import ObjectError

log = logging.getLogger("ferry.mount")


def fail(code: int) -> fuse.FUSEError:
    return fuse.FUSEError(code)


def answer(exc: Exception, what: str) -> fuse.FUSEError:
    """The errno a failed gateway call gives its caller (a changed object mid-read: ESTALE)."""
    if isinstance(exc, ObjectError):
        if exc.code == "Stale":
            return fail(errno.ESTALE)
        log.info("%s: %s", what, exc)
        return fail(exc.errno or errno.EIO)
    if isinstance(exc, OSError):
        return fail(exc.errno or errno.EIO)
    log.warning("%s failed", what, exc_info=exc)
    return fail(errno.EIO)


def guard(op: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """An operation's unexpected error answers its caller (EIO, or the OSError's errno)."""

    @functools.wraps(op)
    async def guarded(*args: Any) -> Any:
        try:
            return await op(*args)
        except fuse.FUSEError:
            raise
        except Exception as exc:
            raise answer(exc, op.__name__) from exc

    return guarded
