"""Issue 15: "The quickstart reports success when what it started is not running". It now stops
what it started on SIGTERM and SIGHUP, refuses ports an earlier run (or anything) still holds,
and says "serving" only when the listeners are its own processes."""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from app.procs import port_bindable
from tests.support.quickstart import gone, listener_pids, quickstart_ports, read_until_serving

FERRY = str(Path(sys.executable).with_name("ferry"))


def _start(data_dir: Path, port: int, remote_port: int) -> subprocess.Popen[str]:
    return subprocess.Popen([FERRY, "quickstart", "--data-dir", str(data_dir), "--port", str(port),
                             "--remote-port", str(remote_port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={k: v for k, v in os.environ.items() if not k.startswith("FERRY_")})


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
