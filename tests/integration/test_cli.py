"""The `ferry` command line: version, db upgrade, clear configuration errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

FERRY = str(Path(sys.executable).with_name("ferry"))


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("FERRY_")}
    base.update(env or {})
    return subprocess.run([FERRY, *args], capture_output=True, text=True, env=base, timeout=60)


def test_version() -> None:
    out = _run("version")
    assert out.returncode == 0
    assert out.stdout.startswith("ferry ")


def test_db_upgrade_creates_sqlite_catalog(tmp_path: Path) -> None:
    out = _run("db", "upgrade", env={"FERRY_DATA_DIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "ferry.db").exists()


def test_invalid_setting_is_reported_by_name(tmp_path: Path) -> None:
    out = _run("serve", env={"FERRY_DATA_DIR": str(tmp_path), "FERRY_PORT": "99999"})
    assert out.returncode == 2
    assert "FERRY_PORT" in out.stderr


def test_config_file_is_read_and_env_wins(tmp_path: Path) -> None:
    cfg = tmp_path / "ferry.toml"
    cfg.write_text('[ferry]\nport = 70000\nremote_endpoint = "ftp://nope"\n')
    out = _run("serve", "--config", str(cfg), env={"FERRY_DATA_DIR": str(tmp_path)})
    assert out.returncode == 2
    assert "FERRY_PORT" in out.stderr and "FERRY_REMOTE_ENDPOINT" in out.stderr


def test_environment_overrides_config_file(tmp_path: Path, monkeypatch: object) -> None:
    from app.config import load_settings

    cfg = tmp_path / "ferry.toml"
    cfg.write_text('[ferry]\nport = 7000\nremote_endpoint = "http://file:1"\n')
    env = {"FERRY_PORT": "7001"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        settings = load_settings(cfg)
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    assert settings.port == 7001
    assert settings.remote_endpoint == "http://file:1"


def test_tls_settings_must_come_in_pairs(tmp_path: Path) -> None:
    out = _run("serve", env={"FERRY_DATA_DIR": str(tmp_path), "FERRY_TLS_CERT": "/x.pem"})
    assert out.returncode == 2
    assert "FERRY_TLS_CERT and FERRY_TLS_KEY" in out.stderr


def test_serve_without_any_remote_refuses_in_one_line(tmp_path: Path) -> None:
    """Issue 17: it started, logged "remote (AWS default)", and only /readyz said "Unable to locate
    credentials". It now refuses at start, naming what is missing."""
    out = _run("serve", env={"FERRY_DATA_DIR": str(tmp_path), "FERRY_PORT": "0"})
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "FERRY_REMOTE_ENDPOINT" in lines[0] and "FERRY_REMOTE_DEFAULT_CHAIN" in lines[0]
    assert not (tmp_path / "ferry.lock").exists(), "refused before taking the data dir"


def test_serve_help_shows_variable_and_default_per_flag() -> None:
    out = subprocess.run([FERRY, "serve", "--help"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "COLUMNS": "250"})
    assert out.returncode == 0
    for flag, default in (("--host", "default: 127.0.0.1"), ("--port", "default: 9000"),
                          ("--workers", "default: 1"), ("--data-dir", "default: var/ferry"),
                          ("--database-url", "default: SQLite in the data dir"),
                          ("--remote-endpoint", "default: AWS S3"), ("--tls-cert", "default: none")):
        line = next(x for x in out.stdout.splitlines() if f"{flag} " in x)
        assert default in line and "env FERRY_" in line, line
