"""Signing of internal requests (app/fleet/auth.py): what is covered, what is refused."""

from __future__ import annotations

import hashlib

from app.fleet.auth import EMPTY_SHA256, sign, verify

SECRET = "fleet-secret-0123456789"


def _ok(headers: dict[str, str], method: str = "GET", path: str = "/_ferry/v1/block", query: str = "b=x&k=y",
        body: str = EMPTY_SHA256, secret: str = SECRET, now: float = 1_000_000.0) -> bool:
    return verify(secret, method, path, query, headers, body, skew=30, now=now)


def test_a_signed_request_passes() -> None:
    assert _ok(sign(SECRET, "GET", "/_ferry/v1/block", "b=x&k=y", now=1_000_000.0))


def test_every_signed_part_counts() -> None:
    h = sign(SECRET, "GET", "/_ferry/v1/block", "b=x&k=y", now=1_000_000.0)
    assert not _ok(h, method="PUT")
    assert not _ok(h, path="/_ferry/v1/other")
    assert not _ok(h, query="b=x&k=z")
    assert not _ok(h, secret="another-secret-0123456789")
    assert not _ok(h, body=hashlib.sha256(b"x").hexdigest())  # the body received is not the one signed
    assert not _ok({**h, "x-ferry-signature": "0" * 64})
    assert not _ok({**h, "x-ferry-date": str(1_000_001)})


def test_stale_and_future_requests_are_refused() -> None:
    h = sign(SECRET, "GET", "/_ferry/v1/block", "b=x&k=y", now=1_000_000.0)
    assert _ok(h, now=1_000_029.0) and _ok(h, now=999_971.0)
    assert not _ok(h, now=1_000_031.0)
    assert not _ok(h, now=999_969.0)


def test_missing_or_malformed_headers_are_refused() -> None:
    assert not _ok({})
    assert not _ok({"x-ferry-date": "soon", "x-ferry-signature": "ab"})
    h = sign(SECRET, "GET", "/_ferry/v1/block", "b=x&k=y", now=1_000_000.0)
    assert not _ok({k: v for k, v in h.items() if k != "x-ferry-content-sha256"})
