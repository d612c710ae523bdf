"""Sizes and durations parse the same in settings and the CLI (issue 17: FERRY_CACHE_BYTES=100GiB
was refused while ``ferry tenants quota`` accepted 100GiB)."""

from __future__ import annotations

import pytest

from app.cli_admin import parse_size as cli_parse_size
from app.config import ConfigError, load_settings
from app.domain.units import parse_duration, parse_size


@pytest.mark.parametrize(("text", "expected"), [
    ("100GiB", 100 * 1024**3), ("500MB", 500 * 1000**2), ("1048576", 1048576), ("8 MiB", 8 * 1024**2),
    ("1.5KiB", 1536), ("2T", 2 * 1000**4),
])
def test_sizes_agree_between_settings_and_cli(monkeypatch: pytest.MonkeyPatch, text: str, expected: int) -> None:
    assert parse_size(text) == cli_parse_size(text) == expected
    monkeypatch.setenv("FERRY_CACHE_BYTES", text)
    monkeypatch.setenv("FERRY_DISK_RESERVE_BYTES", text)
    settings = load_settings()
    assert settings.cache_bytes == settings.disk_reserve_bytes == expected


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("5m", 300), ("2h", 7200), ("7d", 604800),
                                               ("250ms", 0.25), ("12", 12), ("1.5", 1.5)])
def test_durations_in_settings(monkeypatch: pytest.MonkeyPatch, text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds
    monkeypatch.setenv("FERRY_JOURNAL_RETENTION_SECONDS", text)
    assert load_settings().journal_retention_seconds == seconds


def test_bad_units_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRY_CACHE_BYTES", "lots")
    with pytest.raises(ConfigError, match=r"FERRY_CACHE_BYTES: .*not a size: 'lots'"):
        load_settings()
    monkeypatch.delenv("FERRY_CACHE_BYTES")
    monkeypatch.setenv("FERRY_SWEEP_INTERVAL", "5 fortnights")
    with pytest.raises(ConfigError, match=r"FERRY_SWEEP_INTERVAL: .*not a duration"):
        load_settings()


def test_config_file_takes_units_too(tmp_path: pytest.TempPathFactory) -> None:
    cfg = tmp_path / "ferry.toml"  # type: ignore[operator]
    cfg.write_text('[ferry]\ncache_bytes = "2GiB"\nmultipart_expiry = "3d"\n')
    settings = load_settings(cfg)
    assert settings.cache_bytes == 2 * 1024**3 and settings.multipart_expiry == 3 * 86400
