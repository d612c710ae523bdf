"""Outcomes of admin catalog operations that callers turn into HTTP answers (404, 409)."""

from __future__ import annotations


class NotFound(LookupError):
    """The named row does not exist."""


class Conflict(ValueError):
    """The change clashes with the current state (a duplicate name, a finished job)."""
