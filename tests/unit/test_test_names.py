"""Test modules are imported by their base name (the test folders are not packages), so two
modules of one name break collection of the whole suite ("import file mismatch"). It happened
twice (test_prefetch, test_mount_listing); this fails at once instead of at collection."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_name() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
