"""Sizes and durations with units, parsed the same way by settings, the CLI and the admin API.

Sizes: ``100GiB`` (binary), ``500MB`` (decimal), ``1024`` (bytes). Durations: ``30s``, ``5m``,
``2h``, ``7d``, ``250ms``, or a bare number of seconds.
"""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b?)\s*$", re.IGNORECASE)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$", re.IGNORECASE)
_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_size(text: str) -> int:
    """Bytes in ``text``; ValueError naming an example when it is not a size."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"not a size: {text!r} (e.g. 500MiB, 10GB, 1048576)")
    number, unit, suffix = match.groups()
    base = 1024 if suffix.lower().startswith("i") else 1000
    return int(float(number) * base ** ("kmgtp".index(unit.lower()) + 1 if unit else 0))


def parse_duration(text: str) -> float:
    """Seconds in ``text``; ValueError naming an example when it is not a duration."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"not a duration: {text!r} (e.g. 30s, 5m, 2h, 7d, 250ms)")
    number, unit = match.groups()
    return float(number) * _SECONDS[(unit or "s").lower()]
