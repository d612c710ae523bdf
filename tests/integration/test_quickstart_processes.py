"""Issue 15: "The quickstart reports success when what it started is not running". It now stops
what it started on SIGTERM and SIGHUP, refuses ports an earlier run (or anything) still holds,
and says "serving" only when the listeners are its own processes."""

from __future__ import annotations

import contextlib
import http.server
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from app.procs import port_bindable
from tests.support.quickstart import gone, listener_pids, quickstart_ports, read_until_serving

FERRY = str(Path(sys.executable).with_name("ferry"))


def _start(data_dir: Path, port: int, remote_port: int, *, background: bool = False) -> subprocess.Popen[str]:
    """``background``: SIGINT inherited as ignored, as a job started with ``&`` from a script,
    CI or ``nohup`` gets it (the shell does that when job control is off)."""
    def ignore_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    return subprocess.Popen([FERRY, "quickstart", "--data-dir", str(data_dir), "--port", str(port),
                             "--remote-port", str(remote_port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={k: v for k, v in os.environ.items() if not k.startswith("FERRY_")},
                            preexec_fn=ignore_sigint if background else None)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_signal_stops_everything_it_started(tmp_path: Path, signum: int) -> None:
    with quickstart_ports() as (port, remote_port):
        proc = _start(tmp_path / "qs", port, remote_port)
        try:
            read_until_serving(proc, 90)
            ports = [port, remote_port, remote_port + 1, remote_port + 2]
            children = listener_pids(ports)
            assert len(children) >= 2, children  # the gateway and weed
            proc.send_signal(signum)
            assert proc.wait(40) == 0
            assert gone(children), f"still running after {signal.Signals(signum).name}: {children}"
            assert all(port_bindable(p) for p in ports)
        finally:
            if proc.poll() is None:
                proc.kill()


def test_sigint_stops_everything_when_started_in_the_background(tmp_path: Path) -> None:
    """Issue 31: started with SIGINT ignored, the old quickstart never saw `kill -INT` (weed and
    the gateway ran on). It handles SIGINT itself now, and says it stops and what it keeps."""
    with quickstart_ports() as (port, remote_port):
        proc = _start(tmp_path / "qs", port, remote_port, background=True)
        children: set[int] = set()
        try:
            lines: list[str] = []
            read_until_serving(proc, 90, lines)
            children = listener_pids([port, remote_port, remote_port + 1, remote_port + 2])
            assert len(children) >= 2, children
            proc.send_signal(signal.SIGINT)
            assert proc.wait(40) == 0
            assert gone(children), f"still running after SIGINT: {children}"
            time.sleep(0.5)  # the reader thread drains the last lines
            out = "".join(lines)
            assert f"SIGINT: stopping the gateway and SeaweedFS; data and keys are kept in {tmp_path / 'qs'}" in out
        finally:
            if proc.poll() is None:
                proc.kill()
            for pid in children:  # on a failure, what the quickstart left running (own sessions)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)


def test_port_held_by_another_process_is_refused_not_reported_as_serving(tmp_path: Path) -> None:
    """An earlier run's gateway still answering on the port: the old quickstart printed "Ferry is
    serving" and exited 0, talking to it. Stood in for by an HTTP server that answers everything."""
    with quickstart_ports() as (port, remote_port):
        squatter = http.server.ThreadingHTTPServer(("127.0.0.1", port), http.server.SimpleHTTPRequestHandler)
        threading.Thread(target=squatter.serve_forever, daemon=True).start()
        try:
            proc = _start(tmp_path / "qs", port, remote_port)
            out, _ = proc.communicate(timeout=90)
        finally:
            squatter.shutdown()
            squatter.server_close()
        assert proc.returncode != 0, out
        assert "Ferry is serving" not in out, out
        assert f"port {port} is in use (pid {os.getpid()})" in out, out
        assert port_bindable(remote_port), "SeaweedFS left running after the refusal"
