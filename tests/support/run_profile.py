"""The run profile as the Dockerfile installs it: what it copies, and an empty venv to install into."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD_CONTEXT = ("pyproject.toml", "README.md", "app", "workers", "migrations")  # the Dockerfile's COPY lines


def copy_build_context(src: Path) -> Path:
    """A copy of what the Dockerfile copies (pip builds in place: no build/ left in the checkout)."""
    src.mkdir(parents=True)
    for name in BUILD_CONTEXT:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, src / name)
    return src


def empty_venv(venv: Path) -> Path:
    """A new venv (no packages but pip) of this interpreter."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    return venv
