"""Issue 31: the default cache budget was 256 GiB whatever the disk (66 GiB free here), so the
doctor warned on every run. It is now a share of what the data dir's filesystem can give."""

from __future__ import annotations

from pathlib import Path

from app.config import load_settings
from app.domain.cache_budget import MIN_BUDGET, default_cache_bytes, room_bytes

GiB = 1024**3


def test_default_fits_a_small_filesystem() -> None:
    total, free = 10 * GiB, 6 * GiB  # a 10 GiB disk, 4 GiB used by others, Ferry holding nothing
    budget = default_cache_bytes(total, free, 0, GiB, 0.05)
    assert 0 < budget <= free - GiB  # what the doctor checks: no warning
    assert budget == int(0.8 * (free - GiB))


def test_a_restart_with_a_full_cache_keeps_the_same_budget() -> None:
    """The bytes the data dir holds are Ferry's room, not someone else's: no shrink, no eviction."""
    first = default_cache_bytes(10 * GiB, 6 * GiB, 0, GiB, 0.05)
    again = default_cache_bytes(10 * GiB, 6 * GiB - first, first, GiB, 0.05)
    assert again == first


def test_a_full_disk_still_gets_a_budget_not_zero_which_means_unbounded() -> None:
    assert default_cache_bytes(10 * GiB, 0, 0, GiB, 0.05) == MIN_BUDGET
    assert room_bytes(100 * GiB, 50 * GiB, 10 * GiB, GiB, 0.05) == 55 * GiB


def test_settings_default_is_computed_from_the_data_dir_and_an_explicit_value_wins(tmp_path: Path,
                                                                                    monkeypatch) -> None:
    import shutil

    for name in ("FERRY_CACHE_BYTES", "FERRY_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    settings = load_settings(None, data_dir=tmp_path / "not-yet")
    usage = shutil.disk_usage(tmp_path)
    reserve = max(settings.disk_reserve_bytes, int(usage.total * settings.disk_reserve_ratio))
    assert MIN_BUDGET <= settings.cache_bytes <= max(MIN_BUDGET, usage.free - reserve)
    assert settings.cache_bytes != 256 * GiB
    monkeypatch.setenv("FERRY_CACHE_BYTES", "2GiB")
    assert load_settings(None, data_dir=tmp_path).cache_bytes == 2 * GiB
